"""Online SGD of the single-index denoiser on the sphere, replicas on a leading axis.

One fresh MCM sample per step (spec §Method): x0 ~ MCM, x_t = a x0 + b xi, h = w . x_t,
(f, f') = (phi(h), phi'(h)), r = x0 - a x_t - w f and the closed-form gradient of
||x0 - D_w(x_t)||^2,

    g = -2 (f r + (w . r) f' x_t),   g <- g - (g . w) w,   w <- (w - delta g) / ||w - delta g||.

w0 is uniform on the sphere (|m| ~ 0.8 / sqrt(d)); the overlaps m_u = w . u, m_v = w . v are
recorded at log-spaced sample counts. Each replica draws its spikes, init and noise from
``fold_in(key, replica)``, so a replica's trajectory does not depend on how many replicas run
or on how they are placed on devices. Noise is drawn per chunk of steps ([chunk, d] blocks
per replica, [R, chunk, d] under the replica vmap), never per step: a per-step threefry call
costs several times the step's own arithmetic.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.simplicity_bias import denoisers, mcm

# Floats of noise per replica per chunk: large enough to amortise the scan and threefry
# overhead, small enough that [R, chunk, 2d] blocks stay in cache-sized memory.
_CHUNK_FLOATS = 16384


class OnlineConfig(NamedTuple):
    """Static online-SGD parameters (hashable: a jit static argument).

    Attributes:
      d: dimension (must equal the MCMConfig's d).
      delta: step size (the experiments use delta = eta d^-q).
      n_steps: samples seen (one per step).
      n_records: log-spaced records of the overlaps (<= n_steps).
      replicas: independent replicas R.
      link: oracle link 'u' | 'v' | 'both'.
      thr: escape threshold on the median |m| (for :func:`escape_time`).
      a: VP signal coefficient, b = sqrt(1 - a^2) (default 1/sqrt(2); not in the spec's field
        list, added so the noise level can be set).
    """

    d: int
    delta: float
    n_steps: int
    n_records: int = 200
    replicas: int = 32
    link: str = "both"
    thr: float = 0.5
    a: float = 1.0 / math.sqrt(2.0)

    @property
    def b(self) -> float:
        return math.sqrt(max(0.0, 1.0 - self.a * self.a))

    def validate(self) -> "OnlineConfig":
        """Raises ``ValueError`` naming the offending field; returns ``self``."""
        mcm.check_dim(self.d)
        if not float(self.delta) > 0:
            raise ValueError(f"delta must be > 0, got delta={self.delta!r}")
        for name in ("n_steps", "n_records", "replicas"):
            val = getattr(self, name)
            if not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"{name} must be a positive integer, got {name}={val!r}")
        if self.n_records > self.n_steps:
            raise ValueError(f"n_records must be <= n_steps={self.n_steps}, "
                             f"got n_records={self.n_records}")
        denoisers.check_link(self.link)
        if not 0.0 < float(self.thr) < 1.0:
            raise ValueError(f"thr must be in (0, 1), got thr={self.thr!r}")
        if not 0.0 < float(self.a) <= 1.0:
            raise ValueError(f"a must be in (0, 1] (b = sqrt(1 - a^2)), got a={self.a!r}")
        return self


class OnlineResult(NamedTuple):
    """Recorded overlaps: ns [n_rec] (samples seen), m_u, m_v [R, n_rec] (host arrays)."""

    ns: np.ndarray
    m_u: np.ndarray
    m_v: np.ndarray


def record_steps(n_steps: int, n_records: int) -> np.ndarray:
    """``n_records`` strictly increasing, log-spaced sample counts in [1, n_steps], the last
    one n_steps (rounded geomspace, bumped apart where rounding collides)."""
    if not 1 <= n_records <= n_steps:
        raise ValueError(f"need 1 <= n_records <= n_steps, got n_records={n_records}, "
                         f"n_steps={n_steps}")
    ns = np.rint(np.geomspace(1, n_steps, n_records)).astype(np.int64)
    for i in range(1, n_records):  # forward: strictly increasing, ns[i] >= i + 1
        ns[i] = max(ns[i], ns[i - 1] + 1)
    ns[-1] = n_steps
    for i in range(n_records - 2, -1, -1):  # backward: stay below the next one
        ns[i] = min(ns[i], ns[i + 1] - 1)
    return ns


def sphere_grad(w, x0, xt, phi, a: float):
    """Tangent-projected gradient of ||x0 - a x_t - w phi(w . x_t)||^2 in w [d]:
    g = -2 (f r + (w . r) f' x_t), r = x0 - a x_t - w f, then g - (g . w) w."""
    f, fp = phi(xt @ w)
    r = x0 - a * xt - w * f  # [d]
    g = -2.0 * (f * r + (w @ r) * fp * xt)
    return g - (g @ w) * w


def sgd_step(w, x0, xt, phi, a: float, delta: float):
    """One spherical SGD step: w <- (w - delta g) / ||w - delta g||."""
    w = w - delta * sphere_grad(w, x0, xt, phi, a)
    return w / jnp.linalg.norm(w)


def _chunk_size(d: int, n_steps: int) -> int:
    return int(max(1, min(n_steps, _CHUNK_FLOATS // (2 * d))))


class ReplicaState(NamedTuple):
    """The carry of one replica between segments of chunks (all arrays, so a stack of
    states can be sharded over devices).

    Attributes:
      w: [d] current weights (unit norm).
      j: [] int32, records taken so far.
      buf: [n_rec, 2] recorded (m_u, m_v), zero where not yet recorded.
      u, v: [d] the replica's spikes.
      noise_key: raw key data of the replica's noise stream (chunk c uses fold_in(., c)).
    """

    w: jax.Array
    j: jax.Array
    buf: jax.Array
    u: jax.Array
    v: jax.Array
    noise_key: jax.Array


def init_replica(key: jax.Array, mcm_cfg: mcm.MCMConfig, online_cfg: OnlineConfig
                 ) -> ReplicaState:
    """Spikes, w0 uniform on the sphere and the noise stream of one replica, from
    ``split(key, 3)``; nothing recorded yet."""
    k_spk, k_init, k_noise = jax.random.split(key, 3)
    u, v = mcm.spikes(k_spk, online_cfg.d)
    w0 = jax.random.normal(k_init, (online_cfg.d,))
    w0 = w0 / jnp.linalg.norm(w0)
    return ReplicaState(w0, jnp.zeros((), jnp.int32),
                        jnp.zeros((online_cfg.n_records, 2), w0.dtype), u, v,
                        jax.random.key_data(k_noise))


def advance(state: ReplicaState, c0, n_chunks: int, mcm_cfg: mcm.MCMConfig,
            online_cfg: OnlineConfig, impl) -> ReplicaState:
    """Runs chunks ``c0 .. c0 + n_chunks - 1`` of one replica (pure; ``c0`` may be traced).

    Chunk c holds steps ``c * chunk .. (c + 1) * chunk - 1`` with noise from
    ``fold_in(noise_key, c)`` drawn as [chunk, d] blocks, each chunk a scan over its steps.
    Steps past ``n_steps`` (padding) leave the state unchanged, so splitting a run into
    segments gives exactly the one-call trajectory.
    """
    cfg, oc = mcm_cfg, online_cfg
    d, n_steps, a, b, delta = oc.d, oc.n_steps, oc.a, oc.b, oc.delta
    phi = denoisers.oracle_link(oc.link, cfg.beta_u, cfg.beta_v, a, b, cfg.nu, cfg.rho)
    ns = jnp.asarray(record_steps(n_steps, oc.n_records), jnp.int32)  # [n_rec]
    n_rec = ns.shape[0]
    chunk = _chunk_size(d, n_steps)
    u, v = state.u, state.v
    k_noise = jax.random.wrap_key_data(state.noise_key, impl=impl)

    def step(carry, inp):
        w, j, buf = carry
        x0, xt, t = inp  # [d], [d], []
        w = jnp.where(t < n_steps, sgd_step(w, x0, xt, phi, a, delta), w)
        jj = jnp.minimum(j, n_rec - 1)
        hit = (t + 1 == ns[jj]) & (j < n_rec)
        m = jnp.stack([w @ u, w @ v])
        buf = buf.at[jj].set(jnp.where(hit, m, buf[jj]))
        return (w, j + hit.astype(jnp.int32), buf), None

    def run_chunk(carry, c):
        k_lat, k_z = jax.random.split(jax.random.fold_in(k_noise, c))
        lam, nu = mcm.sample_latents(k_lat, chunk, cfg)  # [chunk]
        z, xi = jnp.moveaxis(jax.random.normal(k_z, (chunk, 2, d)), 1, 0)  # [chunk, d] each
        x0 = mcm.assemble(lam, nu, z, cfg, u, v)  # [chunk, d]
        xt = a * x0 + b * xi
        t = c * chunk + jnp.arange(chunk, dtype=jnp.int32)
        carry, _ = jax.lax.scan(step, carry, (x0, xt, t))
        return carry, None

    cs = jnp.asarray(c0, jnp.int32) + jnp.arange(n_chunks, dtype=jnp.int32)
    (w, j, buf), _ = jax.lax.scan(run_chunk, (state.w, state.j, state.buf), cs)
    return state._replace(w=w, j=j, buf=buf)


def n_chunks_of(online_cfg: OnlineConfig) -> tuple[int, int]:
    """``(chunk, n_chunks)``: steps per chunk and chunks covering ``n_steps``."""
    chunk = _chunk_size(online_cfg.d, online_cfg.n_steps)
    return chunk, -(-online_cfg.n_steps // chunk)


def run_replica(key: jax.Array, mcm_cfg: mcm.MCMConfig, online_cfg: OnlineConfig):
    """One replica of online SGD over all ``n_steps`` (pure; vmap it over keys, jit it with
    static configs).

    Returns:
      ``(m_u [n_rec], m_v [n_rec])`` at the sample counts of :func:`record_steps`.
    """
    state = init_replica(key, mcm_cfg, online_cfg)
    _, n_chunks = n_chunks_of(online_cfg)
    state = advance(state, 0, n_chunks, mcm_cfg, online_cfg, jax.random.key_impl(key))
    return state.buf[:, 0], state.buf[:, 1]


def _init_from_data(static, key_data):
    mcm_cfg, online_cfg, impl, _ = static
    return init_replica(jax.random.wrap_key_data(key_data, impl=impl), mcm_cfg, online_cfg)


def _advance_replica(static, state, c0):
    mcm_cfg, online_cfg, impl, seg = static
    return advance(state, c0, seg, mcm_cfg, online_cfg, impl)


@functools.partial(jax.jit, static_argnums=0)
def _init_stacked(static, key_data):
    return jax.vmap(lambda kd: _init_from_data(static, kd))(key_data)


@functools.partial(jax.jit, static_argnums=0)
def _advance_stacked(static, state, c0):
    return jax.vmap(lambda s, c: _advance_replica(static, s, c))(state, c0)


def run_online(key: jax.Array, mcm_cfg: mcm.MCMConfig, online_cfg: OnlineConfig,
               mesh=None, *, stop_extra: int | None = None, watch: str = "v",
               segment_steps: int | None = None, progress=None) -> OnlineResult:
    """Runs ``online_cfg.replicas`` independent replicas of online SGD (spec §Method).

    Replica r uses ``fold_in(key, r)`` (its own spikes, init and noise), so results do not
    depend on R's placement or on the segmentation. Without ``stop_extra`` all
    ``n_steps`` run as one program; with it, the run goes in segments of about
    ``segment_steps`` steps (one compiled program reused) with a host check after each: once
    the median over replicas of |m_watch| has exceeded ``online_cfg.thr`` at a record n*,
    the run stops as soon as ``n* + stop_extra`` steps are done (the d^3 runs, spec
    §Pitfalls), and only the records taken are returned.

    Args:
      key: typed PRNG key.
      mcm_cfg: :class:`mcm.MCMConfig` (its d must equal ``online_cfg.d``).
      online_cfg: :class:`OnlineConfig`.
      mesh: None (replicas vmapped on the default device) or a mesh with a
        ``core.mesh.RUNS`` axis (e.g. ``core.mesh.runs_mesh(R)``) over which the replicas are
        sharded with ``core.mesh.map_runs``.
      stop_extra: steps to keep running after the escape (None: never stop early).
      watch: the overlap checked for the early stop, 'u' or 'v'.
      segment_steps: steps per segment of an early-stopped run (default n_steps / 64).
      progress: optional ``progress(steps_done, median_abs_m_watch)`` called per segment.

    Returns:
      :class:`OnlineResult` with ns [n_rec'] and m_u, m_v [R, n_rec'] as host arrays
      (n_rec' = n_records unless stopped early).
    """
    mcm_cfg.validate()
    online_cfg.validate()
    if mcm_cfg.d != online_cfg.d:
        raise ValueError(f"mcm_cfg.d={mcm_cfg.d} and online_cfg.d={online_cfg.d} must agree")
    if watch not in ("u", "v"):
        raise ValueError(f"watch must be 'u' or 'v', got watch={watch!r}")
    if stop_extra is not None and not int(stop_extra) >= 0:
        raise ValueError(f"stop_extra must be >= 0 or None, got stop_extra={stop_extra!r}")
    if segment_steps is not None and not int(segment_steps) >= 1:
        raise ValueError(f"segment_steps must be >= 1, got segment_steps={segment_steps!r}")
    R = online_cfg.replicas
    ns = record_steps(online_cfg.n_steps, online_cfg.n_records)
    chunk, n_chunks = n_chunks_of(online_cfg)
    if stop_extra is None:
        seg = n_chunks
    else:
        seg_steps = segment_steps or max(1, online_cfg.n_steps // 64)
        seg = int(min(n_chunks, max(1, round(seg_steps / chunk))))
    keys = jax.vmap(lambda r: jax.random.fold_in(key, r))(jnp.arange(R, dtype=jnp.int32))
    static = (mcm_cfg, online_cfg, jax.random.key_impl(key), seg)
    key_data = np.asarray(jax.device_get(jax.random.key_data(keys)))  # [R, ...] uint32

    def run_segment(state, c0):
        c0 = np.full((R,), c0, np.int32)
        if mesh is None:
            return _advance_stacked(static, state, c0)
        return mesh_lib.map_runs(mesh, _advance_replica, static, state, c0)

    state = (_init_stacked(static, key_data) if mesh is None
             else mesh_lib.map_runs(mesh, _init_from_data, static, key_data))
    col = 0 if watch == "u" else 1
    stop_at, c = None, 0
    while c < n_chunks:
        state = run_segment(state, c)
        c += seg
        if stop_extra is None:
            continue
        done = min(c * chunk, online_cfg.n_steps)
        taken = int(np.searchsorted(ns, done, side="right"))
        med = np.median(np.abs(mesh_lib.to_host(state.buf)[:, :taken, col]), axis=0)
        if progress is not None:
            progress(done, float(med[-1]) if taken else float("nan"))
        if stop_at is None and np.any(med > online_cfg.thr):
            stop_at = int(ns[np.argmax(med > online_cfg.thr)]) + int(stop_extra)
        if stop_at is not None and done >= stop_at:
            break
    buf = mesh_lib.to_host(state.buf)
    taken = int(np.searchsorted(ns, min(c * chunk, online_cfg.n_steps), side="right"))
    return OnlineResult(ns[:taken], buf[:, :taken, 0], buf[:, :taken, 1])


def escape_time(ns, m, thr: float) -> float:
    """First recorded sample count at which the median over replicas of |m| exceeds ``thr``.

    Args:
      ns: [n_rec] sample counts; m: [R, n_rec] overlaps (sign-ambiguous, |m| is used).
      thr: threshold.

    Returns:
      ``float(ns[i])`` for the first such record i, ``inf`` if never crossed.
    """
    ns, m = np.asarray(ns), np.asarray(m)
    if m.ndim != 2 or m.shape[1] != ns.shape[0]:
        raise ValueError(f"m must have shape [R, {ns.shape[0]}], got m.shape={m.shape}")
    above = np.median(np.abs(m), axis=0) > thr
    return float(ns[np.argmax(above)]) if above.any() else math.inf
