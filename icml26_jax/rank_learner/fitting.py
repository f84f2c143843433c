"""Early-stopped training shared by every learner (nuisances, DR-learner, rankers).

One replica's loop is a ``lax.while_loop`` over epochs that keeps the best-so-far params and a
patience counter; ``jax.vmap`` over replicas (seeds x methods) turns the predicate into "any
replica still running" and freezes the finished ones, so training ends when every replica has
stopped or after ``max_epochs`` (spec §Method, JAX shape).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from icml26_jax.core.optim import promotion_safe


class FitConfig(NamedTuple):
    """Static hyper-parameters of one fit (hashable, so it can be a jit static argument).

    Attributes:
      lr: Adam learning rate (5e-4 in the official code's experiments).
      weight_decay: L2 weight decay added to the gradient, as ``torch.optim.Adam`` (0).
      batch: rows (or pairs) per step (128).
      epochs: at most this many epochs (50).
      patience: stop after this many epochs without improvement (5).
    """

    lr: float = 5e-4
    weight_decay: float = 0.0
    batch: int = 128
    epochs: int = 50
    patience: int = 5

    def validate(self) -> "FitConfig":
        """Raises ``ValueError`` naming the offending field."""
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got lr={self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        for name in ("batch", "epochs", "patience"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {name}={getattr(self, name)}")
        return self


def optimizer(cfg: FitConfig) -> optax.GradientTransformation:
    """Adam with torch-style (coupled) weight decay, as the official code's optimiser."""
    if cfg.weight_decay:
        tx = optax.chain(optax.add_decayed_weights(cfg.weight_decay), optax.adam(cfg.lr))
    else:
        tx = optax.adam(cfg.lr)
    return promotion_safe(tx)


def masked_update(ok, new, old):
    """``new`` where ``ok`` (a scalar bool) else ``old``, leaf by leaf."""
    return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)


class History(NamedTuple):
    """Per-epoch validation score (NaN after stopping), per-epoch statistic of the epoch
    function, epochs run, and the best validation score (higher is better)."""

    val: jax.Array    # [max_epochs]
    stat: jax.Array   # [max_epochs]
    epochs: jax.Array  # []
    best: jax.Array   # []


def fit(params, key: jax.Array, epoch_fn: Callable, val_fn: Callable, cfg: FitConfig,
        min_delta: float):
    """Early-stopped training of one replica.

    Args:
      params: initial params pytree.
      key: PRNG key; epoch ``e`` uses ``fold_in(key, e)``.
      epoch_fn: ``epoch_fn(params, opt_state, key) -> (params, opt_state, stat)`` runs one
        epoch; ``stat`` is a scalar recorded per epoch.
      val_fn: ``val_fn(params) -> score`` to maximise (pass minus a loss).
      cfg: the :class:`FitConfig`.
      min_delta: an epoch improves on the best only if ``score > best + min_delta`` (the
        official code: 1e-6 for losses, 1e-9 for MSE, 1e-4 for the approximate AUTOC).

    Returns:
      ``(best_params, History)``.
    """
    tx = optimizer(cfg)
    E = cfg.epochs
    nan = jnp.full((E,), jnp.nan, jnp.float32)

    def cond(c):
        return (c["epoch"] < E) & (c["left"] > 0)

    def body(c):
        p, o, stat = epoch_fn(c["params"], c["opt"], jax.random.fold_in(key, c["epoch"]))
        v = jnp.asarray(val_fn(p), jnp.float32)
        better = v > c["best"] + min_delta
        return {"params": p, "opt": o, "epoch": c["epoch"] + 1,
                "best_params": masked_update(better, p, c["best_params"]),
                "best": jnp.where(better, v, c["best"]),
                "left": jnp.where(better, cfg.patience, c["left"] - 1),
                "val": c["val"].at[c["epoch"]].set(v),
                "stat": c["stat"].at[c["epoch"]].set(jnp.asarray(stat, jnp.float32))}

    init = {"params": params, "opt": tx.init(params), "epoch": jnp.zeros((), jnp.int32),
            "best_params": params, "best": jnp.full((), -jnp.inf, jnp.float32),
            "left": jnp.asarray(cfg.patience, jnp.int32), "val": nan, "stat": nan}
    c = jax.lax.while_loop(cond, body, init)
    return c["best_params"], History(c["val"], c["stat"], c["epoch"], c["best"])
