"""The tests of this package compile with few XLA passes (``tests/compile_passes.py``), except
``test_smoke_claims``, which runs the public smoke config exactly as the entry script does. The
other tests run tiny models for a few steps, and compiling them optimised cost far more than
running them."""

from tests.compile_passes import per_test_fixture

_few_passes_module, _few_passes_test = per_test_fixture(skip_tests=("test_smoke_claims",))
