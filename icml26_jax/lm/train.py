"""Pure LM loss / train / eval steps over a split NNX model.

At the jit boundary a model is split once, ``graphdef, params, rest = nnx.split(model,
nnx.Param, ...)``, and every function here takes ``params`` (what the optimizer updates) and
``rest`` (other variables, e.g. position-encoder constants) as pytrees. Nothing is jitted
here: callers ``jax.jit`` (and ``jax.vmap`` over arms, seeds or replicas) the step once.

A batch is a dict with ``tokens`` int ``[B, T]``, ``targets`` int ``[B, T]`` (the token that
position t must predict) and ``mask`` float ``[B, T]`` (which positions count); optional
``positions [B, T]``, ``cond [B]`` and ``attention_mask [B, T, T]`` are passed to the model.

Stacked replicas (arms x seeds x learning rates) are placed on a ``core.mesh.runs_mesh``
with ``core.mesh.shard_replicas``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26_jax.core.optim import promotion_safe

_MODEL_KEYS = ("positions", "cond", "attention_mask")


def next_token_batch(tokens) -> dict:
    """Language-model batch from token rows ``[B, T+1]``: predict ``tokens[:, 1:]``."""
    tokens = np.asarray(tokens) if not isinstance(tokens, jax.Array) else tokens
    xp = jnp if isinstance(tokens, jax.Array) else np
    return {"tokens": tokens[:, :-1], "targets": tokens[:, 1:],
            "mask": xp.ones(tokens[:, 1:].shape, xp.float32)}


def token_nll(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Per-token negative log-likelihood ``[B, T]`` (float32)."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """``sum(x mask) / max(sum(mask), 1)``."""
    return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def forward(graphdef, params, rest, batch: dict, **kw):
    """Merges the model and returns its logits ``[B, T, V]`` (and intermediates if asked)."""
    model = nnx.merge(graphdef, params, rest)
    extra = {k: batch[k] for k in _MODEL_KEYS if k in batch}
    return model(batch["tokens"], **extra, **kw)


def loss_fn(graphdef, params, rest, batch: dict):
    """Masked mean cross-entropy and ``{"loss", "accuracy"}`` metrics of one batch."""
    logits = forward(graphdef, params, rest, batch)
    mask = batch["mask"].astype(jnp.float32)
    loss = masked_mean(token_nll(logits, batch["targets"]), mask)
    correct = (jnp.argmax(logits, -1) == batch["targets"]).astype(jnp.float32)
    return loss, {"loss": loss, "accuracy": masked_mean(correct, mask)}


def make_train_step(graphdef, optimizer: optax.GradientTransformation,
                    loss: Callable | None = None, *,
                    grad_transform: Callable | None = None):
    """``step(params, rest, opt_state, batch) -> (params, opt_state, metrics)``, pure.

    Args:
      graphdef: from ``nnx.split``.
      optimizer: an optax transformation over ``params``.
      loss: ``loss(graphdef, params, rest, batch) -> (scalar, metrics)`` (default
        :func:`loss_fn`).
      grad_transform: optional ``grads -> grads`` applied before the optimizer (e.g. tying
        parameters across layers by summing their gradients).
    """
    loss = loss or loss_fn
    optimizer = promotion_safe(optimizer)

    def step(params, rest, opt_state, batch):
        (_, metrics), grads = jax.value_and_grad(
            lambda p: loss(graphdef, p, rest, batch), has_aux=True)(params)
        if grad_transform is not None:
            grads = grad_transform(grads)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        metrics = dict(metrics, grad_norm=optax.tree.norm(grads))
        return params, opt_state, metrics

    return step


def eval_step(graphdef, params, rest, batch: dict) -> dict:
    """Sums over a batch: ``nll``, ``correct``, ``count`` (masked positions) and per-position
    ``nll_by_pos [T]`` / ``count_by_pos [T]``, so that results of many batches add up."""
    logits = forward(graphdef, params, rest, batch)
    mask = batch["mask"].astype(jnp.float32)
    nll = token_nll(logits, batch["targets"]) * mask
    correct = (jnp.argmax(logits, -1) == batch["targets"]).astype(jnp.float32) * mask
    return {"nll": jnp.sum(nll), "correct": jnp.sum(correct), "count": jnp.sum(mask),
            "nll_by_pos": jnp.sum(nll, 0), "correct_by_pos": jnp.sum(correct, 0),
            "count_by_pos": jnp.sum(mask, 0)}
