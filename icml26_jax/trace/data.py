"""Synthetic data of TRACE (Fan, Zhang & Cheng, ICML 2026): atomic mechanisms, pure-domain
sequences, mechanism trajectories alpha(t) and the released ``.npz`` format.

Everything here is numpy float64; no JAX. The process (paper Sec. 3, released
``gen_dataset.py`` / ``gen_trajectory.py``), row vectors throughout (``y @ W``):

  f_k(y_{t-1}, y_{t-2}, eps) = LReLU( LReLU(y_{t-1} W_k) + LReLU(y_{t-2} W_lag2) + eps ),
  W_k = W_lag1 + dW_k,  dW_k = delta * e_{i_k} e_{j_k}^T,  eps ~ N(0, 0.1^2 I),
  x_t = g(y_t) = LReLU( LReLU(y_t) A_1 ) A_2,

LReLU with slope 0.2. A transitional mechanism mixes the atomic ones with weights
alpha(t) on the simplex, either inside the nonlinearity (``'param'``, the released data:
W(t) = W_lag1 + sum_k alpha_k dW_k) or outside it (``'function'``, the paper's formal model
f_t = sum_k alpha_k f_k with the same eps in every f_k, so E[y_t] is affine in alpha).

Random streams: mechanisms from ``np.random.default_rng(data_seed)`` in the order of
:func:`make_mechanisms`; pure training data from ``default_rng((data_seed, 1))`` and
validation data from ``default_rng((data_seed, 2))`` (:func:`train_val`); trajectory
ensembles from a generator the caller seeds, e.g. ``default_rng((seed, 100 + variant))``.
The released code draws from the legacy global ``np.random`` state and
``scipy.stats.ortho_group``; the seeded generators here reproduce the paper's golden edges at
``data_seed=42`` (see :func:`make_mechanisms`), the legacy stream does not.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Sequence

import numpy as np

NEG_SLOPE = 0.2
NOISE_SCALE = 0.1
LAGS = 2
FAMILIES = ("simple", "medium", "complex")
MIX_MODES = ("param", "function")


class MechParams(NamedTuple):
    """Ground-truth parameters of the process (all float64 numpy).

    Attributes:
      w_lag1: ``[d, d]`` shared lag-1 base transition W_lag1.
      w_lag2: ``[d, d]`` lag-2 transition W_lag2, the same in every domain.
      delta_w: ``[K, d, d]`` per-domain lag-1 changes dW_k, one non-zero entry each.
      edges: ``[K, 2]`` int64 ``(i_k, j_k)``, the changed entry of each domain (distinct).
      mixing: ``[2, d, d]`` orthogonal mixing matrices ``(A_1, A_2)``.
      cond_threshold: the condition-number bound the base transitions satisfy.
    """

    w_lag1: np.ndarray
    w_lag2: np.ndarray
    delta_w: np.ndarray
    edges: np.ndarray
    mixing: np.ndarray
    cond_threshold: float

    @property
    def k_total(self) -> int:
        return int(self.delta_w.shape[0])

    @property
    def d(self) -> int:
        return int(self.w_lag1.shape[0])


class PureData(NamedTuple):
    """Pure-domain sequences, domains concatenated in order (``c`` sorted).

    Attributes:
      x: ``[N, L + 1, d]`` observations (steps t-2, t-1, t).
      y: ``[N, L + 1, d]`` true latents, or ``None`` when a file holds none.
      c: ``[N]`` int32 domain labels.
    """

    x: np.ndarray
    y: np.ndarray | None
    c: np.ndarray


def leaky_relu(x, slope: float = NEG_SLOPE) -> np.ndarray:
    """Elementwise ``x if x > 0 else slope * x``."""
    x = np.asarray(x, np.float64)
    if 0.0 <= slope <= 1.0:  # max(x, slope x) is the same map, without a mask
        return np.maximum(x, slope * x)
    return np.where(x > 0, x, slope * x)


def _unit_columns(a: np.ndarray) -> np.ndarray:
    """Scales every column (axis -2 runs over rows) to unit l2 norm."""
    return a / np.sqrt(np.sum(a * a, axis=-2, keepdims=True))


def _haar_orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    """Haar-distributed orthogonal matrix: QR of a Gaussian, column signs fixed by diag(R)."""
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return q * np.sign(np.diag(r))[None, :]


def make_mechanisms(data_seed: int = 42, d: int = 8, k_total: int = 5,
                    delta: float = 0.5) -> MechParams:
    """Draws the atomic mechanisms and the mixing function (released ``gen_dataset.py``).

    Draw order from ``np.random.default_rng(data_seed)``:
      1. ``uniform(1, 2, (10000, d, d))`` with unit columns; the threshold is the 25th
         percentile of their condition numbers.
      2. W_lag1, then W_lag2: ``uniform(-1, 1, (d, d))`` with unit columns, redrawn until the
         condition number is at most the threshold.
      3. Edges ``permutation(d * d)[:k_total]``, flat index p -> ``(p // d, p % d)``.
      4. A_1, then A_2: Haar orthogonal by QR.

    At ``data_seed=42`` (d = 8, K = 5) the edges are (4,6), (4,3), (1,7), (5,6), (3,3).

    Args:
      data_seed: seed of the mechanism draw.
      d: latent (= observed) dimension.
      k_total: number of atomic mechanisms K, at most ``d * d``.
      delta: value of the single changed entry of every dW_k.

    Returns:
      :class:`MechParams`.
    """
    d, k_total = int(d), int(k_total)
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d!r}")
    if not 1 <= k_total <= d * d:
        raise ValueError(f"k_total must be in [1, d*d] = [1, {d * d}], got {k_total!r}")
    rng = np.random.default_rng(data_seed)
    probe = _unit_columns(rng.uniform(1.0, 2.0, (10000, d, d)))
    threshold = float(np.percentile(np.linalg.cond(probe), 25))

    def well_conditioned() -> np.ndarray:
        while True:
            w = _unit_columns(rng.uniform(-1.0, 1.0, (d, d)))
            if np.linalg.cond(w) <= threshold:
                return w

    w_lag1 = well_conditioned()
    w_lag2 = well_conditioned()
    flat = rng.permutation(d * d)[:k_total]
    edges = np.stack([flat // d, flat % d], axis=1).astype(np.int64)  # [K, 2]
    delta_w = np.zeros((k_total, d, d))
    delta_w[np.arange(k_total), edges[:, 0], edges[:, 1]] = float(delta)
    mixing = np.stack([_haar_orthogonal(rng, d) for _ in range(2)])  # [2, d, d]
    return MechParams(w_lag1, w_lag2, delta_w, edges, mixing, threshold)


def observe(y, mp: MechParams) -> np.ndarray:
    """Mixing function g: ``x = LReLU(LReLU(y) A_1) A_2`` (released ``mixing_function``).

    Args:
      y: ``[..., d]`` latents.
      mp: mechanism parameters (uses ``mp.mixing``).

    Returns:
      ``[..., d]`` observations.
    """
    x = np.asarray(y, np.float64)
    for a in mp.mixing:
        x = leaky_relu(x) @ a
    return x


def transition(y1, y2, eps, w, w_lag2) -> np.ndarray:
    """One atomic step ``LReLU(LReLU(y1 W) + LReLU(y2 W_lag2) + eps)``.

    Args:
      y1: ``[..., d]`` y_{t-1}.
      y2: ``[..., d]`` y_{t-2}.
      eps: ``[..., d]`` noise.
      w: ``[d, d]`` (or broadcastable ``[..., d, d]``) lag-1 transition.
      w_lag2: ``[d, d]`` lag-2 transition.

    Returns:
      ``[..., d]`` y_t.
    """
    # Contiguous operands keep numpy's matmul on the BLAS path (lag slices are strided).
    y1, y2, w = (np.ascontiguousarray(a, np.float64) for a in (y1, y2, w))
    if w.ndim == 2:
        lag1 = leaky_relu(y1 @ w)
    else:  # per-sample matrices: batched row-vector products
        lag1 = leaky_relu(np.matmul(y1[..., None, :], w)[..., 0, :])
    return leaky_relu(lag1 + leaky_relu(y2 @ w_lag2) + eps)


def _check_mix_mode(mix_mode: str) -> None:
    if mix_mode not in MIX_MODES:
        raise ValueError(f"mix_mode must be one of {MIX_MODES}, got {mix_mode!r}")


def mixed_transition(y1, y2, eps, mp: MechParams, alpha, active: Sequence[int],
                     mix_mode: str = "param") -> np.ndarray:
    """Transitional mechanism at one simplex point ``alpha`` over the ``active`` domains.

    ``'param'``: ``f(.; W_lag1 + sum_k alpha_k dW_{active[k]})``. ``'function'``:
    ``sum_k alpha_k f_{active[k]}(y1, y2, eps)`` with the same ``eps`` in every term.

    Args:
      y1: ``[B, d]`` y_{t-1}.
      y2: ``[B, d]`` y_{t-2}.
      eps: ``[B, d]`` noise.
      mp: mechanism parameters.
      alpha: ``[K_a]`` mixing weights, ordered like ``active``.
      active: the ``K_a`` domain indices being mixed.
      mix_mode: ``'param'`` or ``'function'``.

    Returns:
      ``[B, d]`` y_t.
    """
    _check_mix_mode(mix_mode)
    alpha = np.asarray(alpha, np.float64)
    y1, y2 = np.ascontiguousarray(y1, np.float64), np.ascontiguousarray(y2, np.float64)
    dws = mp.delta_w[np.asarray(active, np.int64)]  # [K_a, d, d]
    if mix_mode == "param":
        w = mp.w_lag1 + np.tensordot(alpha, dws, axes=1)
        return transition(y1, y2, eps, w, mp.w_lag2)
    # Shared lag-2 and noise terms; only the lag-1 part differs between experts.
    n, d = y1.shape[0], mp.d
    lag2 = leaky_relu(y2 @ mp.w_lag2)  # [B, d]
    # All experts in one [B, d] x [d, K_a d] product: one GEMM instead of K_a.
    w_all = (mp.w_lag1[None] + dws).transpose(1, 0, 2).reshape(d, -1)  # [d, K_a d]
    lag1 = leaky_relu(y1 @ w_all).reshape(n, -1, d)  # [B, K_a, d]
    f = leaky_relu(lag1 + (lag2 + eps)[:, None])  # [B, K_a, d]
    return np.einsum("k,bkj->bj", alpha, f, optimize=True)


def _standard_lags(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``[n, L, d]`` lags ~ N(0, I), standardised over the batch axis (ddof 0) per lag and
    dimension, as the released generator does; index 0 is y_{t-2}, index 1 is y_{t-1}."""
    lags = rng.normal(0.0, 1.0, (n, LAGS, d))
    return (lags - lags.mean(axis=0, keepdims=True)) / lags.std(axis=0, keepdims=True)


def _one_step(rng, mp, n, alpha, active, mix_mode):
    """Draws lags, then noise, then applies one transition: ``y [n, 3, d]``."""
    lags = _standard_lags(rng, n, mp.d)
    eps = rng.normal(0.0, NOISE_SCALE, (n, mp.d))
    y_t = mixed_transition(lags[:, 1], lags[:, 0], eps, mp, alpha, active, mix_mode)
    return np.concatenate([lags, y_t[:, None]], axis=1)


def sample_pure(rng: np.random.Generator, mp: MechParams, n_per_domain: int) -> PureData:
    """Pure-domain sequences for every domain k = 0..K-1, in that order.

    Per domain: lags standardised over that domain's batch, noise sd 0.1, one transition
    with W_k, all three steps observed through g.

    Args:
      rng: numpy generator (training data: ``default_rng((data_seed, 1))``).
      mp: mechanism parameters.
      n_per_domain: sequences per domain.

    Returns:
      :class:`PureData` with ``N = K * n_per_domain``.
    """
    n = int(n_per_domain)
    if n < 2:
        raise ValueError(f"n_per_domain must be >= 2 (lags are standardised), got {n!r}")
    ys = [_one_step(rng, mp, n, np.ones(1), [k], "param") for k in range(mp.k_total)]
    y = np.concatenate(ys, axis=0)  # [K n, 3, d]
    c = np.repeat(np.arange(mp.k_total, dtype=np.int32), n)
    return PureData(observe(y, mp), y, c)


def train_val(mp: MechParams, data_seed: int = 42, n_train: int = 8000,
              n_val: int = 2048) -> tuple[PureData, PureData]:
    """Pure training data from ``default_rng((data_seed, 1))``, validation from ``(data_seed, 2)``.

    Args:
      mp: mechanism parameters (from ``make_mechanisms(data_seed, ...)``).
      data_seed: the data seed.
      n_train: training sequences per domain.
      n_val: validation sequences per domain.

    Returns:
      ``(train, val)`` :class:`PureData`.
    """
    train = sample_pure(np.random.default_rng((data_seed, 1)), mp, n_train)
    val = sample_pure(np.random.default_rng((data_seed, 2)), mp, n_val)
    return train, val


def trajectory(kind: str, T: int, k_active: int) -> np.ndarray:
    """Mechanism trajectory ``alpha [T, k_active]`` (released ``gen_trajectory.py``).

    Columns follow the order of the active list. With K_a = ``k_active``:
      * ``'simple'``: piecewise linear through the vertices 0 -> 1 -> ... -> K_a-1,
        ``seg_len = T / (K_a - 1)``; at most two non-zeros per row. As released, the last
        row is one step short of the final vertex.
      * ``'medium'``: Gaussian bumps at ``peak_i = i (T-1)/(K_a-1)``, ``sigma = T/(K_a+1)``,
        normalised per row.
      * ``'complex'``: ``alpha_i ∝ (1 + cos(2 pi (1 + i/2) t_norm + i pi / K_a)) / 2``,
        ``t_norm = linspace(0, 1, T)``, normalised per row.

    A row whose unnormalised weights sum below 1e-10 is set uniform (the release leaves it
    all-zero, off the simplex; no such row occurs for the shipped sizes).

    Args:
      kind: trajectory family, one of ``('simple', 'medium', 'complex')``.
      T: number of time steps, >= 3.
      k_active: number of active domains K_a, >= 2.

    Returns:
      ``[T, k_active]`` float64 rows on the simplex.
    """
    if kind not in FAMILIES:
        raise ValueError(f"family (kind) must be one of {FAMILIES}, got {kind!r}")
    if int(T) != T or T < 3:
        raise ValueError(f"T must be an integer >= 3, got {T!r}")
    if int(k_active) != k_active or k_active < 2:
        raise ValueError(f"k_active must be an integer >= 2, got {k_active!r}")
    T, k = int(T), int(k_active)
    t = np.arange(T, dtype=np.float64)
    i = np.arange(k, dtype=np.float64)
    if kind == "simple":
        seg_len = T / (k - 1)
        seg = np.minimum(np.floor(t / seg_len).astype(np.int64), k - 2)  # [T]
        prog = np.clip((t - seg * seg_len) / seg_len, 0.0, 1.0)
        alpha = np.zeros((T, k))
        alpha[np.arange(T), seg] = 1.0 - prog
        alpha[np.arange(T), seg + 1] = prog
        return alpha
    if kind == "medium":
        peak = i * (T - 1) / (k - 1)  # [K_a]
        sigma = T / (k + 1)
        raw = np.exp(-0.5 * ((t[:, None] - peak[None]) / sigma) ** 2)  # [T, K_a]
    else:
        t_norm = np.linspace(0.0, 1.0, T)
        raw = 0.5 * (1.0 + np.cos(2.0 * np.pi * (1.0 + 0.5 * i[None]) * t_norm[:, None]
                                  + i[None] * np.pi / k))
    total = raw.sum(axis=1, keepdims=True)
    empty = total < 1e-10
    raw = np.where(empty, 1.0, raw)
    return raw / np.where(empty, float(k), total)


def select_active(x_last_means, k_active: int) -> list[int]:
    """Greedy max-separation choice of active domains (released ``gen_trajectory.py``).

    Takes the farthest pair of domain means (first pair in row-major order on ties), then
    repeatedly adds the domain with the largest minimum distance to those chosen.

    Args:
      x_last_means: ``[K, d]`` per-domain means of the last observed step x_t.
      k_active: number of domains to choose, in [2, K].

    Returns:
      The chosen domain indices, sorted ascending (as released).
    """
    m = np.asarray(x_last_means, np.float64)
    if m.ndim != 2:
        raise ValueError(f"x_last_means must have shape [K, d], got {m.shape}")
    k_total = m.shape[0]
    if int(k_active) != k_active or not 2 <= k_active <= k_total:
        raise ValueError(f"k_active must be an integer in [2, K={k_total}], got {k_active!r}")
    if k_active == k_total:
        return list(range(k_total))
    dist = np.linalg.norm(m[:, None] - m[None], axis=-1)  # [K, K]
    upper = np.where(np.triu(np.ones((k_total, k_total), bool), 1), dist, -np.inf)
    a, b = np.unravel_index(int(np.argmax(upper)), upper.shape)
    chosen = [int(a), int(b)]
    while len(chosen) < k_active:
        min_dist = dist[:, chosen].min(axis=1)
        min_dist[chosen] = -np.inf
        chosen.append(int(np.argmax(min_dist)))
    return sorted(chosen)


def sample_trajectory(rng: np.random.Generator, mp: MechParams, alpha, active: Sequence[int],
                      batch: int = 500, mix_mode: str = "param"
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Ensembles along a trajectory: ``batch`` independent sequences per time step.

    Each step draws fresh lags (standardised over the ensemble), then noise, and applies the
    transitional mechanism at ``alpha[t]`` over the ``active`` domains.

    Args:
      rng: numpy generator (e.g. ``default_rng((seed, 100 + variant))``).
      mp: mechanism parameters.
      alpha: ``[T, K_a]`` trajectory, columns ordered like ``active``.
      active: the ``K_a`` active domain indices.
      batch: ensemble size B per step.
      mix_mode: ``'param'`` or ``'function'``.

    Returns:
      ``(x, y)``, each ``[T, B, 3, d]``.
    """
    _check_mix_mode(mix_mode)
    alpha = np.asarray(alpha, np.float64)
    active = [int(a) for a in active]
    if alpha.ndim != 2 or alpha.shape[1] != len(active):
        raise ValueError(f"alpha must have shape [T, len(active)={len(active)}], "
                         f"got {alpha.shape}")
    if not all(0 <= a < mp.k_total for a in active):
        raise ValueError(f"active must hold indices in [0, {mp.k_total}), got {active}")
    if int(batch) < 2:
        raise ValueError(f"batch must be >= 2 (lags are standardised), got {batch!r}")
    y = np.stack([_one_step(rng, mp, int(batch), a_t, active, mix_mode) for a_t in alpha])
    return observe(y, mp), y


def load_npz(path: str | os.PathLike):
    """Reads the released ``.npz`` formats.

    * Pure data (``data.npz``): ``xt [N, L+1, D]``, ``ct [N, 1]`` (or ``[N]``), optional
      ``yt [N, L+1, D']`` -> :class:`PureData` (``y`` is ``None`` without ``yt``).
    * Trajectory files: ``xt [B, T, L+1, D]``, ``alpha [T, K]``, ``domains [K_a]``,
      optional ``yt`` -> dict with ``'x'`` (and ``'y'`` or ``None``) transposed to
      ``[T, B, L+1, D]`` like :func:`sample_trajectory`, ``'alpha' [T, K_a]`` (the active
      columns, in ``domains`` order), ``'alpha_file'`` as stored and ``'domains'``.
      The release stores ``alpha`` over all K_total domains; a file whose ``alpha`` has
      exactly ``K_a`` columns that cannot index ``domains`` is taken as already restricted.

    Args:
      path: file path.

    Returns:
      :class:`PureData` or a dict, see above.
    """
    with np.load(path, allow_pickle=False) as f:
        data = {k: f[k] for k in f.files}
    if "xt" not in data:
        raise ValueError(f"{path}: missing key 'xt' (found {sorted(data)})")
    xt = np.asarray(data["xt"], np.float64)
    yt = np.asarray(data["yt"], np.float64) if "yt" in data else None
    if "alpha" in data or xt.ndim == 4:
        missing = [k for k in ("alpha", "domains") if k not in data]
        if missing:
            raise ValueError(f"{path}: trajectory file missing keys {missing}")
        if xt.ndim != 4:
            raise ValueError(f"{path}: trajectory 'xt' must be [B, T, L+1, D], got {xt.shape}")
        alpha_file = np.asarray(data["alpha"], np.float64)
        domains = [int(v) for v in np.asarray(data["domains"]).reshape(-1)]
        if alpha_file.ndim != 2 or alpha_file.shape[0] != xt.shape[1]:
            raise ValueError(f"{path}: 'alpha' must be [T={xt.shape[1]}, K], got "
                             f"{alpha_file.shape}")
        if domains and max(domains) < alpha_file.shape[1] and min(domains) >= 0:
            alpha = alpha_file[:, domains]
        elif alpha_file.shape[1] == len(domains):
            alpha = alpha_file
        else:
            raise ValueError(f"{path}: 'domains' {domains} do not index 'alpha' with "
                             f"{alpha_file.shape[1]} columns")
        if yt is not None and yt.shape[:3] != xt.shape[:3]:
            raise ValueError(f"{path}: 'yt' shape {yt.shape} does not match 'xt' {xt.shape}")
        y = None if yt is None else np.swapaxes(yt, 0, 1)
        return {"x": np.swapaxes(xt, 0, 1), "y": y, "alpha": alpha,
                "alpha_file": alpha_file, "domains": domains}
    if "ct" not in data:
        raise ValueError(f"{path}: missing key 'ct' (found {sorted(data)})")
    if xt.ndim != 3:
        raise ValueError(f"{path}: 'xt' must be [N, L+1, D], got {xt.shape}")
    ct = np.asarray(data["ct"])
    if ct.ndim == 2 and ct.shape[1] == 1:
        ct = ct[:, 0]
    if ct.shape != (xt.shape[0],):
        raise ValueError(f"{path}: 'ct' must be [N={xt.shape[0]}, 1] or [N], got {ct.shape}")
    if yt is not None and yt.shape[:2] != xt.shape[:2]:
        raise ValueError(f"{path}: 'yt' shape {yt.shape} does not match 'xt' {xt.shape}")
    c = ct.astype(np.int32)
    if not np.array_equal(c, ct):
        raise ValueError(f"{path}: 'ct' must hold integer domain labels")
    return PureData(xt, yt, c)
