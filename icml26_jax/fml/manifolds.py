"""FML [R]: compressed class manifolds, Manifold Mutual Learning (MML) and the local losses.

Every equation here is reconstructed from the abstract (spec §Method "FML [R]"); step names
follow the spec:

- *Compression* (client -> server): per class, k-means on the l2-normalised features ĥ with
  K_m anchors (k-means++ seeding, Lloyd with cosine assignment, unit-norm centroids) gives
  ``Manifold(anchors [C, K_m, p], mass [C, K_m])``; masses are cluster fractions, 0 for an
  absent class and for the duplicate anchors of a class with fewer than K_m distinct samples.
- *MML* (server): cross-client attention, per class, from each client's anchors (queries) to
  every *other* client's anchors (keys = values), logits ``<Â_q, Â_k> / tau_a + log pi_k``.
- *Re-compression*: weighted k-means of the union of fused anchors (weights pi / N_c) into the
  global target ``GlobalManifold(anchors [C, K_g, p], mass [C, K_g])``.
- *Local losses*: ``approx_loss`` (L_app, soft nearest-anchor pull onto the own-class
  manifold) and ``sep_loss`` (L_sep, own-class anchors against all anchors).

All functions are pure, float32-friendly (the dtype of the features is kept), free of Python
loops over clients and classes (``vmap`` / ``einsum``), and not jitted internally: integer
sizes (``k``, ``k_m``, ``k_g``, ``n_classes``, ``iters``) and ``method`` are static.
Masked entries use a large finite negative logit instead of -inf, so no ``inf - inf`` (and no
NaN gradient) arises even when a whole class is masked out.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

# Stands in for -inf in masked log-sum-exps: exp(_NEG - finite) == 0 in float32 and float64,
# and a fully masked row gives a finite value that ``where`` then discards.
_NEG = -1e30
# Two unit vectors closer than this (squared chord, 2 - 2 cos) count as the same point when
# k-means++ decides whether any new distinct seed is left (the cap K <= #distinct points).
_SAME_POINT_D2 = 1e-6

COMPRESSIONS = ("kmeans", "pca")
PCA_ANCHORS = 5  # {mu, mu +- sqrt(lambda_j) u_j, j = 1, 2}


class Manifold(NamedTuple):
    """A client's compressed class manifolds (spec §Method "Compression").

    Attributes:
      anchors: [C, K_m, p] unit-norm anchors (arbitrary finite vectors where mass is 0).
      mass: [C, K_m] cluster fractions; sum to 1 over a present class, all 0 for an absent one.
    """

    anchors: jax.Array
    mass: jax.Array


class GlobalManifold(NamedTuple):
    """The server's global target G (spec §Method "MML"): ``anchors [C, K_g, p]``,
    ``mass [C, K_g]`` (sums to 1 over a class held by some client, 0 otherwise)."""

    anchors: jax.Array
    mass: jax.Array


def _check_positive(name: str, value) -> None:
    # Traced values (a swept hyper-parameter under jit) cannot be checked; Python numbers can.
    if isinstance(value, (int, float)) and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def _check_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def normalise(h: jax.Array, eps: float = 1e-8) -> jax.Array:
    """ĥ = h / max(||h||, eps) along the last axis (a zero vector stays zero, no NaN).

    Args:
      h: [..., p] vectors.
      eps: floor of the norm.

    Returns:
      [..., p] unit vectors (zero where ``h`` is zero).
    """
    sq = jnp.sum(h * h, axis=-1, keepdims=True)
    return h * lax.rsqrt(jnp.maximum(sq, eps * eps))


def _masked_lse(x: jax.Array, ok: jax.Array, axis) -> tuple[jax.Array, jax.Array]:
    """``(log sum_{ok} exp(x), any(ok))`` over ``axis``; 0 (and zero gradient) where no entry
    is ``ok``."""
    lse = jax.nn.logsumexp(jnp.where(ok, x, _NEG), axis=axis)
    any_ok = jnp.any(ok, axis=axis)
    return jnp.where(any_ok, lse, 0.0), any_ok


def _weighted_mean(per: jax.Array, w: jax.Array | None) -> jax.Array:
    """``mean(per)``, or ``sum(w per) / sum(w)`` (0 when all weights are 0)."""
    if w is None:
        return jnp.mean(per)
    w = w.astype(per.dtype)
    return jnp.sum(w * per) / jnp.maximum(jnp.sum(w), jnp.finfo(per.dtype).tiny)


def _log_or(mass: jax.Array, ok: jax.Array) -> jax.Array:
    """log(mass) where ``ok`` (0 elsewhere; masked later), without log(0) in the graph."""
    return jnp.log(jnp.where(ok, mass, 1.0))


def _logits(p: jax.Array) -> jax.Array:
    """Sampling logits ∝ p >= 0 (-inf where p = 0: never drawn by ``categorical``)."""
    return jnp.where(p > 0, _log_or(p, p > 0), -jnp.inf)


def kmeans(x: jax.Array, w: jax.Array, k: int, key: jax.Array, iters: int = 10
           ) -> tuple[jax.Array, jax.Array]:
    """Weighted spherical k-means (spec §Method "Compression", k-means++ then Lloyd).

    1. ``x̂ = normalise(x)``; only points with ``w > 0`` take part.
    2. k-means++ seeding from ``key``: the first seed is drawn ∝ w, seed t ∝ w · D², D² the
       squared chord ``2 - 2 cos`` to the nearest seed so far. When no point with positive
       weight is left at D² > 0 (fewer than ``k`` distinct weighted points: the cap
       ``K <= n``), the seed duplicates a weighted point and is marked inactive.
    3. ``iters`` Lloyd iterations: cosine assignment (argmax ⟨x̂, c⟩ over active centres),
       centres = normalised weighted means; a cluster that is empty keeps its previous centre.
    4. mass = weight of each cluster of the last assignment / total weight (the centres are
       the normalised means of exactly these clusters).

    Args:
      x: [n, p] points (any norm; a zero row is allowed).
      w: [n] non-negative weights or a 0/1 (bool) mask.
      k: number of centres (static, >= 1).
      key: typed PRNG key (``jax.random.key``) for the seeding.
      iters: Lloyd iterations (static, >= 1).

    Returns:
      ``(centres [k, p], mass [k])``: unit-norm centres; masses sum to 1 when any weight is
      positive (all 0 otherwise), 0 for inactive (capped) and empty centres. Never NaN.
    """
    _check_int("k", k, 1)
    _check_int("iters", iters, 1)
    n, p = x.shape
    dtype = x.dtype
    xh = normalise(x)  # [n, p]
    w = jnp.maximum(w.astype(dtype), 0.0)  # [n]
    keys = jax.random.split(key, k)
    w_logits = _logits(w)  # [n]

    def chord(c):  # [p] -> [n] squared distance on the sphere
        return jnp.maximum(2.0 - 2.0 * (xh @ c), 0.0)

    i0 = jax.random.categorical(keys[0], w_logits)
    centres = jnp.zeros((k, p), dtype).at[0].set(xh[i0])  # [k, p]
    active = jnp.zeros((k,), bool).at[0].set(jnp.any(w > 0))  # [k]

    def seed(t, carry):
        centres, active, d2 = carry
        pd = jnp.where(d2 > _SAME_POINT_D2, w * d2, 0.0)  # [n]
        more = jnp.any(pd > 0)
        i = jax.random.categorical(keys[t], jnp.where(more, _logits(pd), w_logits))
        c = xh[i]
        return (centres.at[t].set(c), active.at[t].set(more), jnp.minimum(d2, chord(c)))

    centres, active, _ = lax.fori_loop(1, k, seed, (centres, active, chord(xh[i0])))

    def lloyd(_, carry):
        centres, _ = carry
        sim = jnp.where(active[None, :], xh @ centres.T, -jnp.inf)  # [n, k]
        r = jax.nn.one_hot(jnp.argmax(sim, axis=-1), k, dtype=dtype) * w[:, None]  # [n, k]
        cnt = r.sum(0)  # [k]
        sums = r.T @ xh  # [k, p]
        norm = jnp.sqrt(jnp.sum(sums * sums, axis=-1, keepdims=True))  # [k, 1]
        keep = (cnt[:, None] > 0) & (norm > 1e-12)
        new = jnp.where(keep, sums / jnp.where(keep, norm, 1.0), centres)
        return new, cnt

    centres, cnt = lax.fori_loop(0, iters, lloyd, (centres, jnp.zeros((k,), dtype)))
    mass = cnt / jnp.maximum(jnp.sum(w), jnp.finfo(dtype).tiny)
    return centres, mass


def _pca_anchors(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``{mu, mu ± sqrt(lambda_j) u_j}_{j=1,2}`` of the weighted points, normalised, equal mass.

    Args:
      x: [n, p] points (already normalised by the caller); w: [n] weights.

    Returns:
      ``(anchors [5, p], mass [5])``; mass 1/5 each when any weight is positive, else 0.
    """
    tot = jnp.sum(w)
    wn = w / jnp.maximum(tot, jnp.finfo(x.dtype).tiny)  # [n]
    mu = wn @ x  # [p]
    xc = x - mu  # [n, p]
    cov = (xc * wn[:, None]).T @ xc  # [p, p]
    lam, u = jnp.linalg.eigh(cov)  # ascending
    d = jnp.sqrt(jnp.maximum(lam[-2:], 0.0))[:, None] * u[:, -2:].T  # [2, p]
    anchors = jnp.stack([mu, mu + d[1], mu - d[1], mu + d[0], mu - d[0]])  # top direction first
    mass = jnp.where(tot > 0, 1.0 / PCA_ANCHORS, 0.0) * jnp.ones((PCA_ANCHORS,), x.dtype)
    return normalise(anchors), mass


