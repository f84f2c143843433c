"""TRACE inference: the mixing trajectory alpha(t) from latent centroids (spec §Method).

Atomic mechanism k leaves its mark on the latent distribution through the centroid
``mu^(k) = E[z_t | domain k]``. Under a transitional mechanism ``f_t = sum_k alpha_k(t) f_k``
the centroid at time t is (exactly in ``function`` mode, approximately in ``param`` mode) the
same convex combination, ``E[z_t] = sum_k alpha_k(t) mu^(k)``. With the first active domain as
the baseline this is the affine model

    zbar_t - mu^(0) = B alpha_t[1:],    B = [mu^(1) - mu^(0), ..., mu^(K_a-1) - mu^(0)],

so alpha is recovered by least squares and mapped back onto the simplex. The steps of
"TRACE inference" in the spec (paper Sec. 5.3, the released ``inference/infer.py``):

1. :func:`centroid_basis`: centroids of the last-step encoder means of pure-domain data.
2. :func:`solve_alpha`: ``alpha_raw = B^+ (zbar_t - mu^(0))``, ``alpha = [1 - sum alpha_raw,
   alpha_raw]``, then clip-and-renormalise (the release) or a Euclidean simplex projection.
3. :func:`smooth`: a centred moving average with ``2 w + 1`` taps, truncated at the ends.
4. :func:`penalized_ls`: Theorem 4.3's estimator, the simplex-constrained least squares with
   a quadratic total-variation penalty ``lam sum_t ||alpha_{t+1} - alpha_t||^2``,
   ``lam = c T^(1/3)`` (:func:`lambda_of`). Reported only; its MSE bound is not claimed.

Everything is float64 NumPy (spec §Pitfalls: least squares in float64): the basis is
nearly singular on some data draws (sigma_min(B) ~ 0.03-0.07) and float32 pseudo-inverses
visibly move alpha there.

References:
  Fan, Zhang & Cheng, "TRACE: Trajectory Recovery for Continuous Mechanism Evolution in
  Causal Representation Learning", ICML 2026 (arXiv:2601.21135), Sec. 5.3 and Theorem 4.3.
  Duchi, Shalev-Shwartz, Singer & Chandra, "Efficient projections onto the l1-ball for
  learning in high dimensions", ICML 2008 (the sort-based simplex projection).
  Beck & Teboulle, "A fast iterative shrinkage-thresholding algorithm", SIAM J. Imaging
  Sci. 2009; O'Donoghue & Candes, "Adaptive restart for accelerated gradient schemes",
  Found. Comput. Math. 2015 (the accelerated projected gradient of :func:`penalized_ls`).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

PROJECTIONS = ("clip", "euclid", "none")

# The release's guard for a clipped row summing to (almost) zero. It cannot trigger on a
# finite row: the affine coordinates sum to 1, so the positive parts sum to at least 1.
_CLIP_EPS = 1e-10


class Basis(NamedTuple):
    """The centroid basis of step 1.

    Attributes:
      mu0: ``[d]`` centroid of the baseline domain (the first active domain).
      b: ``[d, K_a - 1]`` differential basis, column k - 1 is ``mu^(k) - mu^(0)``.
      mus: ``[K_a, d]`` all centroids in active order (``mus[0] == mu0``).
    """

    mu0: np.ndarray
    b: np.ndarray
    mus: np.ndarray


def _as_f64(x, name: str, ndim: int | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {x.shape}")
    return x


def _check_zbar(zbar, basis: Basis) -> np.ndarray:
    zbar = _as_f64(zbar, "zbar", ndim=2)
    d = basis.mu0.shape[0]
    if zbar.shape[1] != d:
        raise ValueError(f"zbar must have shape [T, d] with d = {d} (the basis dimension), "
                         f"got shape {zbar.shape}")
    return zbar


def centroid_basis(z_last, c, active: Sequence[int]) -> Basis:
    """Step 1: per-domain centroids and the differential basis ``B``.

    ``mu^(k)`` is the mean of ``z_last`` over the samples whose label is ``active[k]``; the
    first active domain is the baseline ``mu^(0)``, and ``B = [mu^(k) - mu^(0)]_{k=1..K_a-1}``.

    Args:
      z_last: ``[N, d]`` latent codes of the last step of pure-domain sequences (encoder
        means in TRACE; true latents for the oracle control; observations for raw_x).
      c: ``[N]`` integer domain labels.
      active: the ``K_a >= 2`` distinct active domain labels, baseline first.

    Returns:
      A :class:`Basis` in float64.

    Raises:
      ValueError: on mismatched shapes, fewer than two or repeated active domains, or an
        active domain without samples.
    """
    z_last = _as_f64(z_last, "z_last", ndim=2)
    c = np.asarray(c)
    if c.ndim != 1 or c.shape[0] != z_last.shape[0]:
        raise ValueError(f"c must have shape [N] = [{z_last.shape[0]}] to match z_last "
                         f"{z_last.shape}, got shape {c.shape}")
    active = [int(a) for a in active]
    if len(active) < 2 or len(set(active)) != len(active):
        raise ValueError(f"active must hold at least two distinct domain labels, got {active}")
    mus = []
    for a in active:
        mask = c == a
        if not mask.any():
            raise ValueError(f"active domain {a} has no samples in c (labels present: "
                             f"{sorted(np.unique(c).tolist())})")
        mus.append(z_last[mask].mean(axis=0))
    mus = np.stack(mus)  # [K_a, d]
    mu0 = mus[0]  # [d]
    b = (mus[1:] - mu0).T  # [d, K_a - 1]
    return Basis(mu0=mu0, b=b, mus=mus)


def sigma_min(basis: Basis) -> float:
    """Smallest singular value of ``B``: how well the centroids separate the domains.

    It is the column-rank sense: 0 when ``B`` has more columns than rows (``K_a - 1 > d``),
    since then ``B`` cannot have full column rank and alpha is not identified.

    Args:
      basis: a :class:`Basis`.

    Returns:
      ``sigma_min(B)`` as a Python float.
    """
    d, m = basis.b.shape
    if m > d:
        return 0.0
    return float(np.linalg.svd(basis.b, compute_uv=False).min())


def project_simplex(v) -> np.ndarray:
    """Exact Euclidean projection of each row of ``v`` onto the probability simplex.

    ``argmin_{w >= 0, sum w = 1} ||w - v||`` is ``w = max(v - theta, 0)`` with the threshold
    ``theta`` found from the sorted entries (Duchi et al. 2008): with ``u`` sorted in
    decreasing order, ``rho`` the largest j with ``u_j > (sum_{i<=j} u_i - 1) / j`` and
    ``theta = (sum_{i<=rho} u_i - 1) / rho``.

    Args:
      v: ``[..., K]`` points.

    Returns:
      ``[..., K]`` float64 projections.
    """
    v = _as_f64(v, "v")
    if v.ndim == 0 or v.shape[-1] == 0:
        raise ValueError(f"v must have a non-empty last axis [..., K], got shape {v.shape}")
    k = v.shape[-1]
    u = -np.sort(-v, axis=-1)  # [..., K], decreasing
    css = np.cumsum(u, axis=-1) - 1.0  # [..., K]
    j = np.arange(1, k + 1, dtype=np.float64)  # [K]
    # The condition holds on a prefix of j (j = 1 always), so rho is its count.
    rho = np.sum(u - css / j > 0, axis=-1, keepdims=True)  # [..., 1], >= 1
    theta = np.take_along_axis(css, rho - 1, axis=-1) / rho  # [..., 1]
    return np.maximum(v - theta, 0.0)


def _clip_renormalise(alpha: np.ndarray) -> np.ndarray:
    """The release's ``project_to_simplex``: clip at 0, divide by the row sum."""
    clipped = np.clip(alpha, 0.0, None)  # [T, K]
    total = clipped.sum(axis=-1, keepdims=True)  # [T, 1]
    k = alpha.shape[-1]
    degenerate = total < _CLIP_EPS
    return np.where(degenerate, 1.0 / k, clipped / np.where(degenerate, 1.0, total))


