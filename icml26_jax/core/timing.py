"""Wall-clock timing for benchmarks: the median of repeated, synchronised calls."""

from __future__ import annotations

import time

import jax
import numpy as np


def median_seconds(fn, *args, repeats: int, warmup: int = 1) -> float:
    """Median seconds of ``fn(*args)`` over ``repeats`` calls after ``warmup`` untimed ones
    (compilation); every call waits for its device results (``jax.block_until_ready``)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def alternating_medians(fns, repeats: int) -> list[float]:
    """Median seconds of each of ``fns`` (no arguments) over ``repeats`` rounds, one
    synchronised call of each per round after one untimed warm-up call each (compilation),
    so the load of a shared machine hits every function alike."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for fn in fns:
        jax.block_until_ready(fn())
    rounds = [[median_seconds(fn, repeats=1, warmup=0) for fn in fns] for _ in range(repeats)]
    return [float(v) for v in np.median(rounds, axis=0)]


# Planning model of one H100 for the ``gpu`` config variants (issue 43). Effective float32
# throughput: XLA's default precision runs float32 matmuls as TF32 on Hopper (~495 TFLOP/s
# dense peak), and the models here are small (d_model <= 512), whose steps reach a few
# percent of peak; 25 TFLOP/s (~5%) is the planning figure. Each step also pays a fixed
# cost for its ~100-300 kernel launches and the optimizer update, taken as 2 ms. Both are
# assumptions until a run on the accelerator replaces them (the paper READMEs say which).
H100_EFFECTIVE_FLOPS = 25e12
H100_STEP_OVERHEAD_S = 2e-3


def step_flops(fn, *args, **kwargs) -> float:
    """FLOPs of one call of ``jax.jit(fn)(*args)`` from XLA's cost analysis of the lowered
    program (nothing is compiled or run).

    The body of a ``lax.scan`` or ``while_loop`` is counted once, not once per iteration: pass
    the function of a single training step (vmapped over replicas if they run together), not
    a chunk of scanned steps.

    Raises:
      ValueError: the backend gives no cost analysis or no ``flops`` entry.
    """
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    cost = jitted.lower(*args, **kwargs).cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jaxlibs return one dict per program
        cost = cost[0] if cost else None
    if not cost or "flops" not in cost:
        raise ValueError(f"no FLOP count in the cost analysis of {fn!r}: {cost!r}")
    return float(cost["flops"])


def h100_seconds(flops_per_step: float, steps: int) -> float:
    """Planned wall seconds of ``steps`` steps of ``flops_per_step`` each on one H100:
    ``steps * (flops_per_step / H100_EFFECTIVE_FLOPS + H100_STEP_OVERHEAD_S)``."""
    if flops_per_step < 0 or steps < 0:
        raise ValueError(f"flops_per_step and steps must be >= 0, got {flops_per_step}, {steps}")
    return float(steps) * (float(flops_per_step) / H100_EFFECTIVE_FLOPS + H100_STEP_OVERHEAD_S)


def machine() -> dict:
    """What a benchmark ran on, stored beside its timings: platform, JAX version, first
    device, device and CPU counts."""
    import os
    import platform

    return {"platform": platform.platform(), "jax": jax.__version__,
            "devices": str(jax.devices()[0]), "device_count": jax.device_count(),
            "cpus": os.cpu_count()}
