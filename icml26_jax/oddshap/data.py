"""The games of the experiment, with exact Shapley values (spec §Data).

Every game is a ``games.Game`` batched over ``E`` explicands (params with a leading ``[E]``
axis: ``jax.vmap`` over it, or ``games.at(game, e)`` for one explicand):

=================  ===  ============================================  ======================
game               n    model / data                                  game and exact phi
=================  ===  ============================================  ======================
``mlp_diabetes``   10   MLP(64, 64) regression, ``load_diabetes``     table game, FWHT
``mlp_wine``       13   MLP classifier, ``load_wine``; class logit    table game, FWHT
``mlp_synth14``    14   MLP(64, 64), 4,000 rows, 2- and 3-way terms   table game, FWHT
``digits16``       16   MLP classifier, ``load_digits``; 2x2 players  table game, FWHT
``gbt_synth16``    16   GBR (100 trees, depth 4), 2- and 3-way terms  table = tree spectrum
``tree_cancer30``  30   GBR (100 trees, depth 4), breast cancer       sparse Fourier game
``soum30/60/100``  n    n/3 unanimity terms                           SOUM, closed form
=================  ===  ============================================  ======================

Model games use baseline imputation ``nu(S) = f(where(z, x, xbar))`` with ``xbar`` the
training mean (``games.baseline_game``). MLP inputs are standardised (and regression targets
too, so values are in standard deviations of ``y``); MLPs are flax NNX, trained in float32
with optax Adam from ``jax.random.key(seed)`` and evaluated in float64. Explicands are ``E``
distinct rows of the data drawn from ``seed``. ``digits16``: player ``p`` is the 2x2
superpixel ``p = 4 (r // 2) + c // 2`` of the 8x8 image; a present player keeps its 4 pixels
of the explicand, an absent one takes the mean image's. Classifier games are the logit of the
class the model predicts at the explicand. Tree games use the exact DFS spectrum of
``trees.sklearn_tree_spectrum``; for ``gbt_synth16`` the value table is the inverse FWHT of
that spectrum. SOUMs: ``n / 3`` terms of sizes in {1, 2, 3, 5} (probabilities .3, .3, .25,
.15, at least one 3-way and one 5-way term), coefficients ``+-U[0.5, 1.5]``, one independent
SOUM per explicand.

Everything is float64 and needs ``jax_enable_x64`` (enabled by the entry script and tests).
The same ``(name, seed, explicands, train_steps)`` gives an identical ``GameSet``;
``cache_dir`` stores it as ``.npz`` so a second call only reads the file.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import zlib
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26_jax.core import checkpoint
from icml26_jax.core.optim import promotion_safe
from icml26_jax.oddshap import fourier, games, trees

GAMES = ("mlp_diabetes", "mlp_wine", "mlp_synth14", "digits16", "gbt_synth16",
         "tree_cancer30", "soum30", "soum60", "soum100")
MLP_GAMES = ("mlp_diabetes", "mlp_wine", "mlp_synth14", "digits16")
TREE_GAMES = ("gbt_synth16", "tree_cancer30")
SOUM_PLAYERS = {"soum30": 30, "soum60": 60, "soum100": 100}
NUM_PLAYERS = {"mlp_diabetes": 10, "mlp_wine": 13, "mlp_synth14": 14, "digits16": 16,
               "gbt_synth16": 16, "tree_cancer30": 30, **SOUM_PLAYERS}

# Default Adam steps per MLP game (each trains in a few seconds on 2 CPU cores); small data
# sets train full-batch, the larger ones on minibatches of BATCH_SIZE rows.
TRAIN_STEPS = {"mlp_diabetes": 1000, "mlp_wine": 300, "mlp_synth14": 2000, "digits16": 600}
LEARNING_RATE = 3e-3
BATCH_SIZE = 256
HIDDEN = (64, 64)
SYNTH_ROWS = {"mlp_synth14": 4000, "gbt_synth16": 2000}
SOUM_SIZES = (1, 2, 3, 5)
SOUM_SIZE_PROBS = (0.3, 0.3, 0.25, 0.15)
# Bump when a change of this module changes any game, so that stale caches are not read.
DATA_VERSION = 1


class GameSet(NamedTuple):
    """One game of the experiment for ``E`` explicands, with its exact ground truth."""
    name: str
    n: int
    game: games.Game  # params batched over E explicands (leading axis)
    phi: np.ndarray  # f64 [E, n]: exact Shapley values
    empty: np.ndarray  # f64 [E]: nu(empty set)
    grand: np.ndarray  # f64 [E]: nu(N)
    # uint32 [E, P, W]: the odd sets |T| >= 3 with a non-zero true Walsh coefficient (SOUMs;
    # P = 0 for the other games). Explicands with fewer sets are padded with all-zero rows
    # (the empty set is even, so a zero row is never a real entry).
    planted_odd: np.ndarray
    table: np.ndarray | None  # f64 [E, 2^n] value tables for n <= 16, else None


class FittedModel(NamedTuple):
    """A model game's ingredients (what ``load_game_set`` explains)."""
    name: str
    predict: Callable  # jnp/np X [m, d] -> f64 [m, C] raw outputs (C = 1: regression, trees)
    data: np.ndarray  # [N, d] the model's inputs (standardised for MLPs)
    xbar: np.ndarray  # [d] baseline = training mean of ``data``
    rows: np.ndarray  # int [E]: explicand rows of ``data``
    target: np.ndarray  # int [E]: output explained per explicand (predicted class, or 0)
    sk_model: Any  # the scikit-learn model of a tree game, else None


