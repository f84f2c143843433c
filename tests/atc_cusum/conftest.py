"""ATC needs float64 prefix sums: x64 is on for every test of this package, and restored
afterwards so that the other papers' tests keep JAX's float32 default."""

import jax
import pytest


@pytest.fixture(autouse=True, scope="package")
def _x64():
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)