def solve_alpha(zbar, basis: Basis, projection: str = "clip") -> np.ndarray:
    """Step 2: least-squares mixing weights per time step, mapped onto the simplex.

    ``alpha_raw = B^+ (zbar_t - mu^(0))`` (the pseudo-inverse, as the release; the
    minimum-norm solution if ``B`` is rank deficient), ``alpha = [1 - sum alpha_raw,
    alpha_raw]``. Before projection the fit is the orthogonal projection of ``zbar_t`` onto
    the affine hull of the centroids written in barycentric coordinates, so it does not
    depend on which active domain is the baseline.

    Args:
      zbar: ``[T, d]`` ensemble-mean latent of the last step at each time step.
      basis: the :class:`Basis` of step 1.
      projection: ``"clip"`` (released default: clip at 0 and renormalise; the release falls
        back to uniform weights when the clipped row sums below 1e-10, which a finite row
        never does since its positive parts sum to at least 1), ``"euclid"`` (Euclidean
        projection onto the simplex, :func:`project_simplex`) or ``"none"`` (the raw affine
        coordinates: rows sum to 1, entries may be negative).

    Returns:
      ``[T, K_a]`` float64 weights in active order.

    Raises:
      ValueError: for an unknown ``projection`` or a ``zbar`` of the wrong shape.
    """
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")
    zbar = _check_zbar(zbar, basis)
    b_pinv = np.linalg.pinv(basis.b)  # [K_a - 1, d]
    alpha_raw = (zbar - basis.mu0) @ b_pinv.T  # [T, K_a - 1]
    alpha = np.concatenate([1.0 - alpha_raw.sum(axis=1, keepdims=True), alpha_raw], axis=1)
    if projection == "clip":
        return _clip_renormalise(alpha)
    if projection == "euclid":
        return project_simplex(alpha)
    return alpha


