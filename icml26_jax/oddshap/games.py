"""Cooperative games as pure JAX functions (spec §Data).

A ``Game`` is a pytree: ``params`` (arrays; a leading explicand axis may be vmapped) plus
static ``fn`` and ``n``. ``game(z)`` evaluates ``fn(params, z)`` on coalitions
``z bool [m, n]`` and returns ``f64 [m]``. Every game the experiment uses is a jnp function,
so the estimators jit and vmap over seeds and explicands:

* ``table_game``: a value table ``[2^n]`` (n <= 20), index ``sum_i z_i 2^i``.
* ``sparse_fourier_game``: ``nu(S) = sum_k c_k chi_{T_k}(S)`` (tree games: their exact
  spectrum, ``trees.sklearn_tree_spectrum``).
* ``soum_game``: a sum of unanimity games ``sum_k a_k 1[T_k ⊆ S]`` with closed-form Shapley
  values ``phi_i = sum_{k ∋ i} a_k / |T_k|`` and spectrum ``a_k (-1)^{|U|} / 2^{|T_k|}`` on
  every ``U ⊆ T_k``.
* ``baseline_game`` / ``marginal_game`` / ``from_model``: ``nu(S) = f(where(z, x, xbar))``
  (or its mean over background rows) for any jnp model ``f``; ``value_table`` tabulates any
  game for the exact ground truth (n <= 20); ``from_table`` reads a ``.npz`` table.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.oddshap import fourier


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Game:
    """``fn(params, z bool[m, n]) -> f64[m]``; ``params`` is the pytree part."""
    params: Any
    fn: Callable = dataclasses.field(metadata=dict(static=True))
    n: int = dataclasses.field(metadata=dict(static=True))

    def __call__(self, z: jax.Array) -> jax.Array:
        z = jnp.asarray(z)
        if z.dtype != jnp.bool_ or z.ndim != 2 or z.shape[1] != self.n:
            raise ValueError(f"coalitions must be bool [m, n={self.n}], got {z.dtype} "
                             f"{tuple(z.shape)}")
        out = self.fn(self.params, z)
        if out.shape != (z.shape[0],):
            raise ValueError(f"the game must return [m] = [{z.shape[0]}] values, got shape "
                             f"{tuple(out.shape)}")
        return out

    def packed(self, masks: jax.Array) -> jax.Array:
        """Values of packed coalitions ``uint32 [m, W]``."""
        return self(fourier.unpack(masks, self.n))

    @property
    def empty(self) -> jax.Array:
        return self(jnp.zeros((1, self.n), bool))[0]

    @property
    def grand(self) -> jax.Array:
        return self(jnp.ones((1, self.n), bool))[0]


def at(game: Game, e: int) -> Game:
    """Explicand ``e`` of a game whose params carry a leading explicand axis."""
    return Game(jax.tree.map(lambda a: a[e], game.params), game.fn, game.n)


def _index(z: jax.Array) -> jax.Array:
    n = z.shape[-1]
    return jnp.sum(jnp.where(z, jnp.left_shift(1, jnp.arange(n)), 0), axis=-1)


def _table_fn(params, z):
    return params["table"][_index(z)]


def table_game(values) -> Game:
    """A game given by its full value table ``f64 [2^n]``."""
    values = jnp.asarray(values)
    n = int(values.shape[-1]).bit_length() - 1
    if values.shape[-1] != 1 << n or n > fourier.MAX_TABLE_PLAYERS:
        raise ValueError(f"values must be [2^n] with n <= {fourier.MAX_TABLE_PLAYERS}, got "
                         f"shape {values.shape}")
    return Game({"table": values}, _table_fn, n)


def _fourier_fn(params, z):
    chi = fourier.parity_f(fourier.pack(z), params["masks"], params["coefs"].dtype)
    return chi @ params["coefs"]


def sparse_fourier_game(masks, coefs, n: int) -> Game:
    """``nu(S) = sum_k coefs[k] chi_{masks[k]}(S)``; ``masks uint32 [K, W]``."""
    masks, coefs = jnp.asarray(masks, jnp.uint32), jnp.asarray(coefs)
    if masks.shape[-1] != fourier.num_words(n) or coefs.shape != masks.shape[:-1]:
        raise ValueError(f"masks must be uint32 [K, {fourier.num_words(n)}] and coefs [K], got "
                         f"{masks.shape}, {coefs.shape}")
    return Game({"masks": masks, "coefs": coefs}, _fourier_fn, int(n))


def _soum_fn(params, z):
    s = fourier.pack(z)  # [m, W]
    t = params["masks"]  # [K, W]
    contained = jnp.all((s[:, None, :] & t[None]) == t[None], axis=-1)  # [m, K]
    return contained.astype(params["coefs"].dtype) @ params["coefs"]


def soum_game(masks, coefs, n: int):
    """``(Game, phi_exact [n], (spec_masks, spec_coefs))`` of ``sum_k a_k 1[T_k ⊆ S]``."""
    masks = np.asarray(masks, np.uint32)
    coefs = np.asarray(coefs, np.float64)
    members = np.asarray(fourier.unpack(jnp.asarray(masks), n))  # [K, n]
    sizes = members.sum(1)
    if np.any(sizes == 0):
        raise ValueError("unanimity terms need non-empty sets")
    phi = (coefs / sizes) @ members
    game = Game({"masks": jnp.asarray(masks), "coefs": jnp.asarray(coefs)}, _soum_fn, int(n))
    return game, phi, soum_spectrum(masks, coefs, n)


def soum_spectrum(masks, coefs, n: int):
    """Exact spectrum of a SOUM: ``1[T ⊆ S] = prod_{i in T} (1 - chi_i) / 2`` puts
    ``(-1)^{|U|} / 2^{|T|}`` on every ``U ⊆ T``. Returns merged ``(masks [K', W], coefs)``."""
    acc: dict = {}
    w = fourier.num_words(n)
    for mask, a in zip(np.asarray(masks, np.uint32), np.asarray(coefs, np.float64)):
        members = np.flatnonzero(np.asarray(fourier.unpack(jnp.asarray(mask[None]), n))[0])
        t = len(members)
        for r in range(1 << t):
            sub = np.zeros(w, np.uint64)
            size = 0
            for b in range(t):
                if r >> b & 1:
                    i = members[b]
                    sub[i // 32] |= np.uint64(1) << np.uint64(i % 32)
                    size += 1
            key = tuple(int(v) for v in sub)
            acc[key] = acc.get(key, 0.0) + a * (-1) ** size / 2.0 ** t
    keys = sorted(acc)
    return (np.asarray(keys, np.uint32).reshape(-1, w), np.asarray([acc[k] for k in keys]))


def _baseline_fn(f):
    def fn(params, z):
        xs = jnp.where(z, params["x"][None], params["xbar"][None])
        return f(xs)
    return fn


def baseline_game(f: Callable, x, xbar) -> Game:
    """Baseline imputation ``nu(S) = f(where(z, x, xbar))``; ``f: [m, n] -> [m]`` (jnp)."""
    x, xbar = jnp.asarray(x), jnp.asarray(xbar)
    if x.shape != xbar.shape or x.ndim != 1:
        raise ValueError(f"x and xbar must both be [n], got {x.shape}, {xbar.shape}")
    return Game({"x": x, "xbar": xbar}, _BaselineFns.get(f), int(x.shape[0]))


def _marginal_fn(f, chunk):
    def fn(params, z):
        bg = params["background"]  # [B, n]

        def one(zc):
            xs = jnp.where(zc[:, None, :], params["x"][None, None], bg[None])  # [c, B, n]
            return f(xs.reshape(-1, xs.shape[-1])).reshape(xs.shape[:2]).mean(1)

        m = z.shape[0]
        pad = (-m) % chunk
        zp = jnp.concatenate([z, jnp.zeros((pad, z.shape[1]), bool)]).reshape(-1, chunk,
                                                                               z.shape[1])
        return jax.lax.map(one, zp).reshape(-1)[:m]
    return fn


def marginal_game(f: Callable, x, background, chunk: int = 256) -> Game:
    """Marginal imputation: ``nu(S) = mean_b f(where(z, x, background_b))``, evaluated
    ``chunk`` coalitions at a time (``[chunk, B, n]`` intermediates)."""
    x, background = jnp.asarray(x), jnp.asarray(background)
    if background.ndim != 2 or background.shape[1] != x.shape[0]:
        raise ValueError(f"background must be [B, n={x.shape[0]}], got {background.shape}")
    return Game({"x": x, "background": background}, _MarginalFns.get(f, int(chunk)),
                int(x.shape[0]))


class _BaselineFns:
    """One ``fn`` object per model function (static pytree field: stable identity keeps jit
    caches warm)."""
    _cache: dict = {}

    @classmethod
    def get(cls, f):
        if f not in cls._cache:
            cls._cache[f] = _baseline_fn(f)
        return cls._cache[f]


class _MarginalFns:
    _cache: dict = {}

    @classmethod
    def get(cls, f, chunk):
        if (f, chunk) not in cls._cache:
            cls._cache[(f, chunk)] = _marginal_fn(f, chunk)
        return cls._cache[(f, chunk)]


def from_model(predict_fn: Callable, x, baseline=None, background=None, chunk: int = 256
               ) -> Game:
    """The real-data path: explain ``predict_fn(X [m, n]) -> [m]`` (any JAX-traceable model)
    at ``x`` against one ``baseline`` row or ``background`` rows (marginal imputation)."""
    if (baseline is None) == (background is None):
        raise ValueError("from_model needs exactly one of baseline= or background=")
    if baseline is not None:
        return baseline_game(predict_fn, x, baseline)
    return marginal_game(predict_fn, x, background, chunk)


def value_table(game: Game, chunk: int = 1 << 14) -> jax.Array:
    """``f64 [2^n]``: the game on every coalition (n <= 20), ``chunk`` at a time."""
    n = game.n
    if n > fourier.MAX_TABLE_PLAYERS:
        raise ValueError(f"value tables need n <= {fourier.MAX_TABLE_PLAYERS}, got n={n}")
    z = jnp.asarray(fourier.index_bits(n))
    ev = jax.jit(lambda g, zc: g(zc))
    return jnp.concatenate([ev(game, z[s:s + chunk]) for s in range(0, 1 << n, chunk)])


def from_table(path: str) -> tuple[Game, np.ndarray]:
    """A game from a ``.npz`` with ``masks uint32 [M, W]``, ``values f64 [M]``, ``n``: it must
    hold every coalition (``M = 2^n``, n <= 20). Returns ``(table_game, table)``."""
    with np.load(path) as f:
        if not {"masks", "values", "n"} <= set(f.files):
            raise ValueError(f"{path}: needs arrays masks, values and n, has {f.files}")
        masks, values, n = f["masks"], f["values"], int(f["n"])
    if masks.dtype != np.uint32 or masks.ndim != 2:
        raise ValueError(f"{path}: masks must be uint32 [M, W], got {masks.dtype} {masks.shape}")
    if n > fourier.MAX_TABLE_PLAYERS or len(values) != 1 << n:
        raise ValueError(f"{path}: a table game needs all 2^n coalitions with n <= "
                         f"{fourier.MAX_TABLE_PLAYERS}; got {len(values)} values for n={n}")
    idx = masks[:, 0].astype(np.int64)
    table = np.full(1 << n, np.nan)
    table[idx] = values
    if np.isnan(table).any():
        raise ValueError(f"{path}: some coalitions are missing from the table")
    return table_game(table), table
