"""Stage 1: nuisance models (propensity pi, outcome means mu0 and mu1), and the pointwise
early-stopped MLP fit that the DR-learner baseline reuses.

One replica is one MLP fitted on the rows where ``w_train`` is set and early-stopped on the
validation loss over the rows where ``w_val`` is set. Replicas of different sizes (each
treatment arm of each seed has its own row count) share one program: rows are visited in a
random order with the masked rows last, and batches past a replica's row count are skipped.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.rank_learner import fitting, model
from icml26_jax.rank_learner.data import Nuisances

MSE, BCE = 0, 1  # ``kind`` of a pointwise fit


def _loss(pred, y, kind):
    # Both branches are finite for any y, so where() is gradient-safe.
    return jnp.where(kind == BCE, optax.sigmoid_binary_cross_entropy(pred, y), (pred - y) ** 2)


def fit_pointwise(key: jax.Array, params, graphdef, x: jax.Array, y: jax.Array,
                  w_train: jax.Array, w_val: jax.Array, kind, cfg: fitting.FitConfig):
    """Early-stopped fit of one MLP (vmappable over replicas).

    Mirrors the official ``train_propensity`` / ``train_response`` / ``train_cate``: Adam,
    shuffled mini-batches of ``cfg.batch`` rows per epoch (the last one partial), mean loss
    per batch, early stopping on the mean validation loss with min_delta 1e-6.

    Args:
      key: PRNG key (batch order).
      params: initial MLP params.
      graphdef: the MLP's graphdef (static).
      x: covariates [n, d]; y: targets [n] (0/1 for BCE).
      w_train, w_val: bool masks [n] of the training and validation rows.
      kind: ``MSE`` (0) or ``BCE`` (1, logits).
      cfg: :class:`fitting.FitConfig`.

    Returns:
      ``(best_params, fitting.History)`` with History.val = minus the validation loss.
    """
    n = x.shape[0]
    B = cfg.batch
    nb = -(-n // B)
    tx = fitting.optimizer(cfg)
    count = jnp.sum(w_train.astype(jnp.int32))
    wv = w_val.astype(x.dtype)

    def batch_loss(p, idx, w):
        pred = model.apply(graphdef, p, x[idx])
        return jnp.sum(w * _loss(pred, y[idx], kind)) / jnp.maximum(jnp.sum(w), 1.0)

    def epoch(p, o, k):
        u = jax.random.uniform(k, (n,))
        order = jnp.argsort(jnp.where(w_train, u, 2.0))
        order = jnp.pad(order, (0, nb * B - n))

        def step(carry, b):
            p, o, tot = carry
            idx = jax.lax.dynamic_slice(order, (b * B,), (B,))
            w = ((b * B + jnp.arange(B)) < count).astype(x.dtype)
            loss, g = jax.value_and_grad(batch_loss)(p, idx, w)
            upd, o2 = tx.update(g, o, p)
            ok = jnp.sum(w) > 0
            p2 = optax.apply_updates(p, upd)
            return (fitting.masked_update(ok, p2, p), fitting.masked_update(ok, o2, o),
                    tot + loss * jnp.sum(w)), None

        (p, o, tot), _ = jax.lax.scan(step, (p, o, jnp.zeros((), x.dtype)), jnp.arange(nb))
        return p, o, tot / jnp.maximum(count, 1).astype(x.dtype)

    def val(p):
        pred = model.apply(graphdef, p, x)
        return -jnp.sum(wv * _loss(pred, y, kind)) / jnp.maximum(jnp.sum(wv), 1.0)

    return fitting.fit(params, key, epoch, val, cfg, min_delta=1e-6)


def _fit_one(static, seed, params, x, y, w_train, w_val, kind):
    graphdef, cfg = static
    key = jax.random.fold_in(jax.random.key(seed), 1)
    return fit_pointwise(key, params, graphdef, x, y, w_train, w_val, kind, cfg)


def fit_stack(seeds, x, y, w_train, w_val, kind, cfg: fitting.FitConfig, hidden: int = 64,
              mesh=None):
    """Fits ``R`` independent pointwise MLPs at once (replicas on the leading axis).

    Replica ``r`` is initialised and shuffled from ``seeds[r]``; the replicas are sharded over
    ``mesh`` (default ``core.mesh.runs_mesh(R)``), padded to a multiple of its size.

    Args:
      seeds: ``R`` integer seeds.
      x: [R, n, d]; y, w_train, w_val: [R, n]; kind: [R] (``MSE``/``BCE``).

    Returns:
      ``(graphdef, params [R', ...], fitting.History [R, ...])``: the params stay on the
      devices, sharded, with the padded leading size ``R' = core.mesh.padded_size(R, mesh)``
      (pass them to :func:`predict_stack` as they are; ``core.mesh.to_host(params, R)``
      reads them); the history is gathered to host NumPy arrays.
    """
    cfg.validate()
    x = np.asarray(x, np.float32)
    seeds = np.asarray(seeds, np.int32)
    graphdef, params = model.init_stack(seeds, x.shape[-1], hidden)
    mesh = mesh or mesh_lib.runs_mesh(len(seeds))
    params, hist = mesh_lib.map_runs(
        mesh, _fit_one, (graphdef, cfg), seeds, params, x, np.asarray(y, np.float32),
        np.asarray(w_train, bool), np.asarray(w_val, bool), np.asarray(kind, np.int32))
    return graphdef, params, mesh_lib.to_host(hist, len(seeds))


def predict(graphdef, params, x) -> jax.Array:
    """Predictions of one MLP (``params`` unstacked) at ``x [n, d]``: ``[n]``."""
    return model.apply(graphdef, params, jnp.asarray(x, jnp.float32))


def _predict_one(graphdef, params, x):
    return model.apply(graphdef, params, x)


def predict_stack(graphdef, params, x, mesh=None) -> np.ndarray:
    """Predictions of stacked MLPs at ``x [R, n, d]``: host ``[R, n]``.

    ``params`` are ``[R, ...]`` (host or device) or the padded device params of
    :func:`fit_stack` / ``ranking.train_rankers`` on the same ``mesh`` (default
    ``core.mesh.runs_mesh(R)``, over which the replicas are sharded)."""
    x = np.asarray(x, np.float32)
    R = x.shape[0]
    mesh = mesh or mesh_lib.runs_mesh(R)
    return mesh_lib.to_host(mesh_lib.map_runs(mesh, _predict_one, graphdef, params, x), R)


class NuisanceFit(NamedTuple):
    """Stacked fitted nuisance MLPs of ``S`` seeds: ``params`` rows are
    [pi of seeds 0..S-1, mu0 of seeds 0..S-1, mu1 of seeds 0..S-1]."""

    graphdef: object
    params: object
    history: fitting.History

    def predict(self, x) -> Nuisances:
        """Nuisances at ``x [S, n, d]`` (pi as a probability): each [S, n]."""
        S = np.asarray(x).shape[0]
        raw = predict_stack(self.graphdef, self.params, np.concatenate([x, x, x]))
        pi = 1.0 / (1.0 + np.exp(-raw[:S]))
        return Nuisances(raw[S:2 * S], raw[2 * S:], pi.astype(np.float32))


def fit_nuisances(seeds, x, t, y, w_train, w_val, cfg: fitting.FitConfig, hidden: int = 64,
                  mesh=None) -> NuisanceFit:
    """Stage 1 for ``S`` seeds in one program: pi (BCE on all rows), mu0 (MSE on T = 0),
    mu1 (MSE on T = 1), each early-stopped on its own validation rows.

    Args:
      seeds: ``S`` seeds (the three models of seed ``s`` use seeds ``3s, 3s+1, 3s+2``).
      x: [S, n, d]; t, y: [S, n]; w_train, w_val: bool [S, n] (training / validation rows).
    """
    t = np.asarray(t) > 0.5
    w_train, w_val = np.asarray(w_train, bool), np.asarray(w_val, bool)
    rep = lambda a: np.concatenate([a, a, a])  # noqa: E731
    targets = np.concatenate([t.astype(np.float32), y, y])
    wt = np.concatenate([w_train, w_train & ~t, w_train & t])
    wv = np.concatenate([w_val, w_val & ~t, w_val & t])
    kind = np.repeat([BCE, MSE, MSE], len(seeds))
    init = [3 * int(s) + k for k in range(3) for s in seeds]
    g, p, h = fit_stack(init, rep(np.asarray(x, np.float32)), targets, wt, wv, kind, cfg, hidden,
                        mesh)
    return NuisanceFit(g, p, h)


def _split_val(rng: np.random.Generator, rows: np.ndarray, val_frac: float):
    val = rng.choice(rows, size=int(val_frac * len(rows)), replace=False)
    w_val = np.zeros(len(rows), bool)
    w_val[np.searchsorted(rows, np.sort(val))] = True
    return ~w_val, w_val


def _first(params):
    # Replica 0 of padded, sharded params, as (unsharded) device arrays.
    return jax.tree.map(lambda a: jnp.asarray(a[0]), mesh_lib.to_host(params, 1))


def fit_propensity(key_seed: int, x, t, cfg: fitting.FitConfig = fitting.FitConfig(),
                   val_frac: float = 0.2, hidden: int = 64):
    """One propensity MLP (BCE with logits) on ``x [n, d]``, ``t [n]``; ``val_frac`` of the
    rows (drawn with ``key_seed``) early-stop it. Returns ``(graphdef, params)``; the
    propensity is ``sigmoid(predict(graphdef, params, x))``."""
    n = len(t)
    w_tr, w_va = _split_val(np.random.default_rng(key_seed), np.arange(n), val_frac)
    g, p, _ = fit_stack([key_seed], np.asarray(x)[None], np.asarray(t)[None], w_tr[None],
                        w_va[None], [BCE], cfg, hidden)
    return g, _first(p)


def fit_outcome(key_seed: int, x, y, cfg: fitting.FitConfig = fitting.FitConfig(),
                val_frac: float = 0.2, hidden: int = 64):
    """One outcome MLP (MSE) on ``x [n, d]``, ``y [n]`` (pass one treatment arm's rows);
    returns ``(graphdef, params)``."""
    n = len(y)
    w_tr, w_va = _split_val(np.random.default_rng(key_seed), np.arange(n), val_frac)
    g, p, _ = fit_stack([key_seed], np.asarray(x)[None], np.asarray(y)[None], w_tr[None],
                        w_va[None], [MSE], cfg, hidden)
    return g, _first(p)


def crossfit(seed, x, t, y, k: int, cfg: fitting.FitConfig = fitting.FitConfig(),
             val_frac: float = 0.2, hidden: int = 64, mesh=None):
    """K-fold cross-fitted nuisances: the prediction at every row comes from models fitted
    on the other ``k - 1`` folds (each split ``1 - val_frac`` / ``val_frac`` for early
    stopping). The fold fits of every seed run as one stacked program.

    Args:
      seed: an int (then ``x`` is [n, d] and ``t``, ``y`` are [n]) or a sequence of ``S``
        ints (then ``x`` is [S, n, d], ``t``, ``y`` [S, n]): seeds of the fold assignment and
        of the models.
      k: number of folds (>= 2; ``k = 1`` is the repository's sample splitting, done by
        :func:`fit_nuisances` on a separate split).

    Returns:
      ``(Nuisances, NuisanceFit)``: the out-of-fold nuisances at the rows ([n] or [S, n])
      and the fold fits, stacked as in :func:`fit_nuisances` with replica ``s k + f`` the fit
      of seed ``s`` without fold ``f``.
    """
    if int(k) < 2:
        raise ValueError(f"crossfit needs k >= 2 folds, got k={k}")
    single = np.ndim(seed) == 0
    seeds = [int(seed)] if single else [int(s) for s in seed]
    x, t, y = (np.asarray(a, np.float32) for a in (x, t, y))
    if single:
        x, t, y = x[None], t[None], y[None]
    S, n = t.shape
    if n < 2 * k:
        raise ValueError(f"crossfit with k={k} needs at least {2 * k} rows, got {n}")
    folds, w_tr, w_va = [], [], []
    for s in seeds:
        rng = np.random.default_rng(s)
        fold = rng.permutation(np.arange(n) % k)
        folds.append(fold)
        for f in range(k):
            rows = np.flatnonzero(fold != f)
            tr, va = _split_val(rng, rows, val_frac)
            a, b = np.zeros(n, bool), np.zeros(n, bool)
            a[rows[tr]], b[rows[va]] = True, True
            w_tr.append(a)
            w_va.append(b)
    rep = lambda a: np.repeat(a, k, axis=0)  # noqa: E731  replicas (seed, fold)
    fit_ = fit_nuisances([s * 1000 + f for s in seeds for f in range(k)], rep(x), rep(t),
                         rep(y), np.stack(w_tr), np.stack(w_va), cfg, hidden, mesh)
    pred = fit_.predict(rep(x))
    idx = np.arange(S)[:, None] * k + np.stack(folds)  # the replica that left each row out
    pick = lambda a: a[idx, np.arange(n)]  # noqa: E731  [S k, n] -> [S, n]
    out = Nuisances(pick(pred.mu0), pick(pred.mu1), pick(pred.pi))
    return (Nuisances(*(a[0] for a in out)) if single else out), fit_
