"""The tests of this package compile with few XLA passes (``tests/compile_passes.py``): they fit
a few dozen Gaussians at 16 x 16 pixels for a step or two, and compiling the rasteriser's
gradients (and Hessians) optimised cost far more than running them."""

from tests.compile_passes import package_fixture

_few_passes = package_fixture()
