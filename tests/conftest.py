"""Test-wide JAX set-up: 8 CPU devices (so every sharded path runs) and strict promotion.

pytest imports this module before any test module, hence before any JAX backend starts;
the CPU device count cannot change after that.
"""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")
