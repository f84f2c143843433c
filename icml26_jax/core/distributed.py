"""Process-level JAX set-up for entry scripts: CPU device count and multi-process init.

Only entry points (experiment scripts, notebooks, multi-process test workers) call these
functions, after flag parsing and before any other JAX call; importing the library never
configures JAX.
"""

from __future__ import annotations

import os

import jax

# Environment variables whose presence means we run on a Cloud TPU pod slice, where
# ``jax.distributed.initialize()`` discovers the coordinator and process ids by itself.
_TPU_POD_ENV = ("TPU_WORKER_HOSTNAMES", "MEGASCALE_COORDINATOR_ADDRESS", "CLOUD_TPU_TASK_ID")


def _on_tpu_pod() -> bool:
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    return "," in hosts or any(os.environ.get(k) for k in _TPU_POD_ENV[1:])


def maybe_initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    num_cpu_devices: int | None = None,
) -> None:
    """Initialises JAX for this process; a no-op for a plain single-process run.

    - ``num_processes`` in (None, 1) and not on a TPU pod: single process; only
      ``num_cpu_devices`` (if given) is applied, which affects the CPU backend alone.
    - On a TPU pod slice with no explicit arguments: ``jax.distributed.initialize()``.
    - Otherwise (e.g. several CPU processes on 127.0.0.1): CPU collectives go over gloo, then
      ``jax.distributed.initialize(coordinator_address, num_processes, process_id)``.

    Must run before any JAX computation or device query.

    Args:
      coordinator_address: ``host:port`` of process 0.
      num_processes: total number of processes.
      process_id: this process's index in ``[0, num_processes)``.
      num_cpu_devices: CPU devices per process (simulated devices on the host platform).
    """
    if num_cpu_devices is not None:
        if int(num_cpu_devices) < 1:
            raise ValueError(f"--num_cpu_devices must be >= 1, got {num_cpu_devices}")
        jax.config.update("jax_num_cpu_devices", int(num_cpu_devices))
    multi = num_processes is not None and int(num_processes) > 1
    if not multi:
        if num_processes is not None and int(num_processes) < 1:
            raise ValueError(f"--num_processes must be >= 1, got {num_processes}")
        if _on_tpu_pod() and coordinator_address is None:
            jax.distributed.initialize()
        return
    if not coordinator_address:
        raise ValueError(
            f"--coordinator_address is required with --num_processes={num_processes}: the "
            "host:port of process 0 (e.g. 127.0.0.1:12355)")
    host, _, port = str(coordinator_address).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--coordinator_address must be host:port with a port in 1..65535, "
                         f"got {coordinator_address!r}")
    if process_id is None or not 0 <= int(process_id) < int(num_processes):
        raise ValueError(
            f"--process_id must be in [0, {num_processes}) with --num_processes="
            f"{num_processes}, got --process_id={process_id}")
    # The CPU backend needs a cross-process collectives implementation; harmless elsewhere.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=int(num_processes),
        process_id=int(process_id),
    )


def is_primary() -> bool:
    """Whether this process writes: True on process 0 only.

    Every writer goes through this one function: results.json and summaries
    (``core.results``), figures (``core.plotting.save``), printed tables, data caches
    (:func:`primary_first`). Orbax checkpoints are the exception: every process calls them and
    orbax writes each process's shards.
    """
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Waits until every process reaches the barrier ``name``; a no-op in a single process."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils  # Deferred: multi-process jobs only.

        multihost_utils.sync_global_devices(name)


def agreed(flag: bool) -> bool:
    """Process 0's ``flag`` on every process; ``flag`` itself in a single process.

    For a decision taken from something that processes may see differently (the wall clock, a
    directory that process 0 is writing): every process must take the same branch, or the
    collectives that follow (orbax's, a sharded program's) deadlock or mismatch.
    """
    if jax.process_count() == 1:
        return bool(flag)
    import numpy as np
    from jax.experimental import multihost_utils  # Deferred: multi-process jobs only.

    return bool(multihost_utils.broadcast_one_to_all(np.asarray(bool(flag))))


def primary_first(fn, name: str):
    """``fn()`` on process 0, then (after a barrier) on the other processes.

    For a cache that ``fn`` writes to a shared directory (a prepared data set, a fitted model):
    process 0 builds it, the others find it and read it, so no two processes write one file.
    Returns ``fn()``'s result on every process.
    """
    out = fn() if is_primary() else None
    barrier(f"primary_first:{name}")
    return out if is_primary() else fn()
