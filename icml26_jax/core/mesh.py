"""Mesh axis names and helpers that place a leading users/runs axis on devices.

Simulated users (or clients) are sharded over the ``USERS`` mesh axis. Devices that the
users axis cannot use (when the number of users is not a multiple of the device count) go
to the ``RUNS`` axis, over which independent replicas of an experiment are sharded, so every
device (and every process of a multi-host job) takes part in every computation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

USERS = "users"
RUNS = "runs"
DATA = "data"


def users_mesh(n: int, runs: int | None = None) -> Mesh:
    """A 2-D ``(RUNS, USERS)`` mesh for ``n`` users and ``runs`` independent replicas.

    The users axis gets ``gcd(n, jax.device_count())`` devices; the remaining factor of the
    device count goes to the runs axis (if ``runs`` is given it must be divisible by it).
    In a single process, when ``runs`` is not divisible, fewer devices are used; in a
    multi-process job every device must be used, so that is a ``ValueError``.

    Args:
      n: number of users (>= 1).
      runs: number of independent runs sharded over the runs axis, or None for a runs
        axis of size 1 (only the users axis is used).

    Returns:
      A ``jax.sharding.Mesh`` with axis names ``(RUNS, USERS)``.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"users must be a positive integer, got users={n!r}")
    if runs is not None and (not isinstance(runs, (int, np.integer)) or runs < 1):
        raise ValueError(f"runs must be a positive integer, got runs={runs!r}")
    devices = jax.devices()
    n_dev = len(devices)
    u = math.gcd(int(n), n_dev)
    r = 1 if runs is None else math.gcd(int(runs), n_dev // u)
    if jax.process_count() > 1 and u * r != n_dev:
        if runs is None:
            raise ValueError(
                f"users={n} must be a multiple of the {n_dev} devices of this "
                f"{jax.process_count()}-process job (or pass runs= so spare devices shard "
                "the runs axis)")
        raise ValueError(
            f"runs={runs} must be a multiple of {n_dev // u} in this "
            f"{jax.process_count()}-process job: users={n} uses {u} of the {n_dev} devices "
            "and the runs axis must take the rest")
    return make_mesh((r, u), (RUNS, USERS), devices=devices[: r * u])


def runs_mesh(n: int) -> Mesh:
    """A 1-D ``RUNS`` mesh for ``n`` independent stacked replicas (arms x seeds ...): over
    the largest divisor of ``n`` not above the device count, so the leading replica axis
    shards evenly (15 replicas on 8 devices use 5)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    d = max(k for k in range(1, min(n, jax.device_count()) + 1) if n % k == 0)
    return make_mesh((d,), (RUNS,))


def map_runs(mesh: Mesh, fn, static, *args):
    """``fn(static, *args_r)`` for every replica ``r`` of the leading axis of ``args``, the
    replicas sharded over the ``RUNS`` axis of ``mesh`` (no communication: each device maps
    its own replicas).

    ``fn`` must be a module-level function and ``static`` hashable (a tuple of configs,
    graphdefs, ints): both are jit static arguments, so repeated calls reuse the compiled
    program. ``args`` are host or device arrays (pytrees) with the same leading size, a
    multiple of the mesh size; the outputs carry the leading axis, sharded.
    """
    n = {np.shape(a)[0] for a in jax.tree.leaves(args)}
    if len(n) != 1:
        raise ValueError(f"map_runs: every argument needs the same leading size, got {n}")
    def place(a):
        if isinstance(a, jax.Array) and getattr(a.sharding, "mesh", None) == mesh:
            return a
        return shard_leading(np.asarray(a), mesh, RUNS)

    placed = jax.tree.map(place, args)
    with jax.set_mesh(mesh):
        return _map_runs(mesh, fn, static, *placed)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _map_runs(mesh, fn, static, *args):
    # A local map per device: the library functions are written per replica, so the
    # replication checks of shard_map are off.
    body = jax.vmap(lambda *a: fn(static, *a))
    return jax.shard_map(body, mesh=mesh, in_specs=tuple(P(RUNS) for _ in args),
                         out_specs=P(RUNS), check_vma=False)(*args)


def make_mesh(shape: Sequence[int], names: Sequence[str], devices=None, *,
              auto: bool = False) -> Mesh:
    """``jax.make_mesh`` over the first ``prod(shape)`` devices (all of them by default).

    Axes are Explicit (JAX's default) unless ``auto``: then XLA propagates shardings through
    the program (plain data parallelism over a model whose reshapes would each need an
    ``out_sharding`` under Explicit axes).
    """
    size = math.prod(shape)
    devices = jax.devices()[:size] if devices is None else list(devices)
    if len(devices) != size:
        raise ValueError(f"mesh shape {tuple(shape)} needs {size} devices, got {len(devices)}")
    kw = {}
    if auto:
        kw["axis_types"] = (jax.sharding.AxisType.Auto,) * len(shape)
    return jax.make_mesh(tuple(shape), tuple(names), devices=devices, **kw)


def put(x, mesh: Mesh, spec: P) -> jax.Array:
    """Places a host array (the same value on every process) with ``NamedSharding(mesh, spec)``.

    Works in single- and multi-process jobs: each process materialises only the shards its
    own devices hold.
    """
    x = np.asarray(x)
    sharding = NamedSharding(mesh, spec)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def shard_leading(x, mesh: Mesh, axis: str | tuple[str, ...] = USERS, dim: int = 0) -> jax.Array:
    """Shards dimension ``dim`` of ``x`` over mesh ``axis``; other dimensions are replicated."""
    x = np.asarray(x)
    if x.shape[dim] % _axis_size(mesh, axis):
        raise ValueError(
            f"dimension {dim} of size {x.shape[dim]} is not divisible by the mesh axis "
            f"{axis!r} of size {_axis_size(mesh, axis)}")
    spec = [None] * x.ndim
    spec[dim] = axis
    return put(x, mesh, P(*spec))


def replicate(x, mesh: Mesh) -> jax.Array:
    """Replicates a host array on every device of ``mesh``."""
    return put(x, mesh, P())


def to_host(x) -> np.ndarray:
    """A replicated or fully addressable array (or pytree) as host NumPy arrays."""
    return jax.tree.map(lambda a: np.asarray(jax.device_get(a)), x)


def _axis_size(mesh: Mesh, axis) -> int:
    names = (axis,) if isinstance(axis, str) else tuple(axis)
    return math.prod(mesh.shape[a] for a in names)


def data_mesh(batch: int):
    """A 1-D ``DATA`` mesh over every device when ``batch`` divides evenly, else None."""
    n = jax.device_count()
    if n > 1 and batch % n == 0:
        return make_mesh((n,), (DATA,), auto=True)
    return None


def batched(fn, n: int, batch: int, *arrays, mesh=None):
    """Runs ``fn`` on consecutive batches (the last one padded) and concatenates on the host.

    With a ``mesh``, every batch is sharded over its ``DATA`` axis (the caller's parameters
    must be replicated on the same mesh).
    """
    outs = []
    for s0 in range(0, n, batch):
        idx = np.arange(s0, s0 + batch) % n
        if mesh is None:
            args = [jnp.asarray(np.asarray(a)[idx]) for a in arrays]
        else:
            args = [shard_leading(np.asarray(a)[idx], mesh, DATA)
                    for a in arrays]
        res = fn(*args)
        keep = min(batch, n - s0)
        outs.append(jax.tree.map(lambda v: np.asarray(jax.device_get(v))[:keep], res))
    return jax.tree.map(lambda *v: np.concatenate(v, 0), *outs)
