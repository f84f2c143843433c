"""The Walsh (Boolean Fourier) basis of set functions (spec §Method "Walsh basis").

Conventions used everywhere in ``oddshap``:

* A coalition ``S`` of ``n`` players is a bool row ``z [n]`` (``z_i = 1``: player ``i``
  present) or its packed form ``uint32 [W]``, ``W = ceil(n / 32)``, bit ``i % 32`` of word
  ``i // 32`` = player ``i``. Table index ``s = sum_i z_i 2^i`` (``n <= 20`` for tables).
* ``chi_T(S) = (-1)^{|S cap T|}`` (absent = +1), ``nu(S) = sum_T nu_hat(T) chi_T(S)`` and
  ``nu_hat = FWHT(nu) / 2^n`` (eq. W1).
* ``phi_i(chi_T) = -2 / |T|`` for ``i in T``, ``|T|`` odd, else 0, hence (eq. W2)
  ``phi_i(nu) = -2 sum_{T ni i, |T| odd} nu_hat(T) / |T|``.
* ``nu_odd(S) = (nu(S) - nu(S^c)) / 2 = sum_{|T| odd} nu_hat(T) chi_T(S)`` and
  ``nu_even(S) = (nu(S) + nu(S^c)) / 2`` (eq. W3): the Shapley value depends on ``nu_odd``
  only (Theorem 1).

Every function is pure jnp and jit/vmap-safe (``n`` static); masks are unsigned so that
``lax.population_count`` is exact at ``n >= 32``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

MAX_PLAYERS = 128
MAX_TABLE_PLAYERS = 20


def num_words(n: int) -> int:
    """``W = ceil(n / 32)`` uint32 words per packed coalition."""
    return max(1, -(-int(n) // 32))


def check_players(n: int) -> int:
    n = int(n)
    if not 1 <= n <= MAX_PLAYERS:
        raise ValueError(f"n (number of players) must be in [1, {MAX_PLAYERS}], got {n}")
    return n


def pack(z: jax.Array) -> jax.Array:
    """``bool [..., n] -> uint32 [..., W]`` (bit ``i % 32`` of word ``i // 32`` = player
    ``i``)."""
    z = jnp.asarray(z)
    if z.dtype != jnp.bool_:
        raise ValueError(f"coalitions must be bool [..., n], got dtype {z.dtype}")
    n = z.shape[-1]
    w = num_words(n)
    pad = jnp.zeros(z.shape[:-1] + (32 * w - n,), jnp.bool_)
    bits = jnp.concatenate([z, pad], axis=-1).reshape(z.shape[:-1] + (w, 32))
    weights = jnp.left_shift(jnp.uint32(1), jnp.arange(32, dtype=jnp.uint32))
    return jnp.sum(jnp.where(bits, weights, jnp.uint32(0)), axis=-1, dtype=jnp.uint32)


def unpack(masks: jax.Array, n: int) -> jax.Array:
    """``uint32 [..., W] -> bool [..., n]``."""
    masks = jnp.asarray(masks)
    if masks.dtype != jnp.uint32:
        raise ValueError(f"packed masks must be uint32, got {masks.dtype}")
    shifts = jnp.arange(32, dtype=jnp.uint32)
    bits = jnp.right_shift(masks[..., :, None], shifts) & jnp.uint32(1)
    return bits.reshape(masks.shape[:-1] + (-1,))[..., :n].astype(jnp.bool_)


def popcount(masks: jax.Array) -> jax.Array:
    """``int32 [...]``: number of set bits over the last (word) axis."""
    return jnp.sum(lax.population_count(masks).astype(jnp.int32), axis=-1, dtype=jnp.int32)


def parity(s: jax.Array, t: jax.Array) -> jax.Array:
    """``chi_T(S) = (-1)^{|S cap T|}`` as ``int8 [m, K]`` for packed ``s [m, W]``, ``t [K, W]``."""
    inter = popcount(s[:, None, :] & t[None, :, :])
    return (1 - 2 * (inter & 1)).astype(jnp.int8)


def parity_f(s: jax.Array, t: jax.Array, dtype=jnp.float64) -> jax.Array:
    """``parity`` as a float matrix (regression features)."""
    inter = popcount(s[:, None, :] & t[None, :, :])
    return (1 - 2 * (inter & 1)).astype(dtype)


def fwht(v: jax.Array) -> jax.Array:
    """Unnormalised fast Walsh-Hadamard transform of ``v [2^n]`` (index bit ``i`` = player
    ``i``): ``out[T] = sum_S v[S] (-1)^{|S cap T|}``. ``fwht(fwht(v)) = 2^n v``."""
    v = jnp.asarray(v)
    size = v.shape[-1]
    n = int(size).bit_length() - 1
    if size != 1 << n:
        raise ValueError(f"fwht needs a length 2^n, got {size}")
    x = v.reshape(v.shape[:-1] + (2,) * n)
    # axis -1 - i of the [2]*n reshape is bit i of the index (C order: last axis = bit 0)
    for ax in range(v.ndim - 1, v.ndim - 1 + n):
        a = lax.index_in_dim(x, 0, ax, keepdims=True)
        b = lax.index_in_dim(x, 1, ax, keepdims=True)
        x = jnp.concatenate([a + b, a - b], axis=ax)
    return x.reshape(v.shape)


def spectrum(values: jax.Array) -> jax.Array:
    """``nu_hat = FWHT(nu) / 2^n`` (eq. W1) of a value table ``[2^n]``."""
    return fwht(values) / values.shape[-1]


def index_bits(n: int) -> np.ndarray:
    """``bool [2^n, n]`` (numpy): the coalition of every table index."""
    idx = np.arange(1 << n)
    return ((idx[:, None] >> np.arange(n)) & 1).astype(bool)


def shapley_from_fourier(coefs: jax.Array, masks: jax.Array, n: int) -> jax.Array:
    """Eq. W2 on a sparse spectrum: ``phi [n]`` from ``coefs [K]`` on packed sets
    ``masks [K, W]``; even sets (and the empty set) contribute nothing."""
    size = popcount(masks)
    odd = (size & 1) == 1
    w = jnp.where(odd, -2.0 * coefs / jnp.maximum(size, 1).astype(coefs.dtype), 0.0)
    members = unpack(masks, n).astype(w.dtype)  # [K, n]
    return w @ members


def shapley_from_table(values: jax.Array) -> jax.Array:
    """``phi [n]`` of a full value table ``[2^n]`` via its spectrum (eq. W1, W2)."""
    size = values.shape[-1]
    n = int(size).bit_length() - 1
    coefs = spectrum(values)
    members = jnp.asarray(index_bits(n), values.dtype)  # [2^n, n]
    card = members.sum(-1)  # float, exact
    odd = (card.astype(jnp.int32) & 1) == 1
    w = jnp.where(odd, -2.0 * coefs / jnp.maximum(card, 1), 0.0)
    return w @ members


def complement_index(n: int) -> np.ndarray:
    """``int [2^n]``: table index of ``S^c`` for each ``S``."""
    return (np.arange(1 << n) ^ ((1 << n) - 1)).astype(np.int64)


def odd_even_split(values: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(nu_odd, nu_even)`` tables (eq. W3): ``(nu(S) -/+ nu(S^c)) / 2``."""
    n = int(values.shape[-1]).bit_length() - 1
    comp = values[..., complement_index(n)]
    return 0.5 * (values - comp), 0.5 * (values + comp)