def smooth(alpha, window: int = 5) -> np.ndarray:
    """Step 3: centred moving average over time, truncated at the ends.

    ``alpha_smooth[t] = mean(alpha[max(0, t - w) : min(T, t + w + 1)])``: ``2 w + 1`` taps in
    the interior and only the taps that exist near the ends (the release's
    ``temporal_smoothing``; no padding, no reflection). Rows on the simplex stay on it.

    Args:
      alpha: ``[T, ...]`` trajectory, time on the leading axis (usually ``[T, K]``).
      window: half-width ``w >= 0``; 0 returns a copy.

    Returns:
      The smoothed float64 trajectory, same shape.

    Raises:
      ValueError: for a negative or non-integer ``window``.
    """
    if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 0:
        raise ValueError(f"window must be an integer >= 0, got {window!r}")
    alpha = _as_f64(alpha, "alpha")
    if alpha.ndim == 0:
        raise ValueError(f"alpha must have a time axis [T, ...], got shape {alpha.shape}")
    t_len = alpha.shape[0]
    window = int(window)
    total = np.zeros_like(alpha)
    count = np.zeros((t_len,) + (1,) * (alpha.ndim - 1))
    # A sum of shifted copies (2w + 1 of them) is exact for constants, unlike prefix sums.
    for s in range(-min(window, t_len - 1), min(window, t_len - 1) + 1):
        lo, hi = max(0, -s), min(t_len, t_len - s)  # t with t + s inside [0, T)
        total[lo:hi] += alpha[lo + s:hi + s]
        count[lo:hi] += 1.0
    return total / count


def lambda_of(c: float, T: int) -> float:
    """Theorem 4.3's penalty weight ``lam = c T^(1/3)``.

    Args:
      c: constant ``>= 0``.
      T: trajectory length ``>= 1``.

    Returns:
      ``c * T ** (1/3)``.
    """
    if not c >= 0:
        raise ValueError(f"c must be >= 0, got {c!r}")
    if T < 1:
        raise ValueError(f"T must be >= 1, got {T!r}")
    return float(c) * float(T) ** (1.0 / 3.0)


def penalized_objective(alpha, zbar, basis: Basis, lam: float) -> float:
    """Theorem 4.3's objective ``sum_t ||zbar_t - mu0 - B~ alpha_t||^2 + lam sum_t
    ||alpha_{t+1} - alpha_t||^2`` with ``B~ = [0, B]`` (so ``B~ alpha = sum_k alpha_k mu^(k) -
    mu^(0)`` on the simplex).

    Args:
      alpha: ``[T, K_a]`` trajectory.
      zbar: ``[T, d]`` ensemble-mean latents.
      basis: the :class:`Basis`.
      lam: penalty weight.

    Returns:
      The objective value.
    """
    alpha = _as_f64(alpha, "alpha", ndim=2)
    zbar = _check_zbar(zbar, basis)
    if alpha.shape != (zbar.shape[0], basis.mus.shape[0]):
        raise ValueError(f"alpha must have shape [T, K_a] = {(zbar.shape[0], basis.mus.shape[0])}, "
                         f"got {alpha.shape}")
    resid = zbar - basis.mu0 - alpha[:, 1:] @ basis.b.T  # [T, d]; B~ alpha = B alpha[1:]
    return float(np.sum(resid**2) + lam * np.sum(np.diff(alpha, axis=0) ** 2))


