"""gp2Scale's compactly supported kernels (spec §Method "Kernels").

Three kernels, each written as pure functions of a parameter ``NamedTuple`` so that
``jax.grad`` / ``jax.vjp`` reach every hyperparameter:

1. ``"wendland"`` — anisotropic Wendland, fvGP's gp2Scale default:
   ``k(x, x') = sigma2 * phi_{l,3}(||(x - x') / ls||)`` (eq. K1). ``ls_i`` sets support and
   length scale at once. ``phi_{5,3} = phi_{3,3} = (1-d)_+^8 (32 d^3 + 25 d^2 + 8 d + 1)`` is
   C^6 and positive definite for D <= 3; for D > 3 the generalised ``phi_{l,3}`` with
   ``l = floor(D/2) + 4`` (eq. K1').
2. ``"bump"`` — non-stationary: ``k = f(x) f(x') + g(x) g(x') + sigma2 phi_{3,3}(||x-x'|| / r0)``
   with ``f, g`` sums of bump functions ``a exp(1 - 1 / (1 - ||x - x0||^2 / r^2))`` (eq. K2).
   The two rank-1 terms keep far-field covariance between distant points under one bump;
   the sparse operator stores only the Wendland part and the ``[N, 2]`` features
   ``G = [f(X), g(X)]`` (``sparse_cov.BumpOperator``: ``A = S + G G^T``).
3. ``"risser"`` — Risser product kernel (eq. K3):
   ``k = sigma(x) sigma(x') C_core(x, x') C_sparse(x, x')`` with a Paciorek non-stationary
   Matérn-5/2 core (log ls(x), log sigma(x) = constant + 4 Gaussian RBFs [R]) and
   ``C_sparse`` the unit-diagonal normalisation of ``sum_j g_j(x) g_j(x') +
   s0 phi_{3,3}(||x - x'|| / r0)``. PSD by the Schur product theorem.

Noise (``noise``, the diagonal V = noise * I) is never part of a kernel value here; the
assembly adds it to the diagonal. Distances use a double-``where`` square root so that
gradients at ``d = 0`` are finite (phi' vanishes there).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

KINDS = ("wendland", "bump", "risser")


class WendlandParams(NamedTuple):
    sigma2: jax.Array  # [] signal variance
    ls: jax.Array  # [D] support radii (= length scales)
    noise: jax.Array  # [] nugget tau^2 (V = noise * I)


class BumpParams(NamedTuple):
    """A sum of ``B`` bump functions ``a exp(beta - beta / (1 - ||x - c||^2 / r^2))``."""
    centers: jax.Array  # [B, D]
    radii: jax.Array  # [B]
    amps: jax.Array  # [B]
    beta: jax.Array  # [B]; 1 gives kernel 2's bump a exp(1 - 1 / (1 - q))


class BumpKernelParams(NamedTuple):
    f: BumpParams
    g: BumpParams
    sigma2: jax.Array  # [] Wendland variance
    r0: jax.Array  # [] Wendland (isotropic) support
    noise: jax.Array  # []


class RisserParams(NamedTuple):
    log_sigma0: jax.Array  # [] log sigma(x) = log_sigma0 + sum_k sigma_w[k] rbf_k(x)
    sigma_w: jax.Array  # [K]
    log_ls0: jax.Array  # [] log ls(x) = log_ls0 + sum_k ls_w[k] rbf_k(x)
    ls_w: jax.Array  # [K]
    rbf_centers: jax.Array  # [K, D]
    rbf_width: jax.Array  # []
    g1: BumpParams
    g2: BumpParams
    s0: jax.Array  # [] weight of the Wendland term inside C_sparse
    r0: jax.Array  # [] Wendland support
    noise: jax.Array  # []


def wendland_order(dim: int) -> int:
    """``l`` of the Wendland function positive definite in ``dim`` dimensions: 5 (phi_{3,3})
    for D <= 3, ``floor(D / 2) + 4`` beyond."""
    return 5 if dim <= 3 else dim // 2 + 4


def _check_order(order: int | None, dim: int) -> int:
    l_min = wendland_order(dim)
    if order is None:
        return l_min
    if int(order) < l_min:
        raise ValueError(f"order={order}: phi_{{l,3}} with l={order} is not positive definite "
                         f"in D={dim} dimensions; need l >= {l_min} (phi_3,3 = l=5 only for "
                         "D <= 3)")
    return int(order)


def wendland(d: jax.Array, l: int = 5) -> jax.Array:
    """``phi_{l,3}(d) = (1-d)_+^{l+3} [(l^3+9l^2+23l+15) d^3 + (6l^2+36l+45) d^2
    + (15l+45) d + 15] / 15`` (eq. K1'; ``l = 5`` is phi_{3,3}, coefficients 32, 25, 8, 1).
    ``phi(0) = 1``; ``phi`` and its first three derivatives vanish at ``d = 1``."""
    c3 = (l ** 3 + 9 * l ** 2 + 23 * l + 15) / 15.0
    c2 = (6 * l ** 2 + 36 * l + 45) / 15.0
    c1 = (15 * l + 45) / 15.0
    t = jnp.maximum(1.0 - d, 0.0)
    return t ** (l + 3) * (((c3 * d + c2) * d + c1) * d + 1.0)


def _safe_norm(sq: jax.Array) -> jax.Array:
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def whitened_dist(x1: jax.Array, x2: jax.Array, ls: jax.Array) -> jax.Array:
    """``||(x1 - x2) / ls||`` row by row: ``x1, x2 [P, D]``, ``ls [D]`` -> ``[P]``."""
    z = (x1 - x2) / ls
    return _safe_norm(jnp.sum(z * z, axis=-1))


def bump(x: jax.Array, p: BumpParams) -> jax.Array:
    """``sum_b a_b exp(beta_b - beta_b / (1 - ||x - c_b||^2 / r_b^2))`` inside each bump's
    ball, 0 outside: ``x [P, D]`` -> ``[P]`` (C^inf, compact support)."""
    diff = x[:, None, :] - p.centers[None]  # [P, B, D]
    q = jnp.sum(diff * diff, -1) / (p.radii * p.radii)  # [P, B]
    inside = q < 1.0
    qs = jnp.where(inside, q, 0.0)
    val = p.amps * jnp.exp(p.beta - p.beta / (1.0 - qs))
    return jnp.sum(jnp.where(inside, val, 0.0), axis=-1)


def bump_support_mask(x: jax.Array, p: BumpParams) -> jax.Array:
    """``[P]`` bool: inside at least one bump of ``p`` (where the bump sum can be non-zero)."""
    diff = x[:, None, :] - p.centers[None]
    return jnp.any(jnp.sum(diff * diff, -1) < p.radii * p.radii, axis=-1)


@jax.jit
def bump_features(params: BumpKernelParams, x: jax.Array) -> jax.Array:
    """``G = [f(X), g(X)]`` ``[N, 2]``: kernel 2's rank-2 part is ``G G^T``."""
    return jnp.stack([bump(x, params.f), bump(x, params.g)], axis=-1)


def _rbf(x: jax.Array, p: RisserParams) -> jax.Array:
    diff = x[:, None, :] - p.rbf_centers[None]
    return jnp.exp(-0.5 * jnp.sum(diff * diff, -1) / p.rbf_width ** 2)  # [P, K]


def _matern52(r: jax.Array) -> jax.Array:
    s5r = jnp.sqrt(5.0) * r
    return (1.0 + s5r + s5r * s5r / 3.0) * jnp.exp(-s5r)


def _risser_pairs(p: RisserParams, x1: jax.Array, x2: jax.Array) -> jax.Array:
    dim = x1.shape[-1]
    phi1, phi2 = _rbf(x1, p), _rbf(x2, p)
    sig1 = jnp.exp(p.log_sigma0 + phi1 @ p.sigma_w)
    sig2 = jnp.exp(p.log_sigma0 + phi2 @ p.sigma_w)
    l1 = jnp.exp(p.log_ls0 + phi1 @ p.ls_w)
    l2 = jnp.exp(p.log_ls0 + phi2 @ p.ls_w)
    avg = 0.5 * (l1 * l1 + l2 * l2)
    diff = x1 - x2
    r = _safe_norm(jnp.sum(diff * diff, -1) / avg)  # = sqrt(2) ||x - x'|| / sqrt(l^2 + l'^2)
    core = (l1 * l2) ** (dim / 2) * avg ** (-dim / 2) * _matern52(r)
    ga = [bump(x1, g) for g in (p.g1, p.g2)]
    gb = [bump(x2, g) for g in (p.g1, p.g2)]
    w = wendland(_safe_norm(jnp.sum(diff * diff, -1)) / p.r0)
    s12 = ga[0] * gb[0] + ga[1] * gb[1] + p.s0 * w
    s11 = ga[0] * ga[0] + ga[1] * ga[1] + p.s0
    s22 = gb[0] * gb[0] + gb[1] * gb[1] + p.s0
    return sig1 * sig2 * core * s12 / jnp.sqrt(s11 * s22)


# Jitted (kind and order static): one program per shape instead of a dozen eager ops, as
# the evaluation phases call these outside any jit.
@functools.partial(jax.jit, static_argnames=("kind", "order"))
def pair_values(kind: str, params, x: jax.Array, rows: jax.Array, cols: jax.Array, *,
                order: int | None = None) -> jax.Array:
    """The kernel values stored in the sparse matrix for pairs ``(rows[c], cols[c])``: ``[C]``.

    ``"wendland"``: ``sigma2 phi_l(||(x_r - x_c) / ls||)``; ``"bump"``: only the Wendland part
    ``sigma2 phi_{3,3}(||x_r - x_c|| / r0)`` (the rank-2 part is ``bump_features``);
    ``"risser"``: the full product kernel. Noise is not included.
    """
    x1, x2 = x[rows], x[cols]
    if kind == "wendland":
        l = _check_order(order, x.shape[-1])
        return params.sigma2 * wendland(whitened_dist(x1, x2, params.ls), l)
    if kind == "bump":
        _check_order(5, x.shape[-1])
        d = whitened_dist(x1, x2, jnp.broadcast_to(params.r0, (x.shape[-1],)))
        return params.sigma2 * wendland(d)
    if kind == "risser":
        _check_order(5, x.shape[-1])
        return _risser_pairs(params, x1, x2)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def _dense_whitened(x1, x2, ls):
    """``[N1, N2]`` whitened distances by broadcasting one dimension at a time (no
    ``[N1 N2, D]`` intermediates: the dense reference runs at N = 10^4)."""
    ls = jnp.broadcast_to(ls, (x1.shape[-1],))
    sq = 0.0
    for k in range(x1.shape[-1]):
        sq = sq + ((x1[:, None, k] - x2[None, :, k]) / ls[k]) ** 2
    return _safe_norm(sq)


@functools.partial(jax.jit, static_argnames=("kind", "order"))
def k_dense(kind: str, params, x1: jax.Array, x2: jax.Array, *,
            order: int | None = None) -> jax.Array:
    """The full kernel matrix ``[N1, N2]`` (reference path: rank-2 bump terms included,
    noise excluded). Dense: for tests, baselines and small N only."""
    if kind == "wendland":
        l = _check_order(order, x1.shape[-1])
        return params.sigma2 * wendland(_dense_whitened(x1, x2, params.ls), l)
    if kind == "bump":
        _check_order(5, x1.shape[-1])
        k = params.sigma2 * wendland(_dense_whitened(x1, x2, params.r0))
        return k + bump_features(params, x1) @ bump_features(params, x2).T
    if kind == "risser":
        _check_order(5, x1.shape[-1])
        n1, n2 = x1.shape[0], x2.shape[0]
        k = _risser_pairs(params, jnp.repeat(x1, n2, axis=0), jnp.tile(x2, (n1, 1)))
        return k.reshape(n1, n2)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def example_params(kind: str, dim: int, rng):
    """Reasonable random parameters of kernel ``kind`` in ``dim`` dimensions (validity checks
    and tests): supports 0.1-0.35, four bumps per group, noise 0.01."""
    import numpy as np

    def bumps(radii, amps, beta=None):
        r = jnp.asarray(radii, jnp.float64)
        return BumpParams(jnp.asarray(rng.uniform(0, 1, (len(radii), dim))), r,
                          jnp.asarray(amps, jnp.float64),
                          jnp.ones_like(r) if beta is None else jnp.asarray(beta, jnp.float64))

    if kind == "wendland":
        return WendlandParams(jnp.asarray(1.3), jnp.asarray(rng.uniform(0.1, 0.3, dim)),
                              jnp.asarray(0.01))
    if kind == "bump":
        return BumpKernelParams(bumps([0.3, 0.2, 0.25, 0.35], [1.0, 0.5, 0.8, 0.3]),
                                bumps([0.2, 0.3, 0.25, 0.1], [0.7, 0.2, 0.4, 0.9]),
                                jnp.asarray(0.5), jnp.asarray(0.1), jnp.asarray(0.01))
    if kind == "risser":
        return RisserParams(
            jnp.asarray(0.1), jnp.asarray(rng.normal(0, 0.3, 4)), jnp.asarray(np.log(0.2)),
            jnp.asarray(rng.normal(0, 0.3, 4)), jnp.asarray(rng.uniform(0, 1, (4, dim))),
            jnp.asarray(0.3), bumps([0.2] * 4, [1.0, 0.5, 0.8, 0.3], [1.0, 2.0, 0.5, 1.0]),
            bumps([0.15] * 4, [0.3, 0.9, 0.4, 0.6]), jnp.asarray(0.5), jnp.asarray(0.1),
            jnp.asarray(0.01))
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def support(kind: str, params) -> jax.Array:
    """Per-dimension radius beyond which the *local* (Wendland) part of the kernel is exactly
    0: ``ls`` for kernel 1, ``r0`` (isotropic, returned as a scalar) for kernels 2 and 3. The
    bump parts of kernels 2 and 3 add non-local pairs (see ``neighbors``)."""
    if kind == "wendland":
        return params.ls
    if kind in ("bump", "risser"):
        return params.r0
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def validate_params(kind: str, params) -> None:
    """Host-side checks (concrete values): positive supports, non-negative noise."""
    import numpy as np

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    ls = np.asarray(support(kind, params))
    if not np.all(ls > 0):
        raise ValueError(f"length scales / supports must be > 0, got {ls}")
    if not float(np.asarray(params.noise)) >= 0:
        raise ValueError(f"noise must be >= 0, got {float(np.asarray(params.noise))}")
