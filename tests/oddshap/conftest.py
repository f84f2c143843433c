"""OddSHAP's regression, spectra and exact Shapley values are float64 (spec §Pitfalls): x64 is
on for every test of this package and restored afterwards so the other papers' tests keep
float32."""

from tests.x64 import x64_package_fixture

_x64 = x64_package_fixture()
