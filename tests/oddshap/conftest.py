"""OddSHAP's regression, spectra and exact Shapley values are float64 (spec §Pitfalls): x64 is
on for every test of this package and restored afterwards so the other papers' tests keep
float32.

The package also compiles with few XLA passes (``tests/compile_passes.py``): the
estimators are small programs compiled once per budget, and compiling them optimised cost far
more than running them (as in the smoke notebook). The flag is read at compile time; every
property tested here is a relation between two runs or a tolerance that holds unoptimised."""

from tests.compile_passes import package_fixture
from tests.x64 import x64_package_fixture

_x64 = x64_package_fixture()
_few_passes = package_fixture()
