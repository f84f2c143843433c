"""Forecasting with a pretrained Baguan-TS (spec §Method "Inference", steps 1-6).

``forecast`` is the user-facing call: one series, its covariates (future ones known) and a
horizon -> the mean and the nine quantiles. ``forecast_many`` does the same for a stack of
equally shaped series in one compiled call (vmap), which is how the experiment evaluates
many tasks and origins at once.

Inference, per series:
1. the history is cropped to the last ``context_len`` steps (one shape for training and
   inference), covariates are padded to ``F_MAX`` columns with a feature mask;
2. contexts: RBfcst (``rag='Yscl'``) or the recent / random / non-overlapping windows;
3. normalisation over contexts x time without the forecast slots; targets clipped to ±10;
4. ``mF`` repeats with random target-patch masking (ratio ``mask_ratio``, blocks of 8),
   each run on y and on -y with the same mask; mean = (f(y) - f(-y)) / 2 and
   Q_q = (Q_q(y) - Q_{1-q}(-y)) / 2 (the anti-symmetric pairing);
5. the repeats are averaged and the normalisation inverted.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.baguan_ts import losses, normalize, retrieval
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.baguan_ts.configs import MODES, RAGS

F_MAX = 3  # covariate columns every series is padded to (the prior draws F in 0..3)
CLIP = 10.0  # normalised targets live in the bar borders [-10, 10]


@dataclasses.dataclass(frozen=True)
class InferenceConfig:
    """Static inference hyper-parameters (hashable: a jit static argument).

    Attributes:
      M: window length; K: supports; period: RBfcst grouping; mF: masked repeats;
      rag: context kind, one of ``RAGS``; mode: ``'3d'`` or ``'2d'`` (tabular);
      antisymmetric: pair every repeat with its sign flip; mask_ratio: share of target
      patches masked per repeat (0 disables); context_len: history the retrieval sees;
      temperature: softmax temperature of the decoded distribution.
    """

    M: int = 64
    K: int = 8
    period: int = 5
    mF: int = 4
    rag: str = "Yscl"
    mode: str = "3d"
    antisymmetric: bool = True
    mask_ratio: float = 0.2
    context_len: int = 160
    temperature: float = 0.9

    def __post_init__(self):
        if self.rag not in RAGS:
            raise ValueError(f"rag must be one of {RAGS}, got rag={self.rag!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got mode={self.mode!r}")
        for name in ("M", "period", "mF", "context_len"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {name}={v!r}")
        if isinstance(self.K, bool) or not isinstance(self.K, int) or self.K < 0:
            raise ValueError(f"K must be an int >= 0, got K={self.K!r}")
        if not 0.0 <= self.mask_ratio < 1.0:
            raise ValueError(f"mask_ratio must be in [0, 1), got {self.mask_ratio}")
        if self.context_len < self.M:
            raise ValueError(f"context_len must be >= M, got context_len={self.context_len}, "
                             f"M={self.M}")


def pad_features(X, f_max: int = F_MAX):
    """``[T, F]`` covariates -> (``[T, f_max]`` zero-padded float32, ``[f_max]`` bool mask)."""
    X = np.asarray(X, np.float32)
    if X.ndim != 2:
        raise ValueError(f"covariates must be [T, F], got shape {X.shape}")
    F = X.shape[1]
    if F > f_max:
        raise ValueError(f"at most {f_max} covariates are supported, got F={F}")
    out = np.zeros((X.shape[0], f_max), np.float32)
    out[:, :F] = X
    return out, np.arange(f_max) < F


def contexts_of(y, X, L: int, H: int, icfg: InferenceConfig, key) -> retrieval.Contexts:
    """The contexts of ``icfg.rag`` for a series whose history is ``y[:L]`` (K >= 1)."""
    args = (y, X, L, icfg.M, H, max(icfg.K, 1), icfg.period)
    if icfg.rag == "Yscl":
        return retrieval.rbfcst(*args)
    if icfg.rag == "recent":
        return retrieval.recent_contexts(*args)
    if icfg.rag == "random":
        return retrieval.random_contexts(key, *args)
    return retrieval.nonoverlap_contexts(*args)


def patch_mask(key, shape, ratio: float, block: int = 8):
    """Random target-patch masking: ``[..., S]`` bool, whole blocks of ``block`` steps masked
    with probability ``ratio`` each (True = masked)."""
    S = shape[-1]
    n_blocks = math.ceil(S / block)
    drop = jax.random.bernoulli(key, ratio, shape[:-1] + (n_blocks,))
    return jnp.repeat(drop, block, axis=-1)[..., :S]


def tabular_inputs(feat_n, targ_n, feat_mask, t0, m: int, H: int):
    """The 2D (tabular) arrangement of a query window: one row per time step.

    Args:
      feat_n: ``[M, F]`` normalised covariates of the query window.
      targ_n: ``[M]`` normalised target, NaN on the last ``H`` steps (the queries).
      feat_mask: ``[F]`` bool.
      t0: absolute time index of the window's first step (season phase; may be traced).
      m: season length (may be traced; m = 1 gives a constant phase).
      H: number of query rows.

    Returns:
      ``(feat [M, 1, F + 3], targ [M, 1, 1], row_mask [M], feat_mask [F + 3])``: the
      covariates plus a normalised time index and sin/cos of the season phase; ``row_mask``
      is True on the labelled rows (the supports of the tabular mode).
    """
    M = targ_n.shape[0]
    t = jnp.arange(M, dtype=jnp.float32)
    m = jnp.maximum(jnp.asarray(m, jnp.float32), 1.0)
    phase = 2.0 * jnp.pi * jnp.mod(jnp.asarray(t0, jnp.float32) + t, m) / m
    extra = jnp.stack([2.0 * t / (M - 1) - 1.0, jnp.sin(phase), jnp.cos(phase)], axis=-1)
    feat = jnp.concatenate([feat_n, extra], axis=-1)[:, None, :]
    fm = jnp.concatenate([jnp.asarray(feat_mask, bool), jnp.ones((3,), bool)])
    return feat, targ_n[:, None, None], jnp.arange(M) < M - H, fm


def _decode(logits, borders, temperature):
    mean = losses.decode_mean(logits, borders, temperature)
    q = losses.decode_quantiles(logits, borders, jnp.asarray(losses.QUANTILES, jnp.float32),
                                temperature)
    return mean, q


def forecast_normalised(model, y, X, feat_mask, t0, L: int, H: int, m: int,
                        icfg: InferenceConfig, key, borders):
    """Steps 2-6 for one series; returns (mean [H], q [H, 9]) in data units.

    ``y`` is ``[L + H]`` (the last ``H`` entries are never read), ``X`` ``[L + H, F_MAX]``.
    """
    k_ctx, k_mask = jax.random.split(key)
    ctx = contexts_of(y, X, L, H, icfg, k_ctx)
    active = ctx.mask & (icfg.K > 0)  # K = 0: no support is seen, not even by the statistics
    slots = retrieval.forecast_slot_mask(ctx._replace(mask=active), H)
    state = normalize.fit(ctx.feat, ctx.targ, slots)
    feat_n, targ_n = normalize.apply(state, ctx.feat, ctx.targ)
    targ_n = jnp.clip(targ_n, -CLIP, CLIP)
    support = jnp.concatenate([active, jnp.zeros((1,), bool)])
    sims = jnp.concatenate([ctx.sims, jnp.zeros((1,), jnp.float32)])
    R = icfg.mF
    masks = patch_mask(k_mask, (R,) + targ_n.shape[:-1], icfg.mask_ratio)  # [R, K+1, M]
    targ_r = jnp.where(masks[..., None], jnp.nan, targ_n[None])
    signs = jnp.asarray([1.0, -1.0] if icfg.antisymmetric else [1.0], jnp.float32)
    targ_rs = (signs[:, None, None, None, None] * targ_r[None]).reshape(
        (-1,) + targ_n.shape)  # [S * R, K+1, M, 1]
    n = targ_rs.shape[0]
    if icfg.mode == "3d":
        logits = model(jnp.broadcast_to(feat_n, (n,) + feat_n.shape), targ_rs,
                       jnp.broadcast_to(support, (n,) + support.shape),
                       jnp.broadcast_to(sims, (n,) + sims.shape), H=H, mode="3d",
                       feat_mask=jnp.broadcast_to(feat_mask, (n,) + feat_mask.shape))
    else:
        q_t0 = t0 + L - icfg.M + H
        tab = jax.vmap(lambda tg: tabular_inputs(feat_n[-1], tg[-1, :, 0], feat_mask, q_t0,
                                                 m, H))(targ_rs)
        logits = model(tab[0], tab[1], tab[2], None, H=H, mode="2d", feat_mask=tab[3],
                       n_query=H)
    mean, q = _decode(logits, borders, icfg.temperature)  # [n, H], [n, H, 9]
    if icfg.antisymmetric:
        mean = (mean[:R] - mean[R:]) / 2.0
        q = (q[:R] - q[R:][..., ::-1]) / 2.0
    mean = normalize.invert(state, jnp.mean(mean, axis=0))
    q = normalize.invert(state, jnp.mean(q, axis=0))
    return mean, jnp.sort(q, axis=-1)


@functools.partial(jax.jit, static_argnames=("graphdef", "L", "H", "icfg"))
def _forecast_many(graphdef, params, y, X, feat_mask, t0, m, key_data, *, L, H, icfg):
    from flax import nnx

    keys = jax.random.wrap_key_data(key_data)
    model = nnx.merge(graphdef, params)
    borders = losses.bar_borders(model.cfg.bins)
    fn = lambda y1, X1, fm, t, m1, k: forecast_normalised(  # noqa: E731
        model, y1, X1, fm, t, L, H, m1, icfg, k, borders)
    return jax.vmap(fn)(y, X, feat_mask, t0, m, keys)


def prepare(y_train, X_train, X_test, H: int, L: int):
    """One series -> the fixed-shape arrays the compiled forecast takes.

    Returns ``(y [L + H], X [L + H, F_MAX], feat_mask [F_MAX], t0)``: the last ``L`` history
    steps (``t0`` = index of the first kept step, for the season phase), the future target
    NaN, covariates padded to ``F_MAX``.
    """
    y_train = np.asarray(y_train, np.float32)
    X_train = np.asarray(X_train, np.float32)
    X_test = np.asarray(X_test, np.float32)
    if y_train.ndim != 1:
        raise ValueError(f"y_train must be 1-D, got shape {y_train.shape}")
    if X_train.ndim != 2 or X_train.shape[0] != y_train.shape[0] or X_test.shape != (
            H, X_train.shape[1]):
        raise ValueError(f"X_train must be [L, F] and X_test [H, F] with L = len(y_train) "
                         f"= {y_train.shape[0]}, H = {H}; got {X_train.shape}, {X_test.shape}")
    if not np.all(np.isfinite(y_train)):
        raise ValueError("y_train must be finite (interpolate missing values first)")
    n = y_train.shape[0]
    Xp, fm = pad_features(np.concatenate([X_train, X_test])[n - L:])
    y = np.concatenate([y_train[n - L:], np.full((H,), np.nan, np.float32)])
    return y, Xp, fm, n - L


def forecast_inputs(series, H: int, icfg: InferenceConfig, key, *, m=1):
    """The arguments of the compiled forecast of :func:`forecast_many` (host arrays).

    Returns ``(L, (y [n, L + H], X [n, L + H, F_MAX], feat_mask [n, F_MAX], t0 [n], m [n],
    key_data [n, 2]))``: every series goes in as an argument, so one program serves any data.
    """
    if not series:
        raise ValueError("series must hold at least one (y_train, X_train, X_test)")
    L = min([icfg.context_len] + [len(s[0]) for s in series])
    if L < icfg.M:
        raise ValueError(f"a history has {L} steps, fewer than the window M={icfg.M}; pass a "
                         "smaller M")
    prepped = [prepare(*s, H, L) for s in series]
    y, X, fm, t0 = (np.stack([p[i] for p in prepped]) for i in range(4))
    ms = np.broadcast_to(np.asarray(m, np.int32), (len(series),))
    keys = jax.random.key_data(jax.random.split(key, len(series)))  # uint32 [n, 2]
    return L, (y, X, fm, np.asarray(t0, np.int32), ms, keys)


def forecast_many(graphdef, params, series, H: int, icfg: InferenceConfig, key, *, m=1,
                  mesh=None):
    """Forecasts a list of ``(y_train, X_train, X_test)`` in one compiled call.

    Every history is cropped to the same length ``L = min(context_len, shortest history)``.
    With a ``mesh`` (``core.mesh.data_mesh()``) the series are sharded over its ``DATA`` axis
    (every device of every process; ``core.mesh.batched`` pads them to a multiple of the
    device count) and the parameters are replicated on it.

    Args:
      graphdef, params: ``nnx.split(model, nnx.Param)`` of a pretrained ``BaguanTS``.
      series: list of ``(y_train [L_i], X_train [L_i, F], X_test [H, F])`` (F <= 3).
      H: horizon.
      icfg: :class:`InferenceConfig`.
      key: typed ``jax.random.key``; series i uses ``split(key, n)[i]``.
      m: season length(s) (an int, or one per series): the 2D mode's season phase.
      mesh: None (one device) or a ``DATA`` mesh to shard the series over.

    Returns:
      ``(mean [n, H], q [n, H, 9])`` numpy float32 in data units (on every process).
    """
    L, (y, X, fm, t0, ms, keys) = forecast_inputs(series, H, icfg, key, m=m)
    if mesh is None:
        mean, q = _forecast_many(graphdef, params, jnp.asarray(y), jnp.asarray(X),
                                 jnp.asarray(fm), jnp.asarray(t0), jnp.asarray(ms), keys, L=L,
                                 H=int(H), icfg=icfg)
        return np.asarray(mean), np.asarray(q)
    params = jax.tree.map(lambda a: mesh_lib.replicate(mesh_lib.to_host(a), mesh), params)
    n = len(series)
    return mesh_lib.batched(
        lambda *a: _forecast_many(graphdef, params, *a, L=L, H=int(H), icfg=icfg), n, n,
        y, X, fm, t0, ms, mesh_lib.to_host(keys), mesh=mesh)


def forecast(graphdef, params, X_train, y_train, X_test, cfg: InferenceConfig, key, *,
             m: int = 1):
    """Forecasts one series (spec API): returns (mean [H], q [H, 9]) as numpy float32.

    Args:
      graphdef, params: ``nnx.split(model, nnx.Param)`` of a pretrained ``BaguanTS``.
      X_train: ``[L, F]`` covariates of the history (F <= 3; ``[L, 0]`` for none).
      y_train: ``[L]`` finite target history.
      X_test: ``[H, F]`` known future covariates.
      cfg: :class:`InferenceConfig`.
      key: typed ``jax.random.key`` (the masked repeats and random contexts).
      m: season length (the 2D mode's season phase).
    """
    X_test = np.asarray(X_test, np.float32)
    if X_test.ndim != 2:
        raise ValueError(f"X_test must be [H, F], got shape {X_test.shape}")
    mean, q = forecast_many(graphdef, params, [(y_train, X_train, X_test)], X_test.shape[0],
                            cfg, key, m=m)
    return mean[0], q[0]
