"""Fewer XLA optimisation passes for test code that compiles many small programs.

Tests that train tiny models for a few steps spend far more time in XLA's optimisation passes
than in running what they compile; ``jax_disable_most_optimizations`` compiles the same
equations with less compiler work. The flag is read at compile time; the properties tested
under it are relations between two runs, equations at float32 tolerance or bounds that hold
unoptimised. A paper's public smoke run, when a test asserts its claims, keeps the default
compiler (``skip`` below).
"""

import contextlib

import jax
import pytest

_FLAG = "jax_disable_most_optimizations"


@contextlib.contextmanager
def few_passes():
    """``jax_disable_most_optimizations`` on inside the block, the previous setting restored."""
    before = jax.config.read(_FLAG)
    jax.config.update(_FLAG, True)
    try:
        yield
    finally:
        jax.config.update(_FLAG, before)


def package_fixture():
    """An autouse, package-scoped fixture: every test of the package compiles with few passes.
    In a package's ``conftest.py``: ``_few_passes = package_fixture()``."""

    @pytest.fixture(autouse=True, scope="package")
    def _few_passes():
        with few_passes():
            yield

    return _few_passes


def module_fixture(skip_modules=()):
    """An autouse, module-scoped fixture for a test module (or a package's ``conftest.py``):
    every test and module fixture of each module compiles with few passes, except in the
    modules named (last dotted part) in ``skip_modules``."""

    @pytest.fixture(autouse=True, scope="module")
    def _few_passes_module(request):
        if request.module.__name__.rsplit(".", 1)[-1] in skip_modules:
            yield
            return
        with few_passes():
            yield

    return _few_passes_module


def per_test_fixture(skip_tests=(), skip_module_attr=None):
    """Autouse fixtures for a package's ``conftest.py`` whose smoke run keeps the default compiler.

    Tests named in ``skip_tests`` run with the default passes. In a module that defines the
    fixture named ``skip_module_attr`` (the module-scoped smoke run), the tests that use it run
    with the default passes and its other tests with few passes, one by one; every other module
    gets few passes for the whole module (its module fixtures included).
    Returns the two fixtures; bind both in the conftest.
    """

    def _smoke_module(request):
        return skip_module_attr is not None and hasattr(request.module, skip_module_attr)

    @pytest.fixture(autouse=True, scope="module")
    def _few_passes_module(request):
        if _smoke_module(request) or skip_tests:
            yield
            return
        with few_passes():
            yield

    @pytest.fixture(autouse=True)
    def _few_passes_test(request):
        default = (request.node.name in skip_tests
                   or (_smoke_module(request) and skip_module_attr in request.fixturenames))
        if default or not (_smoke_module(request) or skip_tests):
            yield
            return
        with few_passes():
            yield

    return _few_passes_module, _few_passes_test
