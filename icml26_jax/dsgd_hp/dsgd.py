"""Decentralized SGD over simulated users: one ``jax.shard_map`` around the whole scan.

Users are sharded over the ``USERS`` mesh axis and independent runs over ``RUNS``
(``core.mesh.users_mesh``). One jitted call simulates ``T`` steps of DSGD on several graphs
at once, all fed the same noise, plus the centralized minibatch-SGD shadow (optax) that is
DSGD with ``W = J``. Metrics are reduced over users inside the kernel (psum / pmax) and then
replicated over runs, so the outputs are small ``[K, R]`` arrays that every process can read.

Noise is a pure function of (key, step, global run id, global user id) (counter-based, see
``problems.random_words``): the numbers do not depend on the number of devices or processes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.mesh import RUNS, USERS
from icml26_jax.dsgd_hp import baselines, gossip, problems
from icml26_jax.dsgd_hp.graphs import Graph, torus_shape

ORDERS = ("atc", "cta")
BACKENDS = ("shard_map", "jit")
MIXINGS = ("auto", "dense")


class DSGDState(NamedTuple):
    """x [G, R, n, d] per-graph iterates; xc [R, d] centralized shadow; t the step."""

    x: Any
    xc: Any
    t: Any


class Trace(NamedTuple):
    """Metrics at the log steps ``ts`` (index G of the graph axis is the centralized run).

    ts [K]; gap_mean [G+1, K, R] mean-over-users optimality gap; gap_worst [G+1, K, R] worst
    user's gap; consensus [G, K, R] ``(1/n) sum_i ||x_i - x_bar||^2``; gradnorm [G+1, K, R]
    the running average over evaluation steps of ``(1/n) sum_i ||grad f(x_i)||^2`` (or None).
    """

    ts: np.ndarray
    gap_mean: np.ndarray
    gap_worst: np.ndarray
    consensus: np.ndarray
    gradnorm: np.ndarray | None


def _as_float(t):
    """A step counter as float: Python float on the host, float32 array under jit."""
    if isinstance(t, (int, float, np.integer, np.floating)):
        return float(t)
    return t.astype(jnp.float32)


class StronglyConvexSchedule(NamedTuple):
    """``alpha_t = a / (mu (t + t0))``; the gap decays like 1/t only for a > 1/2."""

    a: float
    mu: float
    t0: float

    def __call__(self, t):
        return self.a / (self.mu * (_as_float(t) + self.t0))


class ConstantSchedule(NamedTuple):
    """``alpha_t = alpha``."""

    alpha: float

    def __call__(self, t):
        return self.alpha + 0.0 * _as_float(t)


def strongly_convex_schedule(a: float, mu: float, t0: float) -> StronglyConvexSchedule:
    if a <= 0 or mu <= 0 or t0 < 0:
        raise ValueError(f"schedule needs a > 0, mu > 0, t0 >= 0; got a={a}, mu={mu}, t0={t0}")
    return StronglyConvexSchedule(float(a), float(mu), float(t0))


def constant_schedule(alpha: float) -> ConstantSchedule:
    if alpha <= 0:
        raise ValueError(f"step size alpha must be > 0, got {alpha}")
    return ConstantSchedule(float(alpha))


def nonconvex_step_size(n: int, T: int, L: float, c_alpha: float = 1.0) -> float:
    """``min(1/L, c_alpha sqrt(n / T))`` (Theorem 1 [R]); one constant for every n."""
    return min(1.0 / L, c_alpha * math.sqrt(n / T))


class _GraphSpec(NamedTuple):
    method: str  # "identity" | "circulant" | "torus" | "complete" | "dense"
    offsets: tuple[int, ...] | None  # the cyclic shifts it is made of (circulant, torus)
    weight: float  # MH weight of every edge (regular graphs)
    shape: tuple[int, int] | None = None  # torus (r, c)


def _graph_spec(g: Graph, mixing: str) -> _GraphSpec:
    if g.n == 1:
        return _GraphSpec("identity", None, 0.0)
    if mixing == "dense" or g.name == "er":
        return _GraphSpec("dense", None, 0.0)
    if g.name == "complete":
        return _GraphSpec("complete", None, 0.0)
    weight = float(g.W[0][g.adjacency[0]][0])
    if not np.allclose(g.W[g.adjacency], weight):
        raise ValueError(f"graph {g.name!r} is not regular")
    if g.name == "torus":
        shape = torus_shape(g.n)
        return _GraphSpec("torus", gossip.torus_offsets(*shape), weight, shape)
    return _GraphSpec("circulant", g.offsets, weight)


class _Static(NamedTuple):
    """Everything that fixes the compiled program (hashable: the compile-cache key)."""

    prob_type: type
    prob_static: tuple
    graphs: tuple[_GraphSpec, ...]
    n: int
    runs: int
    T: int
    log_every: int
    eval_every: int | None
    schedule: Any
    order: str
    noise: str
    sigma: float
    mesh: Mesh
    backend: str
    return_state: bool


def _split_problem(prob):
    """(array fields as float32/int32 numpy, static fields) of a problem NamedTuple."""
    arrays, static = {}, []
    for name, v in zip(prob._fields, prob):
        if isinstance(v, np.ndarray):
            kind = np.float32 if np.issubdtype(v.dtype, np.floating) else np.int32
            arrays[name] = v.astype(kind)
        else:
            static.append((name, v))
    return arrays, tuple(static)


class _Comm(NamedTuple):
    """What the step needs from its backend: ids, reductions over users, mixing."""

    uid: Any  # [nl] global user ids of the local block
    rid: Any  # [Rl] global run ids
    user_sum: Any
    user_max: Any
    mix: Any  # Y [G, R, nl, d] -> (W_g Y_g) for every graph g


def _make_loop(st: _Static, prob, comm: _Comm, key):
    """The nested scan (log blocks > eval blocks > steps) on local or global blocks."""
    n = st.n
    opt = baselines.centralized_sgd(st.schedule)  # the W = J shadow, on the same noise

    def step(carry, _):
        x, xc, opt_state, t = carry
        # One draw, shared by every graph and the centralized shadow (paired noise).
        z = problems.draw(prob, jax.random.fold_in(key, t), comm.rid, comm.uid, st.noise,
                          st.sigma)
        g = problems.stoch_grad(prob, x, comm.uid, z)  # [G, Rl, nl, d]
        alpha = st.schedule(t)
        x = comm.mix(x - alpha * g) if st.order == "atc" else comm.mix(x) - alpha * g
        gc = comm.user_sum(problems.stoch_grad(prob, xc[:, None, :], comm.uid, z).sum(-2)) / n
        updates, opt_state = opt.update(gc, opt_state, xc)
        return (x, optax.apply_updates(xc, updates), opt_state, t + 1), None

    def users_mean(v):  # [..., nl] -> [...]
        return comm.user_sum(v.sum(-1)) / n

    def sq_grad_norm(x, xc):
        gx = users_mean(jnp.sum(problems.full_grad(prob, x) ** 2, -1))
        gxc = jnp.sum(problems.full_grad(prob, xc) ** 2, -1)
        return jnp.concatenate([gx, gxc[None]])  # [G+1, Rl]

    steps_per_eval = st.eval_every or st.log_every

    def eval_block(carry, _):
        state, acc = carry
        state, _ = lax.scan(step, state, None, length=steps_per_eval)
        if st.eval_every:
            acc = (acc[0] + sq_grad_norm(state[0], state[1]), acc[1] + 1.0)
        return (state, acc), None

    def log_block(carry, _):
        carry, _ = lax.scan(eval_block, carry, None, length=st.log_every // steps_per_eval)
        (x, xc, _, _), acc = carry
        gx = problems.gap(prob, x)  # [G, Rl, nl]
        gxc = problems.gap(prob, xc)  # [Rl]
        xbar = comm.user_sum(x.sum(-2)) / n  # [G, Rl, d]
        out = {
            "gap_mean": jnp.concatenate([users_mean(gx), gxc[None]]),
            "gap_worst": jnp.concatenate([comm.user_max(gx.max(-1)), gxc[None]]),
            "consensus": users_mean(jnp.sum((x - xbar[:, :, None]) ** 2, -1)),
        }
        if st.eval_every:
            out["gradnorm"] = acc[0] / acc[1]
        return carry, out

    def loop(x0, xc0, acc0):
        state = (x0, xc0, opt.init(xc0), jnp.zeros((), jnp.int32))
        (state, _), outs = lax.scan(log_block, (state, acc0), None, length=st.T // st.log_every)
        return state, outs  # outs: {name: [K, G(+1), Rl]}

    return loop


def _kernel_shard_map(st: _Static, arrays, key_data, w_rows):
    """Body of the shard_map: local blocks [G, Rl, nl, d] of the (runs, users) mesh."""
    prob = st.prob_type(**arrays, **dict(st.prob_static))
    G, d = len(st.graphs), prob.dim
    nl = st.n // st.mesh.shape[USERS]
    Rl = st.runs // st.mesh.shape[RUNS]
    uid = lax.axis_index(USERS) * nl + jnp.arange(nl)
    rid = lax.axis_index(RUNS) * Rl + jnp.arange(Rl)
    by_method = {m: [i for i, g in enumerate(st.graphs) if g.method == m]
                 for m in ("identity", "circulant", "torus", "dense", "complete")}
    shifted = sorted(by_method["circulant"] + by_method["torus"])
    # One ppermute per device hop for all graphs made of cyclic shifts (ring's +-1 shifts are
    # also exp's and the torus'), one all_gather for all dense graphs, one pmean for complete.
    needs = gossip.merge_needs(*[gossip.circulant_needs(st.graphs[i].offsets, st.n, nl)
                                 for i in shifted])

    def mix(Y):
        out = [None] * G
        for i in by_method["identity"]:
            out[i] = Y[i]
        if shifted:
            # `shifted` is sorted: a permuted re-stack of Y made XLA's CPU step 2x slower.
            halo = gossip.halo_exchange(jnp.stack([Y[i] for i in shifted]), needs,
                                        st.mesh.shape[USERS])
            for j, i in enumerate(shifted):
                g, halo_j = st.graphs[i], {hop: (lo, b[j]) for hop, (lo, b) in halo.items()}
                out[i] = (gossip.circulant_mix(Y[i], halo_j, g.offsets, g.weight, st.n)
                          if g.method == "circulant" else
                          gossip.torus_mix(Y[i], halo_j, uid, g.shape, g.weight))
        if by_method["dense"]:
            Yd = jnp.stack([Y[i] for i in by_method["dense"]])
            full = lax.all_gather(Yd, USERS, axis=2, tiled=True)  # [Gd, Rl, n, d]
            mixed = jnp.einsum("gin,grnd->grid", w_rows, full)
            for j, i in enumerate(by_method["dense"]):
                out[i] = mixed[j]
        if by_method["complete"]:
            mixed = gossip.mix_complete(jnp.stack([Y[i] for i in by_method["complete"]]))
            for j, i in enumerate(by_method["complete"]):
                out[i] = mixed[j]
        return jnp.stack(out)

    comm = _Comm(uid, rid, lambda v: lax.psum(v, USERS), lambda v: lax.pmax(v, USERS), mix)
    key = jax.random.wrap_key_data(key_data)
    loop = _make_loop(st, prob, comm, key)
    x0 = lax.pcast(jnp.zeros((G, Rl, nl, d)), (RUNS, USERS), to="varying")
    xc0 = lax.pcast(jnp.zeros((Rl, d)), (RUNS,), to="varying")
    acc0 = (lax.pcast(jnp.zeros((G + 1, Rl)), (RUNS,), to="varying"), jnp.zeros(()))
    state, outs = loop(x0, xc0, acc0)
    return outs, (state[0], state[1])


def _kernel_jit(st: _Static, arrays, key_data, w_full):
    """The same loop on global arrays with explicit shardings; XLA picks the collectives."""
    prob = st.prob_type(**arrays, **dict(st.prob_static))
    G, d = len(st.graphs), prob.dim
    sh = lambda *spec: NamedSharding(st.mesh, P(*spec))

    def mix(Y):
        return jnp.einsum("gij,grjd->grid", w_full, Y, out_sharding=sh(None, RUNS, USERS, None))

    # Replicated ids: gathers by user id (b[uid], shards[uid]) then need no out_sharding;
    # every device draws all the noise, which is the price of letting XLA decide.
    comm = _Comm(jnp.arange(st.n), jnp.arange(st.runs), lambda v: v, lambda v: v, mix)
    loop = _make_loop(st, prob, comm, jax.random.wrap_key_data(key_data))
    x0 = jax.sharding.reshard(jnp.zeros((G, st.runs, st.n, d)), sh(None, RUNS, USERS))
    xc0 = jax.sharding.reshard(jnp.zeros((st.runs, d)), sh(RUNS))
    acc0 = (jax.sharding.reshard(jnp.zeros((G + 1, st.runs)), sh(None, RUNS)), jnp.zeros(()))
    state, outs = loop(x0, xc0, acc0)
    return outs, (state[0], state[1])


@functools.lru_cache(maxsize=64)
def _compiled(st: _Static):
    """One jitted program per static configuration (so repeated calls compile once)."""
    def run(arrays, key_data, w):
        if st.backend == "shard_map":
            kernel = jax.shard_map(
                functools.partial(_kernel_shard_map, st),
                mesh=st.mesh,
                in_specs=(jax.tree.map(lambda _: P(), arrays), P(), P(None, USERS)),
                out_specs=(P(None, None, RUNS), (P(None, RUNS, USERS), P(RUNS))),
            )
            outs, state = kernel(arrays, key_data, w)
        else:
            outs, state = _kernel_jit(st, arrays, key_data, w)
        # Metrics [K, G, R] are small: replicate them so that every process can read them.
        replicated = NamedSharding(st.mesh, P())
        outs = {k: jax.sharding.reshard(v, replicated) for k, v in outs.items()}
        return outs, (state if st.return_state else None)

    return jax.jit(run)


def program(
    problem,
    graphs: Sequence[Graph],
    schedule,
    *,
    T: int,
    runs: int,
    key,
    mesh: Mesh | None = None,
    order: str = "atc",
    noise: str = "gauss",
    sigma: float = 1.0,
    log_every: int = 250,
    eval_every: int | None = None,
    backend: str = "shard_map",
    mixing: str = "auto",
    return_state: bool = False,
):
    """The jitted program :func:`simulate` runs and its arguments (same parameters).

    The problem's arrays, the noise key and the dense graphs' W are arguments of the program,
    never constants baked into it (``tests/dsgd_hp/test_constants.py`` lowers it).

    Returns:
      ``(fn, args)``: ``fn(*args)`` gives ``(outs, state)``, the metrics ``{name: [K, G, R]}``
      and the final ``(x, xc)`` if ``return_state`` (else None).
    """
    graphs = tuple(graphs)
    n = problem.n
    _validate(problem, graphs, T=T, runs=runs, order=order, noise=noise, sigma=sigma,
              log_every=log_every, eval_every=eval_every, backend=backend, mixing=mixing)
    mesh = default_mesh(n, runs) if mesh is None else mesh
    if n % mesh.shape[USERS] or runs % mesh.shape[RUNS]:
        raise ValueError(f"users={n} and runs={runs} must be multiples of the mesh axes "
                         f"{dict(mesh.shape)}")
    if isinstance(key, (int, np.integer)):
        key = jax.random.key(int(key))
    arrays, static = _split_problem(problem)
    st = _Static(type(problem), static, tuple(_graph_spec(g, mixing) for g in graphs), n, runs,
                 int(T), int(log_every), eval_every, schedule, order,
                 noise if isinstance(problem, problems.Quadratic) else "sample", float(sigma),
                 mesh, backend, bool(return_state))
    arrays = {k: mesh_lib.replicate(v, mesh) for k, v in arrays.items()}
    key_data = mesh_lib.replicate(np.asarray(jax.random.key_data(key)), mesh)
    if backend == "shard_map":  # rows of the dense graphs' W: [G_dense, n, n] over users
        dense = [g.W for g, s in zip(graphs, st.graphs) if s.method == "dense"]
        w = np.stack(dense) if dense else np.zeros((0, n, n))
        w = mesh_lib.shard_leading(w.astype(np.float32), mesh, USERS, dim=1)
    else:
        w = mesh_lib.replicate(np.stack([g.W for g in graphs]).astype(np.float32), mesh)
    return _compiled(st), (arrays, key_data, w)


def simulate(
    problem,
    graphs: Sequence[Graph],
    schedule,
    *,
    T: int,
    runs: int,
    key,
    mesh: Mesh | None = None,
    order: str = "atc",
    noise: str = "gauss",
    sigma: float = 1.0,
    log_every: int = 250,
    eval_every: int | None = None,
    backend: str = "shard_map",
    mixing: str = "auto",
    return_state: bool = False,
):
    """Simulates DSGD on every graph in ``graphs`` (plus centralized SGD) on common noise.

    Args:
      problem: a ``problems.Quadratic`` or ``problems.Digits`` with ``problem.n`` users.
      graphs: graphs over ``problem.n`` users; they evolve in one scan on the same noise.
      schedule: step size ``alpha_t`` (``StronglyConvexSchedule`` / ``ConstantSchedule``).
      T: number of steps, a multiple of ``log_every``.
      runs: independent runs R (noise streams), sharded over the mesh's runs axis.
      key: typed PRNG key (or int seed) of the noise.
      mesh: a ``(RUNS, USERS)`` mesh; default :func:`default_mesh`.
      order: ``atc`` (X <- W (X - alpha G)) or ``cta`` (X <- W X - alpha G).
      noise: ``gauss`` or ``heavy`` additive noise (quadratic); digits use sampling noise.
      sigma: noise standard deviation per coordinate (quadratic).
      log_every: steps between recorded metrics.
      eval_every: if set, also average ``||grad f(x_i)||^2`` every ``eval_every`` steps
        (must divide ``log_every``); the non-convex metric.
      backend: ``shard_map`` (explicit collectives) or ``jit`` (sharded arrays, dense W).
      mixing: ``auto`` (ppermute for ring/exp, pmean for complete, all_gather otherwise) or
        ``dense`` (all_gather for every graph).
      return_state: also return the final ``DSGDState`` (global, sharded arrays).

    Returns:
      A ``Trace`` (host NumPy arrays), and the final ``DSGDState`` if ``return_state``.
    """
    fn, args = program(problem, graphs, schedule, T=T, runs=runs, key=key, mesh=mesh,
                       order=order, noise=noise, sigma=sigma, log_every=log_every,
                       eval_every=eval_every, backend=backend, mixing=mixing,
                       return_state=return_state)
    outs, state = fn(*args)
    outs = mesh_lib.to_host(outs)
    tr = lambda a: np.moveaxis(a, 0, 1).astype(np.float64)  # [K, G, R] -> [G, K, R]
    trace = Trace(
        ts=np.arange(1, T // log_every + 1) * log_every,
        gap_mean=tr(outs["gap_mean"]),
        gap_worst=tr(outs["gap_worst"]),
        consensus=tr(outs["consensus"]),
        gradnorm=tr(outs["gradnorm"]) if "gradnorm" in outs else None,
    )
    if return_state:
        return trace, DSGDState(state[0], state[1], T)
    return trace


def default_mesh(n: int, runs: int) -> Mesh:
    """``core.mesh.users_mesh(n, runs)``, except in a multi-process job where ``runs`` allows
    it: there the users axis stays inside each process (``gcd(n, local devices)`` devices) and
    the runs axis spans the processes, so the per-step gossip never crosses processes (over
    gloo on CPU every step's collective costs milliseconds); runs need no communication.

    In a single process this is ``users_mesh(n, runs)``. Every device is used either way.
    """
    if jax.process_count() > 1:
        u = math.gcd(int(n), jax.local_device_count())
        r = jax.device_count() // u
        if runs % r == 0:
            devices = sorted(jax.devices(), key=lambda dv: (dv.process_index, dv.id))
            return mesh_lib.make_mesh((r, u), (RUNS, USERS), devices=devices)
    return mesh_lib.users_mesh(n, runs)


def _validate(problem, graphs, *, T, runs, order, noise, sigma, log_every, eval_every,
              backend, mixing):
    if not graphs:
        raise ValueError("graphs must hold at least one graph")
    bad = [g.name for g in graphs if g.n != problem.n]
    if bad:
        raise ValueError(f"graphs {bad} do not have n={problem.n} users like the problem")
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; allowed: {', '.join(ORDERS)}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    if mixing not in MIXINGS:
        raise ValueError(f"unknown mixing {mixing!r}; allowed: {', '.join(MIXINGS)}")
    if noise not in problems.NOISES:
        raise ValueError(f"unknown noise {noise!r}; allowed: {', '.join(problems.NOISES)}")
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    if not (isinstance(T, (int, np.integer)) and T > 0):
        raise ValueError(f"T must be a positive integer, got T={T}")
    if not (isinstance(log_every, (int, np.integer)) and log_every > 0) or T % log_every:
        raise ValueError(f"T={T} must be a positive multiple of log_every={log_every}")
    if eval_every is not None and (eval_every <= 0 or log_every % eval_every):
        raise ValueError(f"eval_every={eval_every} must be a positive divisor of "
                         f"log_every={log_every}")
    if not (isinstance(runs, (int, np.integer)) and runs > 0):
        raise ValueError(f"runs must be a positive integer, got runs={runs}")
    words = problems.words_per_user(problem, noise)
    if runs * problem.n * -(-words // 2) >= 2**32:
        raise ValueError(f"runs={runs} x users={problem.n} exceed the 2^32 noise counters; "
                         "split the runs over several keys")