def compress(h: jax.Array, y: jax.Array, mask: jax.Array, k_m: int, key: jax.Array,
             n_classes: int = 10, method: str = "kmeans", iters: int = 10) -> Manifold:
    """A client's class manifolds (spec §Method "Compression"; ``vmap`` over classes).

    ``method='kmeans'``: per class c, ``kmeans(ĥ, mask & (y == c), k_m)`` with its own key
    ``split(key, C)[c]``. ``method='pca'``: the anchors ``{mu, mu ± sqrt(lambda_j) u_j}`` of
    the top-2 principal directions of the class's ĥ (5 anchors, equal mass 1/5, normalised;
    ``k_m`` must be 5; a class with fewer than 3 samples gives coincident anchors, which is
    harmless in the losses). Absent classes get mass 0 in both modes.

    Args:
      h: [n, p] features (raw; normalised here).
      y: [n] int labels in ``[0, n_classes)``.
      mask: [n] bool (or 0/1), False for padding.
      k_m: anchors per class (static, >= 1; 5 for ``pca``).
      key: typed PRNG key (k-means++ seeding).
      n_classes: C (static).
      method: ``'kmeans'`` or ``'pca'`` (static).
      iters: Lloyd iterations (static).

    Returns:
      ``Manifold(anchors [C, k_m, p], mass [C, k_m])``.
    """
    if method not in COMPRESSIONS:
        raise ValueError(f"method must be one of {COMPRESSIONS}, got {method!r}")
    _check_int("k_m", k_m, 1)
    _check_int("n_classes", n_classes, 1)
    if method == "pca" and k_m != PCA_ANCHORS:
        raise ValueError(f"k_m must be {PCA_ANCHORS} with method='pca' (mu, mu ± sqrt(lambda_j) "
                         f"u_j, j = 1, 2), got {k_m}")
    classes = jnp.arange(n_classes, dtype=y.dtype)  # [C]
    wc = ((y[None, :] == classes[:, None]) & mask.astype(bool)[None, :]).astype(h.dtype)  # [C, n]
    if method == "pca":
        anchors, mass = jax.vmap(_pca_anchors, in_axes=(None, 0))(normalise(h), wc)
    else:
        keys = jax.random.split(key, n_classes)
        anchors, mass = jax.vmap(lambda wi, ki: kmeans(h, wi, k_m, ki, iters))(wc, keys)
    return Manifold(anchors, mass)


