"""The optimisation problems of the DSGD-HP experiments and their stochastic gradients.

- ``Quadratic``: ``f_i(x) = 1/2 (x - b_i)^T H (x - b_i)``, strongly convex, unbounded gradients,
  exact ``x*`` and ``f*``; additive noise that is sub-Gaussian (``gauss``) or heavy-tailed
  (``heavy``, the negative control for assumption A4).
- ``Digits``: logistic regression on scikit-learn's bundled digits (label ``digit >= 5``),
  non-convex (``reg="nonconvex"``) or ``l2``-regularised (strongly convex); the gradient noise
  is that of a single-sample minibatch drawn uniformly from the user's shard.

Noise and samples are pure functions of per-(run, step, user) keys, so results do not depend
on how users are laid out on devices or processes. Gradient helpers take an ``xp`` module
(``jax.numpy`` inside kernels, ``numpy`` for the float64 reference).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

NOISES = ("gauss", "heavy")
REGS = ("nonconvex", "l2")
SPLITS = ("iid", "label_skew")
# Symmetric Lomax(alpha=2.5) from uniforms: E[(U^{-1/a} - 1)^2] = 2 / ((a - 1)(a - 2)).
_HEAVY_ALPHA = 2.5
_HEAVY_SCALE = float(np.sqrt(2.0 / ((_HEAVY_ALPHA - 1.0) * (_HEAVY_ALPHA - 2.0))))
_RHO = 0.01  # weight of the non-convex regulariser rho * sum x^2 / (1 + x^2)


class Quadratic(NamedTuple):
    """``f_i(x) = 1/2 (x - b_i)^T diag(h) (x - b_i)``; ``sum_i (b_i - x*) = 0``.

    Attributes: h [d]; b [n, d]; x_star [d]; mu, L the extreme curvatures; hetero_A the
    heterogeneity bound ``A = max_i ||H (b_i - x*)||`` (assumption A5).
    """

    h: np.ndarray
    b: np.ndarray
    x_star: np.ndarray
    mu: float
    L: float
    hetero_A: float

    @property
    def n(self) -> int:
        return self.b.shape[0]

    @property
    def dim(self) -> int:
        return self.h.shape[0]


class Digits(NamedTuple):
    """Logistic regression on digits, split over users.

    Attributes: A [N, 65] features ``[pixels / 16, 1]`` of the kept samples; y [N] float labels
    in {0, 1}; shards [n, m] row indices into A of each user's samples; L the smoothness
    constant; reg ``"nonconvex"`` or ``"l2"``; mu the l2 weight (0 for nonconvex); x_star [65]
    and f_star (Newton's method, ``l2`` only; zeros / 0 for ``nonconvex``, where ``gap`` is
    then the loss itself).
    """

    A: np.ndarray
    y: np.ndarray
    shards: np.ndarray
    L: float
    reg: str
    mu: float
    x_star: np.ndarray
    f_star: float

    @property
    def n(self) -> int:
        return self.shards.shape[0]

    @property
    def dim(self) -> int:
        return self.A.shape[1]


Problem = Quadratic | Digits


def quadratic(n: int, d: int = 10, mu: float = 1.0, L: float = 10.0, hetero: float = 0.0,
              seed: int = 0) -> Quadratic:
    """The quadratic problem of the spec (Data, offline substitute 1).

    ``h = exp(uniform(log mu, log L, d))`` with ``h[0] = mu``, ``h[-1] = L``; ``x* = 1``;
    ``b_i = x* + hetero * xi_i`` with ``xi`` standard normal, centred over users.
    """
    if n < 1 or d < 2:
        raise ValueError(f"quadratic needs n >= 1 and d >= 2, got n={n}, d={d}")
    if not 0 < mu <= L:
        raise ValueError(f"quadratic needs 0 < mu <= L, got mu={mu}, L={L}")
    if hetero < 0:
        raise ValueError(f"hetero must be >= 0, got {hetero}")
    rng = np.random.default_rng(seed)
    h = np.exp(rng.uniform(np.log(mu), np.log(L), d))
    h[0], h[-1] = mu, L
    xi = np.random.default_rng(seed + 1).standard_normal((n, d))
    xi -= xi.mean(0)
    x_star = np.ones(d)
    b = x_star + hetero * xi
    A = float(hetero * np.linalg.norm(h * xi, axis=1).max())
    return Quadratic(h, b, x_star, float(mu), float(L), A)


def _logistic_parts(A, y, x, xp):
    """Mean logistic loss and its gradient, float64 NumPy or JAX."""
    s = A @ x
    loss = xp.mean(xp.logaddexp(0.0, s) - y * s)
    grad = A.T @ (1.0 / (1.0 + xp.exp(-s)) - y) / A.shape[0]
    return loss, grad


def digits(n: int, split: str = "iid", reg: str = "nonconvex", seed: int = 0, *,
           mu: float = 0.1) -> Digits:
    """The digits problem of the spec (Data, offline substitute 2), from scikit-learn's copy.

    Args:
      n: number of users; each gets ``floor(N / n)`` samples (remainder dropped).
      split: ``iid`` (random permutation by ``seed``) or ``label_skew`` (sorted by label).
      reg: ``nonconvex`` (``rho sum x^2 / (1 + x^2)``, rho = 0.01) or ``l2`` (``mu/2 ||x||^2``).
      seed: data split seed.
      mu: l2 weight for ``reg="l2"``.
    """
    from sklearn.datasets import load_digits

    raw = load_digits()
    return split_problem(raw.data / 16.0, raw.target >= 5, n, split, reg, seed, mu=mu)


def split_problem(features, labels, n: int, split: str = "iid", reg: str = "nonconvex",
                  seed: int = 0, *, mu: float = 0.1) -> Digits:
    """Logistic problem on any ``features [N, D]`` and ``labels [N]`` (bool or {0, 1}),
    partitioned over ``n`` users by ``datasets.digits_users.partition``."""
    from icml26_jax.datasets.digits_users.partition import partition

    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    labels = np.asarray(labels)
    return logistic_problem(features, labels, partition(labels, n, split, seed), reg, mu=mu)


def logistic_problem(features, labels, shards, reg: str = "nonconvex", *,
                     mu: float = 0.1) -> Digits:
    """Logistic problem on ``features [N, D]`` (a bias feature 1 is appended), ``labels [N]``
    in {0, 1}, and users' ``shards [n, m]`` of row indices. ``f``, ``x*`` and ``f*`` are defined
    on the samples the shards keep; ``L`` on all N samples (one step size for every n)."""
    if reg not in REGS:
        raise ValueError(f"unknown reg {reg!r}; allowed: {', '.join(REGS)}")
    features = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels).astype(np.float64)
    shards = np.asarray(shards)
    if features.ndim != 2 or labels.shape != features.shape[:1]:
        raise ValueError(f"features must be [N, D] and labels [N], got {features.shape}, "
                         f"{labels.shape}")
    if not np.isin(labels, (0.0, 1.0)).all():
        raise ValueError("labels must be boolean or in {0, 1}")
    if shards.ndim != 2 or len(np.unique(shards)) != shards.size or shards.max() >= len(labels):
        raise ValueError(f"shards must be [n, m] distinct row indices < {len(labels)}")
    kept = np.sort(shards.ravel())
    remap = np.full(len(labels), -1)
    remap[kept] = np.arange(len(kept))
    A = np.concatenate([features[kept], np.ones((len(kept), 1))], axis=1)
    reg_L = 2 * _RHO if reg == "nonconvex" else mu
    L = 0.25 * float((features**2).sum(1).max() + 1.0) + reg_L
    prob = Digits(A, labels[kept], remap[shards], L, reg, mu if reg == "l2" else 0.0,
                  np.zeros(A.shape[1]), 0.0)
    if reg == "l2":
        x_star = _newton(prob)
        prob = prob._replace(x_star=x_star, f_star=float(loss(prob, x_star, xp=np)))
    return prob


def _newton(prob: Digits, iters: int = 50) -> np.ndarray:
    """Minimiser of the l2-regularised logistic loss in float64 (``||grad|| < 1e-12``)."""
    x = np.zeros(prob.dim)
    for _ in range(iters):
        g = full_grad(prob, x, xp=np)
        if np.linalg.norm(g) < 1e-13:
            break
        p = 1.0 / (1.0 + np.exp(-(prob.A @ x)))
        H = (prob.A.T * (p * (1 - p))) @ prob.A / prob.A.shape[0] + prob.mu * np.eye(prob.dim)
        x = x - np.linalg.solve(H, g)
    return x


def _reg(prob: Digits, x, xp):
    """Regulariser value and gradient (elementwise over the last axis)."""
    if prob.reg == "l2":
        return 0.5 * prob.mu * xp.sum(x * x, -1), prob.mu * x
    q = 1.0 + x * x
    return _RHO * xp.sum(x * x / q, -1), _RHO * 2.0 * x / (q * q)


def loss(prob: Problem, x, *, xp=jnp):
    """``f(x)`` on the full (kept) data; x [..., d] -> [...]."""
    if isinstance(prob, Quadratic):
        dx = x - prob.x_star
        return 0.5 * xp.sum(prob.h * dx * dx, -1) + _quad_offset(prob)
    s = xp.einsum("nd,...d->...n", prob.A, x)
    data = xp.mean(xp.logaddexp(0.0, s) - prob.y * s, -1)
    return data + _reg(prob, x, xp)[0]


def _quad_offset(prob: Quadratic) -> float:
    # f* = mean_i 1/2 (x* - b_i)^T H (x* - b_i); f(x) - f* is the exact quadratic form.
    dx = prob.b - prob.x_star
    return float(0.5 * np.mean(np.sum(prob.h * dx * dx, -1)))


def gap(prob: Problem, x, *, xp=jnp):
    """Optimality gap ``f(x) - f*`` (for ``reg="nonconvex"``, ``f(x)`` itself); x [..., d]."""
    if isinstance(prob, Quadratic):
        dx = x - prob.x_star
        return 0.5 * xp.sum(prob.h * dx * dx, -1)
    return loss(prob, x, xp=xp) - prob.f_star


def full_grad(prob: Problem, x, *, xp=jnp):
    """``grad f(x)`` on the full (kept) data; x [..., d] -> [..., d]."""
    if isinstance(prob, Quadratic):
        return prob.h * (x - prob.x_star)
    s = xp.einsum("nd,...d->...n", prob.A, x)
    p = 1.0 / (1.0 + xp.exp(-s))
    return xp.einsum("...n,nd->...d", p - prob.y, prob.A) / prob.A.shape[0] + _reg(prob, x, xp)[1]


def random_words(key_t, rid, uid, n: int, words: int):
    """Counter-based random words of one step: a pure function of (key_t, run, user, word).

    Word pair ``p`` of run ``r`` and user ``i`` is ``key_data(fold_in(key_t, c))`` with the
    counter ``c = (r n + i) P + p`` (P pairs per user): one threefry call per two words,
    whatever the device layout, and the first R runs are the same for any total run count.

    Args:
      key_t: the step's typed key, ``fold_in(key, t)``.
      rid: [R] global run ids; uid: [nl] global user ids; n: total users.
      words: 32-bit words per (run, user).

    Returns:
      uint32 [R, nl, words].
    """
    pairs = -(-words // 2)
    ctr = ((rid[:, None, None] * n + uid[None, :, None]) * pairs + jnp.arange(pairs))
    keys = jax.vmap(jax.random.fold_in, (None, 0))(key_t, ctr.ravel().astype(jnp.uint32))
    w = jax.random.key_data(keys).reshape(rid.shape[0], uid.shape[0], 2 * pairs)
    return w[..., :words]


def _unit_open(bits):
    """uint32 -> float32 uniform on the open interval (0, 1): (top 23 bits + 1/2) / 2^23."""
    return ((bits >> 9).astype(jnp.float32) + 0.5) * 2.0**-23


def noise_from_words(kind: str, w, sigma: float):
    """Additive noise with per-coordinate variance ``sigma**2`` from random words.

    ``gauss`` (1 word per coordinate): ``sigma * sqrt(2) erfinv(2u - 1)``, u uniform on
    (0, 1) — sub-Gaussian, A4 holds. ``heavy`` (2 words per coordinate): a symmetric Lomax
    law with tail index 2.5, ``sigma * s * (U^{-1/2.5} - 1) / sqrt(2 / 0.75)``, U on (0, 1]
    resolved to 2^-46 near 0 from two words, s a random sign (finite variance, infinite 4th
    moment: A4 fails).

    Args:
      kind: ``gauss`` or ``heavy``.
      w: uint32 [..., d] (gauss) or [..., 2 d] (heavy).
    """
    if kind == "gauss":
        return (sigma * np.sqrt(2.0)) * lax.erf_inv(2.0 * _unit_open(w) - 1.0)
    if kind == "heavy":
        d = w.shape[-1] // 2
        hi, lo = w[..., :d], w[..., d:]
        # (0, 1] with 46 bits: float32 keeps the low word's resolution where U is tiny,
        # which is where the tail (and ~6% of the variance) lives.
        U = 1.0 - (hi >> 9).astype(jnp.float32) * 2.0**-23 - (
            (lo >> 9).astype(jnp.float32) * 2.0**-46)
        mag = U ** (-1.0 / _HEAVY_ALPHA) - 1.0
        sign = jnp.where((lo & 1) == 1, -1.0, 1.0)
        return (sigma / _HEAVY_SCALE) * sign * mag
    raise ValueError(f"unknown noise {kind!r}; allowed: {', '.join(NOISES)}")


def noise(kind: str, key, shape, sigma: float):
    """``noise_from_words`` drawn from one key, e.g. for tests and notebooks; shape [..., d]."""
    if kind not in NOISES:
        raise ValueError(f"unknown noise {kind!r}; allowed: {', '.join(NOISES)}")
    shape = tuple(shape)
    per = 1 if kind == "gauss" else 2
    return noise_from_words(kind, jax.random.bits(key, (*shape[:-1], per * shape[-1])), sigma)


def words_per_user(prob: Problem, kind: str) -> int:
    """Random 32-bit words one (run, user) consumes per step."""
    if isinstance(prob, Quadratic):
        return prob.dim * (1 if kind == "gauss" else 2)
    return 1


def draw(prob: Problem, key_t, rid, uid, kind: str = "gauss", sigma: float = 1.0):
    """The randomness of one step for runs ``rid`` [R] and users ``uid`` [nl].

    Quadratic: additive noise [R, nl, d]. Digits: the position of each user's sampled example
    in its shard, [R, nl] int32 (uniform; modulo bias < m / 2^32).
    """
    w = random_words(key_t, rid, uid, prob.n, words_per_user(prob, kind))
    if isinstance(prob, Quadratic):
        return noise_from_words(kind, w, sigma)
    m = prob.shards.shape[1]
    return (w[..., 0] % jnp.uint32(m)).astype(jnp.int32)


def stoch_grad(prob: Problem, x, uid, z, *, xp=jnp):
    """Stochastic gradient ``g_i = grad f_i(x_i) + noise`` given the drawn randomness ``z``.

    Args:
      x: [..., R, nl, d] iterates of users ``uid``.
      uid: [nl] global user ids.
      z: ``draw`` output for these runs and users: [R, nl, d] or [R, nl] sample positions.

    Returns:
      [..., R, nl, d].
    """
    if isinstance(prob, Quadratic):
        return prob.h * (x - prob.b[uid]) + z
    rows = xp.take_along_axis(prob.shards[uid][None], z[..., None], axis=-1)[..., 0]  # [R, nl]
    a = prob.A[rows]  # [R, nl, d]
    s = xp.sum(a * x, -1, keepdims=True)
    return (1.0 / (1.0 + xp.exp(-s)) - prob.y[rows][..., None]) * a + _reg(prob, x, xp)[1]


def local_grad(prob: Problem, x, uid, key_t, rid, kind: str = "gauss", sigma: float = 1.0):
    """``stoch_grad(prob, x, uid, draw(prob, key_t, rid, uid, kind, sigma))``."""
    return stoch_grad(prob, x, uid, draw(prob, key_t, rid, uid, kind, sigma))


def as_device(prob: Problem, dtype=jnp.float32) -> Problem:
    """The problem with its float arrays cast to ``dtype`` (ints and Python scalars kept)."""
    def cast(a):
        if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating):
            return jnp.asarray(a, dtype)
        if isinstance(a, np.ndarray):
            return jnp.asarray(a, jnp.int32)
        return a

    return type(prob)(*[cast(f) for f in prob])
