"""Tests here compile many small programs that each run for milliseconds, so they compile with
few XLA passes (``tests/compile_passes.py``). The module with the smoke run (``smoke_run``)
keeps the default compiler for that run and the tests that use it (one re-runs it and compares
numbers); its other tests get few passes one by one."""

from tests.compile_passes import per_test_fixture

_few_passes_module, _few_passes_test = per_test_fixture(skip_module_attr="smoke_run")
