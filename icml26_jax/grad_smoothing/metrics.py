"""Depth-structure metrics of Gradient Smoothing: linear CKA, update cosines and norms.

Linear CKA (Kornblith et al., 2019, https://arxiv.org/abs/1905.00414): for centred
representations X [N, d1], Y [N, d2],
``CKA = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)``, in [0, 1], invariant to orthogonal
transforms and isotropic scaling of either side.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.grad_smoothing.transform import BLOCKS_KEY, _path_names


def linear_cka(x: jax.Array, y: jax.Array) -> jax.Array:
    """Linear CKA of ``x [N, d1]`` and ``y [N, d2]`` (rows are the same N examples)."""
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"linear_cka needs x [N, d1] and y [N, d2] with the same N, got "
                         f"{x.shape} and {y.shape}")
    x = x.astype(jnp.float32)
    y = y.astype(jnp.float32)
    x = x - x.mean(0, keepdims=True)
    y = y - y.mean(0, keepdims=True)
    hsic = jnp.sum(jnp.square(y.T @ x))
    nx = jnp.sqrt(jnp.sum(jnp.square(x.T @ x)))
    ny = jnp.sqrt(jnp.sum(jnp.square(y.T @ y)))
    return hsic / jnp.maximum(nx * ny, 1e-30)


def adjacent_cka(block_outputs: jax.Array) -> jax.Array:
    """CKA between the outputs of neighbouring blocks ``[L - 1]``.

    Args:
      block_outputs: ``[L, N, d]`` (or ``[L, B, T, d]``, flattened to N = B T).
    """
    h = block_outputs.reshape(block_outputs.shape[0], -1, block_outputs.shape[-1])
    return jax.vmap(linear_cka)(h[:-1], h[1:])


def _block_leaves(tree) -> list:
    out = [x for p, x in jax.tree_util.tree_leaves_with_path(tree)
           if BLOCKS_KEY in _path_names(p)]
    if not out:
        raise ValueError("the tree has no leaves under 'blocks'")
    return out


def _flat_blocks(tree) -> jax.Array:
    """All block leaves of ``tree`` as ``[L, p]`` (block l's parameters concatenated)."""
    leaves = _block_leaves(tree)
    L = leaves[0].shape[0]
    return jnp.concatenate([x.reshape(L, -1).astype(jnp.float32) for x in leaves], axis=1)


def adjacent_update_cosine(params, init_params) -> jax.Array:
    """Cosine between ΔW_l = W_l(t) - W_l(0) of neighbouring blocks ``[L - 1]``."""
    d = _flat_blocks(params) - _flat_blocks(init_params)
    n = jnp.linalg.norm(d, axis=1)
    dots = jnp.sum(d[:-1] * d[1:], axis=1)
    return dots / jnp.maximum(n[:-1] * n[1:], 1e-30)


def block_update_norms(updates) -> jax.Array:
    """Norm of each block's update ``[L]`` (all leaves of a block jointly)."""
    return jnp.linalg.norm(_flat_blocks(updates), axis=1)


def steps_to_target(curve_steps: Sequence[int], curve_loss: Sequence[float],
                    target: float) -> int | None:
    """The first logged step whose loss is <= ``target``; None if the curve never gets there."""
    steps = np.asarray(curve_steps)
    loss = np.asarray(curve_loss, np.float64)
    if steps.shape != loss.shape:
        raise ValueError(f"curve_steps {steps.shape} and curve_loss {loss.shape} differ")
    hit = np.nonzero(loss <= target)[0]
    return int(steps[hit[0]]) if hit.size else None
