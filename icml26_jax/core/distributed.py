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
            raise ValueError(f"num_cpu_devices must be >= 1, got {num_cpu_devices}")
        jax.config.update("jax_num_cpu_devices", int(num_cpu_devices))
    multi = num_processes is not None and int(num_processes) > 1
    if not multi:
        if num_processes is not None and int(num_processes) < 1:
            raise ValueError(f"num_processes must be >= 1, got {num_processes}")
        if _on_tpu_pod() and coordinator_address is None:
            jax.distributed.initialize()
        return
    if not coordinator_address:
        raise ValueError(
            f"num_processes={num_processes} needs coordinator_address='host:port' "
            "(the address of process 0, e.g. 127.0.0.1:12355)")
    if process_id is None or not 0 <= int(process_id) < int(num_processes):
        raise ValueError(
            f"process_id must be in [0, {num_processes}) when num_processes={num_processes}, "
            f"got process_id={process_id}")
    # The CPU backend needs a cross-process collectives implementation; harmless elsewhere.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=int(num_processes),
        process_id=int(process_id),
    )


def is_primary() -> bool:
    """True on process 0, the one process that writes results and figures."""
    return jax.process_index() == 0
