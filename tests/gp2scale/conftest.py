"""gp2Scale needs float64 (CG to 1e-8 with a 1e-2 nugget, SLQ log terms): x64 is on for every
test of this package and restored afterwards so the other papers' tests keep float32.

The tests compile many small solver programs that run for milliseconds, so they compile with
few XLA passes (``tests/compile_passes.py``); the module with the smoke run (``smoke_run``)
keeps the default compiler for that run and the tests that use it."""

from tests.compile_passes import per_test_fixture
from tests.x64 import x64_package_fixture

_x64 = x64_package_fixture()
_few_passes_module, _few_passes_test = per_test_fixture(skip_module_attr="smoke_run")
