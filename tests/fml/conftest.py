"""The tests of this package compile with few XLA passes (``tests/compile_passes.py``): they
train a small CNN for a handful of steps and compare two runs, or an equation with its reference,
at float32 tolerance. The smoke entry run is a subprocess and keeps the default compiler."""

from tests.compile_passes import package_fixture

_few_passes = package_fixture()
