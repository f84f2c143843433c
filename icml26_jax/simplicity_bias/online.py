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


class ReplicaParams(NamedTuple):
    """What may differ between replicas of one program (traced arrays, so dimensions, step
    sizes, budgets and latent correlations are vmapped, not looped).

    Attributes:
      dim: [] int32 active dimension d <= d_pad (coordinates >= d are masked to zero).
      delta: [] step size.
      n_steps: [] int32 samples to see (later steps leave the state unchanged).
      ns: [n_rec] int32 record sample counts (:func:`record_steps` of n_steps).
      corr: [] int32 index into ``mcm.LATENT_CORRS``.
    """

    dim: jax.Array
    delta: jax.Array
    n_steps: jax.Array
    ns: jax.Array
    corr: jax.Array


class ReplicaState(NamedTuple):
    """The carry of one replica between segments of chunks.

    Attributes:
      w: [d_pad] current weights (unit norm, zero beyond dim).
      j: [] int32, records taken so far.
      buf: [n_rec, 2] recorded (m_u, m_v), zero where not yet recorded.
      u, v: [d_pad] the replica's spikes (zero beyond dim).
      noise_key: raw key data of the replica's noise stream (chunk c uses fold_in(., c)).
    """

    w: jax.Array
    j: jax.Array
    buf: jax.Array
    u: jax.Array
    v: jax.Array
    noise_key: jax.Array


class _Static(NamedTuple):
    """Hashable jit-static part shared by every replica of one program."""

    mcm_cfg: mcm.MCMConfig  # d = d_pad; latent_corr unused (per replica)
    link: str
    a: float
    n_rec: int
    chunk: int
    seg: int  # chunks per call
    impl: object  # PRNG implementation of the keys


def _mask(dim, d_pad: int):
    return (jnp.arange(d_pad) < dim).astype(jnp.float32)


def init_replica(key: jax.Array, p: ReplicaParams, st: _Static) -> ReplicaState:
    """Spikes (QR of a masked Gaussian d_pad x 2), w0 uniform on the active sphere and the
    noise stream of one replica, from ``split(key, 3)``; nothing recorded yet."""
    d_pad = st.mcm_cfg.d
    mask = _mask(p.dim, d_pad)
    k_spk, k_init, k_noise = jax.random.split(key, 3)
    g = jax.random.normal(k_spk, (d_pad, 2)) * mask[:, None]
    q, r = jnp.linalg.qr(g)
    q = q * jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0) * mask[:, None]
    w0 = jax.random.normal(k_init, (d_pad,)) * mask
    w0 = w0 / jnp.linalg.norm(w0)
    return ReplicaState(w0, jnp.zeros((), jnp.int32), jnp.zeros((st.n_rec, 2), w0.dtype),
                        q[:, 0], q[:, 1], jax.random.key_data(k_noise))


