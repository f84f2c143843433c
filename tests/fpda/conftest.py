"""The tests of this package compile with few XLA passes (``tests/compile_passes.py``): they run
a small forgery detector for a few steps (the tiny end-to-end run is not the public smoke run and
asserts no claim) and compare two runs, or an equation with its reference."""

from tests.compile_passes import package_fixture

_few_passes = package_fixture()
