"""Mesh axis names and helpers that place a leading users/runs axis on devices.

Simulated users (or clients) are sharded over the ``USERS`` mesh axis. Independent replicas
of an experiment (arms x seeds, games, scenes ...) are sharded over the ``RUNS`` axis of
:func:`runs_mesh`: each device maps ``ceil(n / device_count)`` replicas, the fewest any layout
allows, on the fewest devices (of every process) that give it; :func:`map_runs` pads the
replica axis to a multiple of the mesh size and :func:`to_host` drops the padding.
:func:`to_host` reads any global array on every process, gathering the shards held by other
processes; :func:`put_rows` builds a sharded array from per-process data.
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


def runs_mesh(n: int | None = None) -> Mesh:
    """A 1-D ``RUNS`` mesh for ``n`` independent stacked replicas (arms x seeds, games,
    clients, scenes ...).

    Every device holds ``k = ceil(n / device_count)`` replicas, the fewest any layout allows
    (so the wall time is that of all devices), and the mesh takes the fewest devices that do
    so: ``ceil(n / k)``, rounded up to a multiple of the process count and taken evenly from
    every process, so every process of a multi-host job takes part. :func:`map_runs` pads
    the replica axis to a multiple of the mesh size (:func:`padded_size`: fewer than ``k``
    per device beyond ``n``) and :func:`to_host` drops the padding. A layout padded to every
    device would compute up to ``device_count - 1`` discarded replicas: free on an idle
    accelerator, but real CPU time where devices share cores (the 8 simulated CPU devices of
    the tests run on 2 cores: one replica padded to 8 took 8x the time). The per-device
    replica count, hence every replica's computation, is the same either way; the numbers
    agree to float rounding (XLA:CPU may split the loops of a program on fewer devices
    differently: 1e-7 relative on a discrete_diffusion validation loss). ``n=None``: every
    device.
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
        raise ValueError(f"n must be a positive integer, got n={n!r}")
    devices = jax.devices()
    if n is None:
        return make_mesh((len(devices),), (RUNS,), devices=devices)
    procs = jax.process_count()
    per_device = -(-int(n) // len(devices))
    size = -(-int(n) // per_device)
    size = -(-size // procs) * procs
    each = size // procs
    chosen = [d for p in range(procs) for d in
              [d for d in devices if d.process_index == p][:each]]
    return make_mesh((size,), (RUNS,), devices=chosen)


def padded_size(n: int, mesh: Mesh, axis: str | tuple[str, ...] = RUNS) -> int:
    """``n`` rounded up to a multiple of the size of mesh ``axis`` (the padded replica count)."""
    size = _axis_size(mesh, axis)
    return -(-int(n) // size) * size


def pad_leading(x, size: int) -> np.ndarray:
    """Host array ``x`` with its leading axis padded to ``size`` by repeating its last row
    (valid inputs, so padded replicas compute finite, discarded numbers)."""
    x = np.asarray(x)
    n = x.shape[0]
    if n == size:
        return x
    if not 0 < n < size:
        raise ValueError(f"cannot pad a leading axis of size {n} to {size}")
    return np.concatenate([x, np.repeat(x[-1:], size - n, axis=0)])


def map_runs(mesh: Mesh, fn, static, *args, shared=None, compiler_options=None,
             batch_size: int | None = None):
    """``fn(static, *args_r)`` for every replica ``r`` of the leading axis of ``args``, the
    replicas sharded over the ``RUNS`` axis of ``mesh`` (no communication: each device maps
    its own replicas). With ``shared`` (a pytree of arrays without a replica axis, replicated
    on every device): ``fn(static, *args_r, shared)``, ``shared`` traced but not batched
    (a ``lax.cond`` on it stays a real branch; new values do not recompile).

    ``fn`` must be a module-level function and ``static`` hashable (a tuple of configs,
    graphdefs, ints): both are jit static arguments, so repeated calls reuse the compiled
    program. ``args`` are host or device arrays (pytrees) with a leading replica axis of size
    ``n``, or already padded to ``padded_size(n, mesh)`` (outputs of an earlier call).
    Host arguments of size ``n`` are padded by repeating their last replica, so every device
    works whatever ``n`` is.

    ``compiler_options`` (a dict, e.g. ``LIGHT_COMPILE``) go to XLA for this program; each
    distinct set compiles and caches its own programs.

    ``batch_size``: how a device maps its replicas. ``None`` (default): one ``vmap`` over all
    of them; an int ``b``: ``lax.map`` over chunks of ``b`` replicas, each chunk vmapped
    (``b = 1``: one replica after another, so a loop or ``lax.cond`` inside ``fn`` stays
    unbatched). Same values up to floating-point summation order. Sequential is faster where
    one replica's working set fits in cache and a batch's does not (scatter-heavy fits of
    thousands of rows); ``vmap`` is where each replica's work is small.

    Returns:
      The outputs, sharded over ``RUNS`` with the PADDED leading size: feed them back to
      ``map_runs`` as they are, and read them with ``to_host(out, n)``, which drops the
      padding.
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(
            batch_size, (int, np.integer)) or batch_size < 1):
        raise ValueError(f"map_runs: batch_size must be None or an int >= 1, got {batch_size!r}")
    sizes = {np.shape(a)[0] for a in jax.tree.leaves(args)}
    if not sizes:
        raise ValueError("map_runs needs at least one array argument")
    n = min(sizes)
    total = padded_size(n, mesh)
    if not sizes <= {n, total}:
        raise ValueError(f"map_runs: every argument needs the same leading size (or that size "
                         f"padded to {total} by an earlier call), got {sorted(sizes)}")

    placed = jax.tree.map(lambda a: _place(a, mesh, total), args)
    if shared is not None:
        shared = jax.tree.map(lambda a: replicate(np.asarray(a), mesh), shared)
    with jax.set_mesh(mesh):
        return _map_runs_with(tuple(sorted((compiler_options or {}).items())),
                              None if batch_size is None else int(batch_size))(
            mesh, fn, static, shared, *placed)


def place_runs(mesh: Mesh, tree):
    """``tree``'s arrays (leading replica axis ``n``) padded and sharded over ``RUNS`` as
    :func:`map_runs` places them, once: inputs that every chunk of a loop reuses (a dataset,
    frozen networks) then cross to the devices once instead of at every call."""
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return tree
    total = padded_size(min(np.shape(a)[0] for a in leaves), mesh)
    return jax.tree.map(lambda a: _place(a, mesh, total), tree)


def auto_over_runs(fn, replicas, *args):
    """``fn(replicas, *args)`` traced inside a program over replicas sharded on ``RUNS``
    (explicit mesh), computed in auto sharding mode with its outputs sharded like the
    replicas; outside such a program (``replicas`` not ``RUNS``-sharded) a plain call.

    For per-replica data generation such as ``lm.hmm.sample_jax`` vmapped over replica seeds:
    sharding-in-types rejects gathers from a replicated table by replica-sharded indices, and
    jax 0.10.2 fails to lower a ``fold_in`` of a replica-sharded key on a one-device mesh (the
    single-accelerator case). Same values either way.
    """
    spec = jax.typeof(replicas).sharding.spec
    if spec and spec[0] == RUNS:
        return jax.sharding.auto_axes(fn, out_sharding=P(RUNS))(replicas, *args)
    return fn(replicas, *args)


def _place(a, mesh: Mesh, total: int):
    if (np.shape(a)[0] == total and isinstance(a, jax.Array)
            and getattr(a.sharding, "mesh", None) == mesh
            and tuple(a.sharding.spec)[:1] == (RUNS,)):
        return a
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        raise ValueError("map_runs: a multi-process argument must come from map_runs on "
                         "the same mesh")
    return shard_leading(pad_leading(jax.device_get(a), total), mesh, RUNS)


# XLA options for programs whose compile time dwarfs their run time (many small cells, each
# compiled once): the CPU backend's optimisation level 0 compiled an OddSHAP KernelSHAP cell
# (50 replicas, n = 10) 4.5x faster, its run time unchanged at 10 ms.
LIGHT_COMPILE = {"xla_backend_optimization_level": 0}


def _local_map(fn, static, batch_size, n_shared: int):
    """One device's map of ``fn(static, *args_r, *shared)`` over its replicas; the body's
    first ``n_shared`` arguments are not mapped."""
    def body(*a):
        sh, xs = a[:n_shared], a[n_shared:]
        one = lambda x: fn(static, *x, *sh)  # noqa: E731
        if batch_size is None:
            return jax.vmap(one)(xs)
        return jax.lax.map(one, xs, batch_size=batch_size)

    return body


def _map_runs_impl(mesh, fn, static, shared, *args, batch_size=None):
    # A local map per device: the library functions are written per replica, so the
    # replication checks of shard_map are off.
    if shared is None:
        body = _local_map(fn, static, batch_size, 0)
        return jax.shard_map(body, mesh=mesh, in_specs=tuple(P(RUNS) for _ in args),
                             out_specs=P(RUNS), check_vma=False)(*args)
    body = _local_map(fn, static, batch_size, 1)
    return jax.shard_map(body, mesh=mesh, in_specs=(P(),) + tuple(P(RUNS) for _ in args),
                         out_specs=P(RUNS), check_vma=False)(shared, *args)


def _map_runs_with(options: tuple, batch_size: int | None = None):
    """The jitted map for one set of XLA options (``()``: XLA's defaults) and one way of
    mapping a device's replicas (``batch_size``, ``map_runs``), built once."""
    return _build_map_runs(tuple(options), None if batch_size is None else int(batch_size))


@functools.lru_cache(maxsize=None)
def _build_map_runs(options: tuple, batch_size: int | None):
    def impl(mesh, fn, static, shared, *args):
        return _map_runs_impl(mesh, fn, static, shared, *args, batch_size=batch_size)

    return jax.jit(impl, static_argnums=(0, 1, 2), compiler_options=dict(options) or None)


_map_runs = _map_runs_with(())


def columns_mesh() -> Mesh:
    """The ``RUNS`` mesh :func:`map_columns` shards over by default: every device on GPU and
    TPU; on CPU one device per process.

    Simulated CPU devices of one process share its cores, and XLA:CPU already spreads one
    program's operations over them: gp2scale's likelihood (33 CG columns, ~250 iterations)
    took 0.66 s at N = 10^4 on one device of a 2-core machine and 2.6 s with its columns
    split over 8 simulated devices (8 loops of small operations, each paying the
    per-iteration overhead; 2 devices: no gain). Across processes the split is real.
    """
    devices = jax.devices()
    if devices[0].platform == "cpu":
        devices = [min((d for d in devices if d.process_index == p), key=lambda d: d.id)
                   for p in range(jax.process_count())]
    return make_mesh((len(devices),), (RUNS,), devices=devices)


def map_columns(fn, cols: jax.Array, *shared, mesh: Mesh | None = None):
    """``fn(*shared, cols_d)`` on column blocks ``cols_d`` of ``cols [..., c]``, the blocks
    sharded over the ``RUNS`` axis of ``mesh`` (default :func:`columns_mesh`: every device
    of every process on accelerators, one per process on CPU); no communication while
    ``fn`` runs: each device computes its own columns, e.g. its own CG loop.

    Call it inside a jit (a traced ``cols``); ``shared`` arrays (pytrees) are replicated on
    the mesh. The columns are zero-padded to a multiple of the mesh size (for a solve, zero
    columns are free: they converge before the first iteration) and every output leaf of
    ``fn`` must keep the column axis last (``[..., c_d]``); the outputs come back
    replicated with the padding dropped, so the caller continues as if ``fn`` had seen all
    columns at once. The mesh does not depend on ``c``, so outputs of one call can meet
    those of another in a later jit.
    """
    c = cols.shape[-1]
    mesh = columns_mesh() if mesh is None else mesh
    total = padded_size(c, mesh)
    cols = jnp.pad(cols, [(0, 0)] * (cols.ndim - 1) + [(0, total - c)])
    last = lambda ndim: P(*([None] * (ndim - 1) + [RUNS]))  # noqa: E731
    shapes = jax.eval_shape(lambda s, b: fn(*s, b), shared, cols)
    out_specs = jax.tree.map(lambda a: last(a.ndim), shapes)
    cols = jax.reshard(cols, NamedSharding(mesh, last(cols.ndim)))
    shared = jax.tree.map(lambda a: jax.reshard(a, NamedSharding(mesh, P())), shared)
    out = jax.shard_map(lambda s, b: fn(*s, b), mesh=mesh, in_specs=(P(), last(cols.ndim)),
                        out_specs=out_specs, check_vma=False)(shared, cols)
    rep = NamedSharding(mesh, P())
    return jax.tree.map(lambda a: jax.reshard(a, rep)[..., :c], out)


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


def shard_replicas(tree, mesh, n: int, dim: int = 0):
    """Places stacked replicas (models, optimiser states, per-replica batches) on ``mesh``.

    Axis ``dim`` of every leaf holds the ``n`` replicas, or more (a restored copy of padded
    rows, of this or another device count): it is cut to ``n`` rows, padded to
    :func:`padded_size` ``(n, mesh)`` by repeating the last replica
    (:func:`pad_leading`), and sharded over the ``RUNS`` axis, so every device of
    every process holds replicas whatever ``n`` is. Read the outputs of programs over these
    arrays with :func:`to_host` ``(out, n)``, which drops the padded replicas.

    Args:
      tree: pytree of host (or fully addressable) arrays.
      mesh: a mesh with a ``RUNS`` axis (:func:`runs_mesh`).
      n: number of real replicas.
      dim: the replica axis of every leaf (1 for batches ``[steps, R, ...]``).
    """
    total = padded_size(n, mesh)

    def one(x):
        x = np.moveaxis(np.asarray(x), dim, 0)[:n]
        x = np.moveaxis(pad_leading(x, total), 0, dim)
        return shard_leading(x, mesh, RUNS, dim)

    return jax.tree.map(one, tree)


def replicate(x, mesh: Mesh) -> jax.Array:
    """Replicates a host array on every device of ``mesh``."""
    return put(x, mesh, P())


def to_host(x, n: int | None = None):
    """Any array (or pytree) as host NumPy arrays, on every process.

    Arrays whose shards live on other processes' devices are gathered across processes (a
    collective: every process must call it, as every process runs the same program);
    replicated and fully addressable arrays are read locally. Typed PRNG keys come back as
    their key data.

    Args:
      x: pytree of ``jax.Array``s, NumPy arrays and scalars.
      n: if given, every leaf's leading axis is cut to ``n`` rows (drops the replicas that
        :func:`map_runs` or :func:`batched` padded).
    """
    def one(a):
        a = _gather(a)
        return a if n is None else a[:n]

    return jax.tree.map(one, x)


def _gather(a) -> np.ndarray:
    if not isinstance(a, jax.Array):
        return np.asarray(a)
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        a = jax.random.key_data(a)
    if a.is_fully_addressable:
        return np.asarray(jax.device_get(a))
    if a.is_fully_replicated:
        return np.asarray(a.addressable_data(0))
    from jax.experimental import multihost_utils  # Deferred: only multi-process jobs need it.

    return np.asarray(multihost_utils.process_allgather(a, tiled=True))


def put_rows(make_rows, n: int, mesh: Mesh, axis: str | tuple[str, ...] = RUNS) -> jax.Array:
    """A global array whose leading axis (size ``n``) is sharded over mesh ``axis``, built
    from per-process data: each process calls ``make_rows(rows)`` only for the global row
    indices its own devices hold, so no process materialises (or generates) the whole array.

    Args:
      make_rows: ``make_rows(rows: int64 [k]) -> array [k, ...]``; must give the same rows
        the same values on every process (e.g. data generated from ``(seed, row)``).
      n: global number of rows; a multiple of the axis size (see :func:`padded_size`).
      mesh: the mesh.
      axis: mesh axis (or axes) of the leading dimension.
    """
    if n % _axis_size(mesh, axis):
        raise ValueError(f"n={n} rows are not divisible by the mesh axis {axis!r} of size "
                         f"{_axis_size(mesh, axis)}; pad to padded_size(n, mesh)")
    probe = np.asarray(make_rows(np.arange(1)))
    shape = (int(n),) + probe.shape[1:]
    rows = np.arange(int(n))
    sharding = NamedSharding(mesh, P(axis))
    return jax.make_array_from_callback(
        shape, sharding, lambda idx: np.asarray(make_rows(rows[idx[0]]), probe.dtype))


def _axis_size(mesh: Mesh, axis) -> int:
    names = (axis,) if isinstance(axis, str) else tuple(axis)
    return math.prod(mesh.shape[a] for a in names)


def data_mesh(batch: int | None = None):
    """A 1-D ``DATA`` mesh (Auto axes) over every device, or None on a single device.

    :func:`batched` pads each batch to a multiple of the device count, so any batch size
    uses every device; ``batch`` is accepted for readability and not used.
    """
    del batch
    n = jax.device_count()
    return make_mesh((n,), (DATA,), auto=True) if n > 1 else None


def batched(fn, n: int, batch: int, *arrays, mesh=None):
    """Runs ``fn`` on consecutive batches and concatenates the outputs on the host.

    The last batch wraps around to the first rows; with a ``mesh`` every batch is rounded up
    to a multiple of its ``DATA`` axis and sharded over it (the caller's parameters must be
    replicated on the same mesh). Padded rows are computed and dropped, and outputs are
    gathered from every process (:func:`to_host`).
    """
    if mesh is not None:
        batch = padded_size(batch, mesh, DATA)
    outs = []
    for s0 in range(0, n, batch):
        idx = np.arange(s0, s0 + batch) % n
        if mesh is None:
            args = [jnp.asarray(np.asarray(a)[idx]) for a in arrays]
        else:
            args = [shard_leading(np.asarray(a)[idx], mesh, DATA)
                    for a in arrays]
        res = fn(*args)
        outs.append(to_host(res, min(batch, n - s0)))
    return jax.tree.map(lambda *v: np.concatenate(v, 0), *outs)
