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


def run_replica(key: jax.Array, mcm_cfg: mcm.MCMConfig, online_cfg: OnlineConfig):
    """One replica of online SGD (pure; vmap it over keys, jit it with static configs).

    Keys: spikes, init and noise from ``split(key, 3)``; chunk c's noise from
    ``fold_in(noise_key, c)``. The steps run as a scan over chunks of ``chunk`` steps (noise
    drawn as [chunk, d] blocks), each a scan over its steps; steps past ``n_steps`` (padding of
    the last chunk) leave w unchanged.

    Returns:
      ``(m_u [n_rec], m_v [n_rec])`` at the sample counts of :func:`record_steps`.
    """
    cfg, oc = mcm_cfg, online_cfg
    d, n_steps = oc.d, oc.n_steps
    a, b, delta = oc.a, oc.b, oc.delta
    phi = denoisers.oracle_link(oc.link, cfg.beta_u, cfg.beta_v, a, b)
    ns = jnp.asarray(record_steps(n_steps, oc.n_records), jnp.int32)  # [n_rec]
    n_rec = ns.shape[0]
    chunk = _chunk_size(d, n_steps)
    n_chunks = -(-n_steps // chunk)

    k_spk, k_init, k_noise = jax.random.split(key, 3)
    u, v = mcm.spikes(k_spk, d)
    w0 = jax.random.normal(k_init, (d,))
    w0 = w0 / jnp.linalg.norm(w0)

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

    init = (w0, jnp.zeros((), jnp.int32), jnp.zeros((n_rec, 2), w0.dtype))
    (_, _, buf), _ = jax.lax.scan(run_chunk, init, jnp.arange(n_chunks, dtype=jnp.int32))
    return buf[:, 0], buf[:, 1]


def _replica_from_data(static, key_data):
    mcm_cfg, online_cfg, impl = static
    return run_replica(jax.random.wrap_key_data(key_data, impl=impl), mcm_cfg, online_cfg)


@functools.partial(jax.jit, static_argnums=0)
def _run_stacked(static, key_data):
    return jax.vmap(lambda kd: _replica_from_data(static, kd))(key_data)


def run_online(key: jax.Array, mcm_cfg: mcm.MCMConfig, online_cfg: OnlineConfig,
               mesh=None) -> OnlineResult:
    """Runs ``online_cfg.replicas`` independent replicas of online SGD (spec §Method).

    Replica r uses ``fold_in(key, r)`` (its own spikes, init and noise), so results do not
    depend on R's placement. One program is compiled per (configs) pair.

    Args:
      key: typed PRNG key.
      mcm_cfg: :class:`mcm.MCMConfig` (its d must equal ``online_cfg.d``).
      online_cfg: :class:`OnlineConfig`.
      mesh: None (replicas vmapped on the default device) or a mesh with a
        ``core.mesh.RUNS`` axis (e.g. ``core.mesh.runs_mesh(R)``) over which the replicas are
        sharded with ``core.mesh.map_runs``.

    Returns:
      :class:`OnlineResult` with ns [n_rec] and m_u, m_v [R, n_rec] as host arrays.
    """
    mcm_cfg.validate()
    online_cfg.validate()
    if mcm_cfg.d != online_cfg.d:
        raise ValueError(f"mcm_cfg.d={mcm_cfg.d} and online_cfg.d={online_cfg.d} must agree")
    R = online_cfg.replicas
    keys = jax.vmap(lambda r: jax.random.fold_in(key, r))(jnp.arange(R, dtype=jnp.int32))
    static = (mcm_cfg, online_cfg, jax.random.key_impl(key))
    key_data = jax.random.key_data(keys)  # [R, ...] uint32
    if mesh is None:
        m_u, m_v = _run_stacked(static, key_data)
    else:
        m_u, m_v = mesh_lib.map_runs(mesh, _replica_from_data, static,
                                     np.asarray(jax.device_get(key_data)))
    m_u, m_v = mesh_lib.to_host((m_u, m_v))
    return OnlineResult(record_steps(online_cfg.n_steps, online_cfg.n_records), m_u, m_v)


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