def mml(anchors: jax.Array, mass: jax.Array, beta_m=0.5, tau_a=0.1, iters: int = 1
        ) -> jax.Array:
    """Manifold Mutual Learning (spec §Method "MML"): parameter-free cross-client attention.

    For client i, class c and anchor k (queries Â_{i,c,k}; keys = values = the anchors of the
    other clients holding c):

        ℓ_{k,(j,l)} = ⟨Â_{i,c,k}, Â_{j,c,l}⟩ / tau_a + log pi_{j,c,l}
                      (-inf if j = i or pi_{j,c,l} = 0)
        Ã_{i,c,k} = normalise((1 - beta_m) Â_{i,c,k}
                              + beta_m Σ_{j,l} softmax_{(j,l)}(ℓ_{k,·}) Â_{j,c,l})

    Anchors are used as directions (Â = normalise(A); the inputs from ``compress`` are unit
    already). An anchor stays exactly unchanged when it has mass 0 (it carries nothing) or when
    no other client holds the class (nothing to attend to). ``iters = 2`` repeats the step on
    the fused anchors with the same masses.

    Args:
      anchors: [N, C, K, p] client anchors.
      mass: [N, C, K] their masses (0 = absent/capped).
      beta_m: mixing weight in [0, 1]; 0 is the identity (on unit anchors).
      tau_a: attention temperature (> 0).
      iters: MML steps (static, >= 1).

    Returns:
      [N, C, K, p] fused anchors.
    """
    _check_positive("tau_a", tau_a)
    _check_int("iters", iters, 1)
    if isinstance(beta_m, (int, float)) and not 0.0 <= beta_m <= 1.0:
        raise ValueError(f"beta_m must be in [0, 1], got {beta_m!r}")
    N, C, K, p = anchors.shape
    dtype = anchors.dtype
    held = mass > 0  # [N, C, K]
    others = ~jnp.eye(N, dtype=bool)  # [N_i, N_j]
    # key (j, l) is visible to query client i for class c: [N_i, C, N_j * K]
    valid = (others[:, None, :, None] & jnp.transpose(held, (1, 0, 2))[None]).reshape(N, C, N * K)
    moves = jnp.any(valid, axis=-1)[:, :, None] & held  # [N, C, K]
    log_pi = jnp.transpose(_log_or(mass, held), (1, 0, 2)).reshape(C, N * K)  # [C, N*K]
    beta = jnp.asarray(beta_m, dtype)

    def step(_, a):
        ah = normalise(a)  # [N, C, K, p]
        kv = jnp.transpose(ah, (1, 0, 2, 3)).reshape(C, N * K, p)  # [C, N*K, p]
        logits = jnp.einsum("ickp,cmp->ickm", ah, kv) / tau_a + log_pi[None, :, None, :]
        logits = jnp.where(valid[:, :, None, :], logits, _NEG)  # [N, C, K, N*K]
        att = jax.nn.softmax(logits, axis=-1) * valid[:, :, None, :].astype(dtype)
        fused = jnp.einsum("ickm,cmp->ickp", att, kv)  # [N, C, K, p]
        new = normalise((1.0 - beta) * ah + beta * fused)
        return jnp.where(moves[..., None], new, a)

    return lax.fori_loop(0, iters, step, anchors)


