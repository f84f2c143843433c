"""Test-wide JAX set-up: 8 CPU devices (so every sharded path runs) and strict promotion.

pytest imports this module before any test module, hence before any JAX backend starts;
the CPU device count cannot change after that.
"""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")


import gc  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drops JAX's compiled programs after each test module.

    The whole suite runs in one process. Without this, every jitted program of every module
    stays alive until the end, and late modules compile with many GiB already held (a full
    run aborted inside an XLA compile at 95 %).
    """
    yield
    jax.clear_caches()
    gc.collect()