# ----------------------------------------------------------------------------- validation

def _check_args(name, seed, explicands, train_steps):
    if name not in GAMES:
        raise ValueError(f"name must be one of {GAMES}, got {name!r}")
    for arg, value, low in (("seed", seed, 0), ("explicands", explicands, 1)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{arg} must be an int, got {value!r}")
        if value < low:
            raise ValueError(f"{arg} must be >= {low}, got {value}")
    if train_steps is not None and (isinstance(train_steps, (bool, np.bool_))
                                    or not isinstance(train_steps, (int, np.integer))
                                    or train_steps < 1):
        raise ValueError(f"train_steps must be None or an int >= 1, got {train_steps!r}")
    if not jax.config.jax_enable_x64:
        raise RuntimeError("oddshap games are float64: enable jax_enable_x64 (the entry script "
                           "and the tests do) before load_game_set / fit_model")


def _rng(name: str, seed: int, stream: int) -> np.random.Generator:
    """Data randomness: one independent stream per (game, seed, purpose)."""
    return np.random.default_rng([int(seed), zlib.crc32(name.encode()), int(stream)])


def _pick_rows(name: str, seed: int, num_rows: int, explicands: int) -> np.ndarray:
    if explicands > num_rows:
        raise ValueError(f"explicands must be <= {num_rows} (rows of {name}), got {explicands}")
    return np.sort(_rng(name, seed, 1).choice(num_rows, explicands, replace=False))


# ----------------------------------------------------------------------------- data sets

def synthetic_regression(n: int, rows: int, rng: np.random.Generator
                         ) -> tuple[np.ndarray, np.ndarray]:
    """``X ~ N(0, 1) [rows, n]``, ``y = X b + 6 pairwise + 4 three-way products + noise``.

    Coefficients are ``+-U[0.5, 1.5]`` (linear terms ``+-U[0.25, 0.75]``), the 6 pairs and 4
    triples are distinct random feature sets, the noise is ``N(0, 0.1^2)``.
    """
    def coef(k, low, high):
        return rng.choice([-1.0, 1.0], k) * rng.uniform(low, high, k)

    x = rng.standard_normal((rows, n))
    y = x @ coef(n, 0.25, 0.75)
    for order, count in ((2, 6), (3, 4)):
        chosen: set = set()
        while len(chosen) < count:
            chosen.add(tuple(sorted(rng.choice(n, order, replace=False).tolist())))
        for idx, c in zip(sorted(chosen), coef(count, 0.5, 1.5)):
            y = y + c * np.prod(x[:, list(idx)], axis=1)
    return x, y + 0.1 * rng.standard_normal(rows)


def _dataset(name: str, seed: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(X [N, d] f64, y [N], is_classification)`` of a model game."""
    from sklearn import datasets

    if name == "mlp_diabetes":
        x, y = datasets.load_diabetes(return_X_y=True)
        return x, y, False
    if name == "mlp_wine":
        x, y = datasets.load_wine(return_X_y=True)
        return x, y, True
    if name == "digits16":
        x, y = datasets.load_digits(return_X_y=True)
        return x, y, True
    if name == "tree_cancer30":
        x, y = datasets.load_breast_cancer(return_X_y=True)
        return x, y.astype(np.float64), False
    n = NUM_PLAYERS[name]  # mlp_synth14, gbt_synth16
    x, y = synthetic_regression(n, SYNTH_ROWS[name], _rng(name, seed, 0))
    return x, y, False


def superpixel_groups() -> np.ndarray:
    """``int [64]``: the player (2x2 superpixel, row-major 4x4 grid) of each pixel of an 8x8
    ``load_digits`` image (pixel ``8 r + c``)."""
    r, c = np.divmod(np.arange(64), 8)
    return 4 * (r // 2) + c // 2


# ----------------------------------------------------------------------------- MLPs

class MLP(nnx.Module):
    """``d_in -> 64 -> 64 -> d_out`` with ReLUs (float32 parameters)."""

    def __init__(self, d_in: int, d_out: int, hidden=HIDDEN, *, rngs: nnx.Rngs):
        self.hidden1 = nnx.Linear(d_in, hidden[0], rngs=rngs)
        self.hidden2 = nnx.Linear(hidden[0], hidden[1], rngs=rngs)
        self.out = nnx.Linear(hidden[1], d_out, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jax.nn.relu(self.hidden1(x))
        return self.out(jax.nn.relu(self.hidden2(h)))  # [m, d_out]


def _loss(graphdef, params, xb, yb, classes: int):
    out = nnx.merge(graphdef, params)(xb)
    if classes:
        return optax.softmax_cross_entropy_with_integer_labels(out, yb).mean()
    return jnp.mean((out[:, 0] - yb) ** 2)


@functools.partial(jax.jit, static_argnames=("graphdef", "classes", "steps"))
def _train(graphdef, params, xs, ys, key, *, classes: int, steps: int):
    """``steps`` Adam steps in one ``lax.scan``; returns ``(params, losses [steps])``."""
    opt = promotion_safe(optax.adam(LEARNING_RATE))
    num = xs.shape[0]

    def step(carry, i):
        p, s = carry
        if num <= 2 * BATCH_SIZE:
            xb, yb = xs, ys
        else:
            idx = jax.random.randint(jax.random.fold_in(key, i), (BATCH_SIZE,), 0, num)
            xb, yb = xs[idx], ys[idx]
        loss, grads = jax.value_and_grad(_loss, argnums=1)(graphdef, p, xb, yb, classes)
        updates, s = opt.update(grads, s, p)
        return (optax.apply_updates(p, updates), s), loss

    (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), jnp.arange(steps))
    return params, losses


def train_mlp(x: np.ndarray, y: np.ndarray, classes: int, steps: int, seed: int):
    """Adam on the squared error (``classes == 0``) or the softmax cross-entropy of
    ``classes`` classes, from ``jax.random.key(seed)``.

    Full batch for ``N <= 2 BATCH_SIZE`` rows, else minibatches of ``BATCH_SIZE`` rows drawn
    with ``fold_in(key, step)``. Returns ``(graphdef, params, losses [steps])`` (float32).
    """
    key = jax.random.key(seed)
    model = MLP(x.shape[1], max(classes, 1), rngs=nnx.Rngs(jax.random.fold_in(key, 0)))
    graphdef, params = nnx.split(model, nnx.Param)
    ys = jnp.asarray(y, jnp.int32 if classes else jnp.float32)
    params, losses = _train(graphdef, params, jnp.asarray(x, jnp.float32), ys,
                            jax.random.fold_in(key, 1), classes=int(classes), steps=int(steps))
    return graphdef, params, np.asarray(losses)


@functools.lru_cache(maxsize=4)
def _fit_trees(name: str, seed: int):
    """The boosted trees of a tree game. Memoised: the fit is deterministic and the fitted
    model is only read afterwards (callers must not refit it)."""
    from sklearn.ensemble import GradientBoostingRegressor

    x, y, _ = _dataset(name, seed)
    model = GradientBoostingRegressor(n_estimators=100, max_depth=4, random_state=seed)
    return model.fit(x, y)


def _standardise(x: np.ndarray) -> np.ndarray:
    sd = x.std(0)
    return (x - x.mean(0)) / np.where(sd > 0, sd, 1.0)


def fit_model(name: str, seed: int = 0, explicands: int = 5,
              train_steps: int | None = None) -> FittedModel:
    """Fits the model of a model game (``MLP_GAMES`` or ``TREE_GAMES``) and picks its
    explicands; deterministic in ``(name, seed, explicands, train_steps)``.

    Args:
      name: a game of ``MLP_GAMES + TREE_GAMES``.
      seed: data, initialisation, minibatch and explicand seed.
      explicands: number ``E`` of explicand rows.
      train_steps: Adam steps of an MLP (None: ``TRAIN_STEPS[name]``); ignored for trees.

    Returns:
      A ``FittedModel`` (MLP ``predict`` is jnp and float64).
    """
    _check_args(name, seed, explicands, train_steps)
    if name not in MLP_GAMES + TREE_GAMES:
        raise ValueError(f"name must be a model game {MLP_GAMES + TREE_GAMES}, got {name!r}")
    x, y, is_clf = _dataset(name, seed)
    rows = _pick_rows(name, seed, x.shape[0], explicands)
    if name in TREE_GAMES:
        model = _fit_trees(name, seed)
        fn = trees.model_function(model)
        return FittedModel(name, lambda a: fn(np.asarray(a))[:, None], x, x.mean(0), rows,
                           np.zeros(explicands, np.int64), model)
    x = _standardise(x)
    classes = int(y.max()) + 1 if is_clf else 0
    if not is_clf:
        y = (y - y.mean()) / y.std()
    steps = TRAIN_STEPS[name] if train_steps is None else int(train_steps)
    graphdef, params, _ = train_mlp(x, y, classes, steps, seed)
    params64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)

    @jax.jit
    def predict(a):
        return nnx.merge(graphdef, params64)(jnp.asarray(a, jnp.float64))

    xbar = x.mean(0)
    if is_clf:  # explain the logit of the class predicted at the explicand
        target = np.asarray(jnp.argmax(predict(x[rows]), axis=1), np.int64)
    else:
        target = np.zeros(explicands, np.int64)
    return FittedModel(name, predict, x, xbar, rows, target, None)


def model_game(fitted: FittedModel, e: int) -> games.Game:
    """The (unbatched) baseline-imputation game of explicand ``e`` of a fitted model.

    Tabular: ``nu(z) = predict(where(z, x, xbar))[:, target]`` via ``games.baseline_game``.
    ``digits16``: a baseline game on the 16 superpixel indicators (``x = 1``, ``xbar = 0``)
    whose model expands them to pixels: ``where(u[groups], x_image, mean_image)``.
    """
    x = fitted.data[fitted.rows[e]]
    c = int(fitted.target[e])
    predict = fitted.predict
    if fitted.name == "digits16":
        groups = superpixel_groups()
        x_img, mean_img = jnp.asarray(x), jnp.asarray(fitted.xbar)

        def f(u):
            return predict(jnp.where(u[:, groups] > 0.5, x_img, mean_img))[:, c]

        return games.baseline_game(f, jnp.ones(16), jnp.zeros(16))
    return games.baseline_game(lambda a: predict(a)[:, c], jnp.asarray(x),
                               jnp.asarray(fitted.xbar))


# ----------------------------------------------------------------------------- SOUMs

def random_soum(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(masks uint32 [n // 3, W], coefs f64 [n // 3])`` of a random SOUM (spec §Data)."""
    k = n // 3
    if k < 2:
        raise ValueError(f"a SOUM needs n >= 6 (a 3-way and a 5-way term), got n={n}")
    sizes = rng.choice(SOUM_SIZES, k, p=SOUM_SIZE_PROBS)
    # force the required sizes into distinct slots (k >= 2: a second slot always exists)
    for need, keep in ((3, 5), (5, 3)):
        if not np.any(sizes == need):
            free = np.flatnonzero(sizes != keep)
            sizes[free[0] if free.size else k - 1] = need
    coefs = rng.choice([-1.0, 1.0], k) * rng.uniform(0.5, 1.5, k)
    z = np.zeros((k, n), bool)
    for t, s in enumerate(sizes):
        z[t, rng.choice(n, int(s), replace=False)] = True
    return _pack(z), coefs


def _pack(z: np.ndarray) -> np.ndarray:
    """Host ``fourier.pack``: ``bool [k, n] -> uint32 [k, W]``."""
    w = fourier.num_words(z.shape[1])
    bits = np.zeros((z.shape[0], 32 * w), bool)
    bits[:, :z.shape[1]] = z
    weights = np.left_shift(np.uint64(1), np.arange(32, dtype=np.uint64))
    return (bits.reshape(-1, w, 32) * weights).sum(-1).astype(np.uint32)


def _popcount(masks: np.ndarray) -> np.ndarray:
    """Host ``fourier.popcount``: ``uint32 [..., W] -> int [...]``."""
    bits = np.unpackbits(np.ascontiguousarray(masks).view(np.uint8), axis=-1)
    return bits.reshape(masks.shape[:-1] + (-1,)).sum(-1)


def _odd_sets(masks: np.ndarray, coefs: np.ndarray) -> np.ndarray:
    """The rows of a spectrum with ``|T|`` odd, ``|T| >= 3`` and a non-zero coefficient."""
    size = _popcount(masks)
    return masks[(size % 2 == 1) & (size >= 3) & (coefs != 0)]


# ----------------------------------------------------------------------------- game sets

def _stack(per_explicand: list[games.Game]) -> games.Game:
    g0 = per_explicand[0]
    params = jax.tree.map(lambda *a: jnp.stack(a), *[g.params for g in per_explicand])
    return games.Game(params, g0.fn, g0.n)


def _pad_stack(arrays: list[np.ndarray], dtype) -> np.ndarray:
    """Stacks ``[K_e, ...]`` arrays to ``[E, max K_e, ...]`` with zero padding."""
    length = max(a.shape[0] for a in arrays)
    out = np.zeros((len(arrays), length) + arrays[0].shape[1:], dtype)
    for e, a in enumerate(arrays):
        out[e, :a.shape[0]] = a
    return out


def _compute(name: str, seed: int, explicands: int, train_steps: int | None) -> dict:
    """The arrays a ``GameSet`` is built from (what the cache stores)."""
    n = NUM_PLAYERS[name]
    if name in SOUM_PLAYERS:
        terms = [random_soum(n, _rng(name, seed, 10 + e)) for e in range(explicands)]
        planted = []
        for masks, coefs in terms:
            spec_masks, spec_coefs = games.soum_spectrum(masks, coefs, n)
            planted.append(_odd_sets(spec_masks, spec_coefs))
        return {"kind": "soum", "masks": np.stack([t[0] for t in terms]),
                "coefs": np.stack([t[1] for t in terms]),
                "planted_odd": _pad_stack(planted, np.uint32)}
    fitted = fit_model(name, seed, explicands, train_steps)
    if name in TREE_GAMES:
        spectra = [trees.sklearn_tree_spectrum(fitted.sk_model, n, fitted.data[r], fitted.xbar)
                   for r in fitted.rows]
        masks = _pad_stack([s[0] for s in spectra], np.uint32)
        coefs = _pad_stack([s[1] for s in spectra], np.float64)
        if n > 16:
            return {"kind": "sparse", "masks": masks, "coefs": coefs}
        # table = inverse FWHT of the spectrum: nu(s) = sum_T c_T chi_T(s)
        dense = np.zeros((explicands, 1 << n))
        for e in range(explicands):
            np.add.at(dense[e], masks[e, :, 0].astype(np.int64), coefs[e])
        return {"kind": "table", "table": np.asarray(_fwht(jnp.asarray(dense)))}
    tables = [np.asarray(games.value_table(model_game(fitted, e))) for e in range(explicands)]
    return {"kind": "table", "table": np.stack(tables).astype(np.float64)}


# Jitted once per shape: op-by-op dispatch would compile every small primitive separately.
_phi_from_tables = jax.jit(jax.vmap(fourier.shapley_from_table))
_fwht = jax.jit(fourier.fwht)


@functools.partial(jax.jit, static_argnums=2)
def _phi_from_spectra(coefs, masks, n):
    # standard promotion: fourier.popcount sums to int64 under x64, and strict promotion
    # rejects the f64 / int64 division inside shapley_from_fourier
    with jax.numpy_dtype_promotion("standard"):
        return jax.vmap(lambda c, m: fourier.shapley_from_fourier(c, m, n))(coefs, masks)


def _build(name: str, arrays: dict) -> GameSet:
    n = NUM_PLAYERS[name]
    w = fourier.num_words(n)
    kind = str(arrays["kind"])
    planted = arrays.get("planted_odd")
    table = None
    if kind == "soum":
        masks, coefs = arrays["masks"], arrays["coefs"]
        per = [games.soum_game(m, c, n) for m, c in zip(masks, coefs)]
        game = _stack([p[0] for p in per])
        phi = np.stack([p[1] for p in per])
        empty = np.zeros(len(per))
        grand = coefs.sum(1)
    elif kind == "sparse":
        masks, coefs = arrays["masks"], arrays["coefs"]
        game = _stack([games.sparse_fourier_game(m, c, n) for m, c in zip(masks, coefs)])
        phi = np.asarray(_phi_from_spectra(jnp.asarray(coefs), jnp.asarray(masks), n))
        sign = 1.0 - 2.0 * (_popcount(masks) % 2)
        empty, grand = coefs.sum(1), (coefs * sign).sum(1)
    else:
        table = np.asarray(arrays["table"], np.float64)
        game = _stack([games.table_game(t) for t in table])
        phi = np.asarray(_phi_from_tables(jnp.asarray(table)))
        empty, grand = table[:, 0].copy(), table[:, -1].copy()
    if planted is None:
        planted = np.zeros((len(phi), 0, w), np.uint32)
    return GameSet(name, n, game, np.asarray(phi, np.float64), np.asarray(empty, np.float64),
                   np.asarray(grand, np.float64), np.asarray(planted, np.uint32), table)


def _cache_path(cache_dir: str, key: dict) -> str:
    return os.path.join(os.fspath(cache_dir),
                        f"oddshap_{key['name']}_{checkpoint.config_fingerprint(key):016x}.npz")


def load_game_set(name: str, seed: int = 0, explicands: int = 5, cache_dir=None,
                  train_steps: int | None = None) -> GameSet:
    """A game of ``GAMES`` for ``explicands`` explicands, with exact Shapley values.

    Args:
      name: one of ``GAMES``.
      seed: fixes the data, the model (training from ``jax.random.key(seed)``), the explicands
        and the SOUMs; the same arguments give an identical ``GameSet``.
      explicands: ``E >= 1`` (at most the number of data rows).
      cache_dir: directory of ``.npz`` caches keyed by name, seed, explicands, train_steps and
        ``DATA_VERSION`` (created if missing); None computes without caching.
      train_steps: Adam steps of an MLP game (None: ``TRAIN_STEPS[name]``; small values for
        smoke runs); ignored by tree and SOUM games.

    Returns:
      A ``GameSet``; see its fields.

    Raises:
      ValueError: naming the argument for an unknown name, a negative seed, ``explicands < 1``
        or above the rows of the data, or ``train_steps < 1``.
      RuntimeError: when ``jax_enable_x64`` is off.
    """
    _check_args(name, seed, explicands, train_steps)
    if name not in MLP_GAMES:
        train_steps = None  # no training: do not split the cache over it
    key = {"name": name, "seed": int(seed), "explicands": int(explicands),
           "train_steps": None if train_steps is None else int(train_steps),
           "version": DATA_VERSION}
    path = None if cache_dir is None else _cache_path(cache_dir, key)
    if path is not None and os.path.exists(path):
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
        if json.loads(str(arrays.pop("key"))) != key:
            raise ValueError(f"cache_dir: {path} holds another game set; delete it")
        return _build(name, arrays)
    arrays = _compute(name, int(seed), int(explicands), train_steps)
    if path is not None:
        os.makedirs(os.fspath(cache_dir), exist_ok=True)
        # write then rename, so a killed run never leaves a truncated cache file
        fd, tmp = tempfile.mkstemp(suffix=".npz", dir=os.fspath(cache_dir))
        with os.fdopen(fd, "wb") as f:
            np.savez(f, key=json.dumps(key, sort_keys=True), **arrays)
        os.replace(tmp, path)
    return _build(name, arrays)

