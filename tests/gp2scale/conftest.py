"""gp2Scale needs float64 (CG to 1e-8 with a 1e-2 nugget, SLQ log terms): x64 is on for every
test of this package and restored afterwards so the other papers' tests keep float32."""

from tests.x64 import x64_package_fixture

_x64 = x64_package_fixture()
