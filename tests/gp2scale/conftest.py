"""gp2Scale needs float64 (CG to 1e-8 with a 1e-2 nugget, SLQ log terms): x64 is on for every
test of this package and restored afterwards so the other papers' tests keep float32."""

import jax
import pytest


@pytest.fixture(autouse=True, scope="package")
def _x64():
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)
