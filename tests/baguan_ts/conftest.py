"""Tests here train and evaluate a tiny forecaster for a few steps, so they compile with few XLA
passes (``tests/compile_passes.py``). The module with the smoke run (``smoke``) keeps the
default compiler for that run and the tests that use it."""

from tests.compile_passes import per_test_fixture

_few_passes_module, _few_passes_test = per_test_fixture(skip_module_attr="smoke")