def penalized_ls(zbar, basis: Basis, lam: float, steps: int = 500, *,
                 accelerated: bool = True) -> np.ndarray:
    """Step 4: Theorem 4.3's estimator by projected gradient on the product of simplices.

    Minimises :func:`penalized_objective` over ``alpha_t`` in the simplex for every t. The
    gradient is ``2 (alpha G - h) + 2 lam (D^T D alpha)`` with ``G = B~^T B~``, ``h_t = B~^T
    (zbar_t - mu0)`` and ``D`` the first difference in time. The Hessian is the Kronecker sum
    ``2 (I_T (x) G + lam L_T (x) I_K)`` (``L_T`` the path-graph Laplacian), so its Lipschitz
    constant is exactly ``L = 2 (lambda_max(G) + lam (2 - 2 cos(pi (T - 1) / T)))``, and every
    step is ``x <- P_simplex(y - grad(y) / L)``, starting at the per-t clip solution.

    ``accelerated=True`` (default) takes the step at a Nesterov extrapolation ``y`` (FISTA)
    with gradient-based adaptive restart; ``False`` is plain projected gradient (``y = x``).
    Plain steps contract the slowest mode by ``1 - mu / L`` per step, and here ``mu / L``
    is tiny both for smooth paths under a large ``lam`` (``~ pi^2 / (4 T^2)``, 1e-3 at
    T = 50) and for nearly singular bases (``sigma_min(B)^2 / L``), so 500 plain steps stop
    far from the minimiser; the accelerated rate depends on the square root of that ratio.

    Args:
      zbar: ``[T, d]`` ensemble-mean latents.
      basis: the :class:`Basis`.
      lam: penalty weight ``>= 0`` (see :func:`lambda_of`).
      steps: number of projected-gradient steps ``>= 0``.
      accelerated: FISTA with restart (default) or plain projected gradient.

    Returns:
      ``[T, K_a]`` float64 trajectory, every row on the simplex.

    Raises:
      ValueError: for a negative or non-finite ``lam``, negative ``steps`` or a bad ``zbar``.
    """
    if not (np.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam must be finite and >= 0, got {lam!r}")
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    zbar = _check_zbar(zbar, basis)
    t_len = zbar.shape[0]
    d = basis.mu0.shape[0]
    b_tilde = np.concatenate([np.zeros((d, 1)), basis.b], axis=1)  # [d, K_a]
    gram = b_tilde.T @ b_tilde  # [K_a, K_a]
    h = (zbar - basis.mu0) @ b_tilde  # [T, K_a]
    lap_max = 2.0 - 2.0 * np.cos(np.pi * (t_len - 1) / t_len)  # 0 at T = 1
    lipschitz = 2.0 * (np.linalg.eigvalsh(gram)[-1] + lam * lap_max)

    x = solve_alpha(zbar, basis, projection="clip")  # [T, K_a]
    if lipschitz <= 0.0:  # B = 0 and no coupling: the objective is constant
        return x

    def grad(a):  # [T, K_a] -> [T, K_a]
        g = 2.0 * (a @ gram - h)
        diff = np.diff(a, axis=0)  # [T - 1, K_a]
        g[:-1] -= 2.0 * lam * diff
        g[1:] += 2.0 * lam * diff
        return g

    y, t_mom = x, 1.0
    for _ in range(steps):
        x_new = project_simplex(y - grad(y) / lipschitz)
        if not accelerated:
            y = x = x_new
            continue
        if np.vdot(y - x_new, x_new - x) > 0:  # momentum points uphill: restart it
            y, t_mom = x_new, 1.0
        else:
            t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t_mom**2))
            y = x_new + ((t_mom - 1.0) / t_next) * (x_new - x)
            t_mom = t_next
        x = x_new
    return x