def union(anchors: jax.Array, mass: jax.Array) -> GlobalManifold:
    """The global target without re-compression (``recompress=False``).

    Args:
      anchors: [N, C, K, p] fused anchors; mass: [N, C, K].

    Returns:
      ``GlobalManifold(anchors [C, N*K, p], mass [C, N*K])`` with masses pi / N_c (N_c = the
      number of clients holding c), so a held class's masses sum to 1. Order: client-major.
    """
    N, C, K, p = anchors.shape
    n_c = jnp.sum(jnp.any(mass > 0, axis=-1), axis=0).astype(mass.dtype)  # [C]
    w = mass / jnp.maximum(n_c, 1.0)[None, :, None]  # [N, C, K]
    return GlobalManifold(jnp.transpose(anchors, (1, 0, 2, 3)).reshape(C, N * K, p),
                          jnp.transpose(w, (1, 0, 2)).reshape(C, N * K))


def recompress(anchors: jax.Array, mass: jax.Array, k_g: int, key: jax.Array,
               iters: int = 10) -> GlobalManifold:
    """Re-compression of the fused anchors into the global target G (spec §Method "MML").

    Per class c, weighted k-means (``kmeans``, key ``split(key, C)[c]``) of the union of the
    N·K fused anchors with weights pi / N_c into ``k_g`` anchors; masses are the clusters'
    weight (sums to 1 for a held class, all 0 for a class no client holds). With fewer than
    ``k_g`` distinct weighted anchors the extra anchors get mass 0.

    Args:
      anchors: [N, C, K, p] fused anchors (``mml`` output).
      mass: [N, C, K] the clients' masses.
      k_g: global anchors per class (static, >= 1).
      key: typed PRNG key.
      iters: Lloyd iterations (static).

    Returns:
      ``GlobalManifold(anchors [C, k_g, p], mass [C, k_g])``.
    """
    _check_int("k_g", k_g, 1)
    u = union(anchors, mass)
    keys = jax.random.split(key, u.anchors.shape[0])
    g_anchors, g_mass = jax.vmap(lambda a, m, k: kmeans(a, m, k_g, k, iters))(
        u.anchors, u.mass, keys)
    return GlobalManifold(g_anchors, g_mass)


