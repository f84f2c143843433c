"""float64 for the test packages that need it (GP solves, Shapley regressions): configuring
JAX is the tests' job, not the library's."""

import contextlib

import jax
import pytest


@contextlib.contextmanager
def enabled():
    """``jax_enable_x64`` on inside the block, the previous setting restored after."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def x64_package_fixture():
    """An autouse, package-scoped fixture with float64 on for every test of a package (the
    other papers keep JAX's float32 default). In a package's ``conftest.py``:
    ``_x64 = x64_package_fixture()``."""

    @pytest.fixture(autouse=True, scope="package")
    def _x64():
        with enabled():
            yield

    return _x64
