"""ATC needs float64 prefix sums: x64 is on for every test of this package, and restored
afterwards so that the other papers' tests keep JAX's float32 default."""

from tests.x64 import x64_package_fixture

_x64 = x64_package_fixture()