def advance(state: ReplicaState, p: ReplicaParams, c0, st: _Static) -> ReplicaState:
    """Runs chunks ``c0 .. c0 + st.seg - 1`` of one replica (pure; ``c0`` may be traced).

    Chunk c holds steps ``c * chunk .. (c + 1) * chunk - 1`` with noise from
    ``fold_in(noise_key, c)`` drawn as [chunk, d_pad] blocks (masked to the active
    coordinates), each chunk a scan over its steps. Steps past ``p.n_steps`` leave the state
    unchanged, so splitting a run into segments gives exactly the one-call trajectory.
    """
    cfg, a = st.mcm_cfg, st.a
    d_pad, chunk = cfg.d, st.chunk
    b = math.sqrt(max(0.0, 1.0 - a * a))
    phi = denoisers.oracle_link(st.link, cfg.beta_u, cfg.beta_v, a, b, cfg.nu, cfg.rho)
    mask = _mask(p.dim, d_pad)
    u, v = state.u, state.v
    k_noise = jax.random.wrap_key_data(state.noise_key, impl=st.impl)

    def step(carry, inp):
        w, j, buf = carry
        x0, xt, t = inp  # [d_pad], [d_pad], []
        w = jnp.where(t < p.n_steps, sgd_step(w, x0, xt, phi, a, p.delta), w)
        jj = jnp.minimum(j, st.n_rec - 1)
        hit = (t + 1 == p.ns[jj]) & (j < st.n_rec)
        m = jnp.stack([w @ u, w @ v])
        buf = buf.at[jj].set(jnp.where(hit, m, buf[jj]))
        return (w, j + hit.astype(jnp.int32), buf), None

    def run_chunk(carry, c):
        k_lat, k_z = jax.random.split(jax.random.fold_in(k_noise, c))
        lam, nu = mcm.sample_latents_indexed(k_lat, chunk, cfg, p.corr)  # [chunk]
        z, xi = jnp.moveaxis(jax.random.normal(k_z, (chunk, 2, d_pad)), 1, 0) * mask
        x0 = mcm.assemble(lam, nu, z, cfg, u, v)  # [chunk, d_pad], zero beyond dim
        xt = a * x0 + b * xi
        t = c * chunk + jnp.arange(chunk, dtype=jnp.int32)
        carry, _ = jax.lax.scan(step, carry, (x0, xt, t))
        return carry, None

    cs = jnp.asarray(c0, jnp.int32) + jnp.arange(st.seg, dtype=jnp.int32)
    (w, j, buf), _ = jax.lax.scan(run_chunk, (state.w, state.j, state.buf), cs)
    return state._replace(w=w, j=j, buf=buf)


def params_of(mcm_cfg: mcm.MCMConfig, online_cfg: OnlineConfig) -> ReplicaParams:
    """The (host) :class:`ReplicaParams` of one configuration."""
    return ReplicaParams(np.int32(online_cfg.d), np.float32(online_cfg.delta),
                         np.int32(online_cfg.n_steps),
                         record_steps(online_cfg.n_steps, online_cfg.n_records).astype(np.int32),
                         np.int32(mcm.LATENT_CORRS.index(mcm_cfg.latent_corr)))