def approx_loss(h: jax.Array, y: jax.Array, g: GlobalManifold, tau=0.1,
                w: jax.Array | None = None) -> jax.Array:
    """Manifold approximation loss L_app (spec §Method "Local objective").

        L_app(h, y) = -tau · log Σ_{g ∈ G_y, pi_g > 0} pi_g exp(⟨ĥ, g⟩ / tau)

    a soft nearest-anchor pull of ĥ onto its own class's global manifold. A sample whose
    class has no anchor with mass contributes 0 (but still counts in the mean's denominator).

    Args:
      h: [B, p] raw features; y: [B] int labels.
      g: the global target (anchors [C, K_g, p], mass [C, K_g]).
      tau: temperature (> 0).
      w: optional [B] sample weights / mask (padding); the mean is ``Σ w ℓ / Σ w``.

    Returns:
      Scalar loss.
    """
    _check_positive("tau", tau)
    hh = normalise(h)  # [B, p]
    a = g.anchors.astype(h.dtype)[y]  # [B, K, p]
    m = g.mass.astype(h.dtype)[y]  # [B, K]
    ok = m > 0
    s = jnp.einsum("bp,bkp->bk", hh, a)
    lse, _ = _masked_lse(s / tau + _log_or(m, ok), ok, axis=-1)  # [B]
    return _weighted_mean(-tau * lse, w)


def sep_loss(h: jax.Array, y: jax.Array, g: GlobalManifold, T=0.07,
             w: jax.Array | None = None) -> jax.Array:
    """Separation loss L_sep (spec §Method "Local objective"), over anchors with mass > 0:

        L_sep(h, y) = -log [Σ_{g ∈ G_y} exp(s_g / T) / Σ_{c'} Σ_{g ∈ G_{c'}} exp(s_g / T)],
        s_g = ⟨ĥ, g⟩.

    A sample whose class has no anchor with mass contributes 0 (still counted in the mean).

    Args:
      h: [B, p] raw features; y: [B] int labels.
      g: the global target (anchors [C, K_g, p], mass [C, K_g]).
      T: temperature (> 0).
      w: optional [B] sample weights / mask; the mean is ``Σ w ℓ / Σ w``.

    Returns:
      Scalar loss.
    """
    _check_positive("T", T)
    C = g.anchors.shape[0]
    hh = normalise(h)  # [B, p]
    s = jnp.einsum("bp,ckp->bck", hh, g.anchors.astype(h.dtype)) / T  # [B, C, K]
    ok = (g.mass > 0)[None]  # [1, C, K]
    own = (y[:, None] == jnp.arange(C, dtype=y.dtype)[None, :])[:, :, None]  # [B, C, 1]
    lse_all, _ = _masked_lse(s, ok, axis=(1, 2))  # [B]
    lse_pos, has = _masked_lse(s, ok & own, axis=(1, 2))  # [B]
    return _weighted_mean(jnp.where(has, lse_all - lse_pos, 0.0), w)
