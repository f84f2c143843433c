"""The tests of this package compile with few XLA passes (``tests/compile_passes.py``): they
train a small CNN for a handful of steps and compare two runs, or an equation with its reference,
at float32 tolerance. The smoke entry run is a subprocess and keeps the default compiler.

Except ``test_clients``: it compares a vmapped round with a per-client loop (and a sharded
round with an unsharded one) at 2e-5. With few passes and XLA:CPU's elemental emitters (the
suite's, tests/conftest.py) the first conv block's parameters of the two differ by up to
2.8e-5 after one local epoch (~3 % of their update; every later layer agrees to 1e-10), and
both differ from the default compiler's by 3e-5; with the full passes the two programs agree
to 1e-10 and equal the default compiler's bit for bit (measured). The cause is not pinned
down: one gradient of that block on random inputs agrees to 1e-7 in every mode, so it is the
training data and the steps that magnify the unoptimised code's rounding there.
"""

from tests.compile_passes import module_fixture

_few_passes = module_fixture(skip_modules=("test_clients",))