def run_replica(key: jax.Array, mcm_cfg: mcm.MCMConfig, online_cfg: OnlineConfig):
    """One replica of online SGD over all ``n_steps`` at its own dimension (pure; vmap it
    over keys, jit it with static configs).

    Returns:
      ``(m_u [n_rec], m_v [n_rec])`` at the sample counts of :func:`record_steps`.
    """
    chunk = _chunk_size(online_cfg.d, online_cfg.n_steps)
    st = _Static(mcm_cfg._replace(latent_corr="independent"), online_cfg.link, online_cfg.a,
                 online_cfg.n_records, chunk, -(-online_cfg.n_steps // chunk),
                 jax.random.key_impl(key))
    p = jax.tree.map(jnp.asarray, params_of(mcm_cfg, online_cfg))
    state = advance(init_replica(key, p, st), p, 0, st)
    return state.buf[:, 0], state.buf[:, 1]


def _init_from_data(st, key_data, p):
    return init_replica(jax.random.wrap_key_data(key_data, impl=st.impl), p, st)


def _advance_replica(st, state, p, c0):
    return advance(state, p, c0, st)


@functools.partial(jax.jit, static_argnums=0)
def _init_stacked(st, key_data, p):
    return jax.vmap(lambda kd, q: _init_from_data(st, kd, q))(key_data, p)


@functools.partial(jax.jit, static_argnums=0)
def _advance_stacked(st, state, p, c0):
    return jax.vmap(lambda s, q, c: _advance_replica(st, s, q, c))(state, p, c0)


def _check_group(mcm_cfgs, online_cfgs):
    if len(mcm_cfgs) != len(online_cfgs) or not mcm_cfgs:
        raise ValueError(f"need as many mcm_cfgs as online_cfgs (>= 1), got {len(mcm_cfgs)} "
                         f"and {len(online_cfgs)}")
    for mc, oc in zip(mcm_cfgs, online_cfgs):
        mc.validate()
        oc.validate()
        if mc.d != oc.d:
            raise ValueError(f"mcm_cfg.d={mc.d} and online_cfg.d={oc.d} must agree")
    shared_m = {(m.beta_u, m.beta_v, m.tau, m.nu, m.rho) for m in mcm_cfgs}
    shared_o = {(o.n_records, o.replicas, o.link, o.thr, o.a) for o in online_cfgs}
    if len(shared_m) > 1 or len(shared_o) > 1:
        raise ValueError("configurations run together may differ only in d, latent_corr "
                         "(MCM) and d, delta, n_steps (online); got MCM "
                         f"{sorted(shared_m)} and online {sorted(shared_o)}")


def run_online_group(keys, mcm_cfgs, online_cfgs, mesh=None, *, stop_extra=None,
                     watch: str = "v", segment_steps: int | None = None,
                     progress=None) -> list[OnlineResult]:
    """Runs several configurations -- dimensions, step sizes, budgets, latent correlations --
    as ONE program: every replica of every configuration is a row of one vmapped (and, with
    ``mesh``, sharded) batch, dimensions padded to the largest d with masked coordinates.

    Configuration i's replica r uses ``fold_in(keys[i], r)`` (its own spikes, init and
    noise). The noise is drawn at the padded dimension, so a trajectory depends on the
    padding (not on the other configurations' values or on the device placement).

    Args:
      keys: one typed PRNG key per configuration.
      mcm_cfgs, online_cfgs: the configurations; they may differ only in ``d`` and
        ``latent_corr`` (MCM) and ``d``, ``delta``, ``n_steps`` (online).
      mesh: None, or a mesh with a ``core.mesh.RUNS`` axis over which the rows are sharded
        (``core.mesh.map_runs``: padded to a multiple of its size, padding dropped on read).
      stop_extra: None (run every configuration to its n_steps), or steps (an int, or one per
        configuration) to keep running after the median |m_watch| of a configuration first
        exceeds ``thr`` at a record n*; its records stop at the first segment end past
        n* + stop_extra, and the program stops when every configuration is done.
      watch: the overlap checked for the early stop, 'u' or 'v'.
      segment_steps: steps per host check when stopping early (default max n_steps / 64).
      progress: optional ``progress(steps_done, [median |m_watch| of each configuration])``.

    Returns:
      One :class:`OnlineResult` per configuration (host arrays; records cut at the stop).
    """
    keys, mcm_cfgs, online_cfgs = list(keys), list(mcm_cfgs), list(online_cfgs)
    _check_group(mcm_cfgs, online_cfgs)
    if len(keys) != len(mcm_cfgs):
        raise ValueError(f"need one key per configuration, got {len(keys)} keys for "
                         f"{len(mcm_cfgs)} configurations")
    if watch not in ("u", "v"):
        raise ValueError(f"watch must be 'u' or 'v', got watch={watch!r}")
    K = len(online_cfgs)
    extra = None
    if stop_extra is not None:
        extra = [int(x) for x in (stop_extra if np.ndim(stop_extra) else [stop_extra] * K)]
        if len(extra) != K or min(extra) < 0:
            raise ValueError(f"stop_extra must be >= 0 (one value or one per configuration), "
                             f"got stop_extra={stop_extra!r}")
    if segment_steps is not None and not int(segment_steps) >= 1:
        raise ValueError(f"segment_steps must be >= 1, got segment_steps={segment_steps!r}")
    oc0 = online_cfgs[0]
    R, n_rec = oc0.replicas, oc0.n_records
    d_pad = max(o.d for o in online_cfgs)
    n_max = max(o.n_steps for o in online_cfgs)
    chunk = _chunk_size(d_pad, n_max)
    n_chunks = -(-n_max // chunk)
    if extra is None:
        seg = n_chunks
    else:
        seg_steps = segment_steps or max(1, n_max // 64)
        seg = int(min(n_chunks, max(1, round(seg_steps / chunk))))
    st = _Static(mcm_cfgs[0]._replace(d=d_pad, latent_corr="independent"), oc0.link, oc0.a,
                 n_rec, chunk, seg, jax.random.key_impl(keys[0]))
    params = [params_of(m, o) for m, o in zip(mcm_cfgs, online_cfgs)]
    p = jax.tree.map(lambda *xs: np.repeat(np.stack(xs), R, axis=0), *params)  # [K R, ...]
    key_data = np.concatenate([np.asarray(jax.device_get(jax.random.key_data(jax.vmap(
        lambda r, k=k: jax.random.fold_in(k, r))(jnp.arange(R, dtype=jnp.int32)))))
        for k in keys])  # [K R, ...]

    def run_segment(state, c):
        c0 = np.full((K * R,), c, np.int32)
        if mesh is None:
            return _advance_stacked(st, state, p, c0)
        return mesh_lib.map_runs(mesh, _advance_replica, st, state, p, c0)

    state = (_init_stacked(st, key_data, p) if mesh is None
             else mesh_lib.map_runs(mesh, _init_from_data, st, key_data, p))
    ns = [q.ns.astype(np.int64) for q in params]
    col = 0 if watch == "u" else 1
    stop_at = [None] * K  # n* + extra once escaped
    cut = [None] * K  # steps done when a configuration's records end
    c = 0
    while c < n_chunks:
        state = run_segment(state, c)
        c += seg
        if extra is None:
            continue
        done = c * chunk
        buf = mesh_lib.to_host(state.buf, K * R).reshape(K, R, n_rec, 2)
        meds = []
        for i in range(K):
            taken = int(np.searchsorted(ns[i], done, side="right"))
            med = np.median(np.abs(buf[i, :, :taken, col]), axis=0)
            meds.append(float(med[-1]) if taken else float("nan"))
            if stop_at[i] is None and np.any(med > online_cfgs[i].thr):
                stop_at[i] = int(ns[i][np.argmax(med > online_cfgs[i].thr)]) + extra[i]
            if cut[i] is None and (done >= online_cfgs[i].n_steps
                                   or (stop_at[i] is not None and done >= stop_at[i])):
                cut[i] = done
        if progress is not None:
            progress(done, meds)
        if all(x is not None for x in cut):
            break
    buf = mesh_lib.to_host(state.buf, K * R).reshape(K, R, n_rec, 2)
    out = []
    for i in range(K):
        end = c * chunk if cut[i] is None else cut[i]
        taken = int(np.searchsorted(ns[i], end, side="right"))
        out.append(OnlineResult(ns[i][:taken], buf[i, :, :taken, 0], buf[i, :, :taken, 1]))
    return out


def run_online(key: jax.Array, mcm_cfg: mcm.MCMConfig, online_cfg: OnlineConfig,
               mesh=None, *, stop_extra: int | None = None, watch: str = "v",
               segment_steps: int | None = None, progress=None) -> OnlineResult:
    """Runs ``online_cfg.replicas`` independent replicas of online SGD (spec §Method): one
    configuration of :func:`run_online_group` (no padding).

    Replica r uses ``fold_in(key, r)`` (its own spikes, init and noise), so results do not
    depend on R's placement or on the segmentation. Without ``stop_extra`` all ``n_steps``
    run as one program; with it, the run goes in segments of about ``segment_steps`` steps
    (one compiled program reused) with a host check after each: once the median over
    replicas of |m_watch| has exceeded ``online_cfg.thr`` at a record n*, the run stops as
    soon as ``n* + stop_extra`` steps are done (the d^3 runs, spec §Pitfalls), and only the
    records taken are returned.

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
    cb = None if progress is None else (lambda n, meds: progress(n, meds[0]))
    return run_online_group([key], [mcm_cfg], [online_cfg], mesh, stop_extra=stop_extra,
                            watch=watch, segment_steps=segment_steps, progress=cb)[0]


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
