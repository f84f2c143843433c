"""Baselines of Gradient Smoothing: the base optimisers from optax and the permuted control.

The base optimisers run from their real library (``optax.adamw``, ``optax.sgd``,
``optax.contrib.muon``); experiments run them as ``alpha = 0`` of
:func:`transform.smoothed_optimizer`, which the tests pin to these to < 1e-7.
The permuted-depth control applies the same ``S_a`` along a fixed random order of the
blocks, ``S_pi = P^T S_a P``: the same shrinkage spectrum, the wrong neighbours.
"""

from __future__ import annotations

import numpy as np
import optax

from icml26_jax.core.optim import promotion_safe
from icml26_jax.grad_smoothing import transform


def permuted_control(depth: int, seed: int) -> np.ndarray:
    """A fixed random permutation pi of the ``depth`` blocks (seeded), re-drawn (up to 100
    times; the draw with the fewest such pairs is kept) until no two blocks adjacent in
    depth are adjacent in the permuted order, so the control's windows mix non-neighbours."""
    if depth < 2:
        raise ValueError(f"depth must be >= 2, got {depth}")
    rng = np.random.default_rng(seed)
    best, best_bad = None, None
    for _ in range(100):
        perm = rng.permutation(depth)
        bad = int(np.sum(np.abs(np.diff(perm)) == 1))
        if best_bad is None or bad < best_bad:
            best, best_bad = perm, bad
        if bad == 0:
            break
    return best


def base_optimizer(name: str, learning_rate, *, weight_decay: float = 0.1, wd_mask=None,
                   b1: float = 0.9, b2: float = 0.95, eps: float = 1e-8,
                   momentum: float = 0.9, nesterov: bool = False, muon_beta: float = 0.95,
                   adam_lr=None) -> optax.GradientTransformation:
    """optax's own optimiser ``name`` (``adamw`` | ``sgd`` | ``muon``), configured like
    :func:`transform.smoothed_optimizer` (Muon with scanned-kernel dimension numbers)."""
    mask = transform.default_wd_mask if wd_mask is None else wd_mask
    if name == "adamw":
        tx = optax.adamw(learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                         mask=mask)
    elif name == "sgd":
        # optax.sgd has no weight decay; decoupled decay as in AdamW goes between the
        # momentum and the learning rate (with weight_decay=0 this is optax.sgd exactly).
        if weight_decay:
            tx = optax.chain(optax.trace(decay=momentum, nesterov=nesterov),
                             optax.add_decayed_weights(weight_decay, mask),
                             optax.scale_by_learning_rate(learning_rate))
        else:
            tx = optax.sgd(learning_rate, momentum=momentum, nesterov=nesterov)
    elif name == "muon":
        tx = optax.contrib.muon(learning_rate, beta=muon_beta, eps=eps,
                                weight_decay=weight_decay, weight_decay_mask=mask,
                                adam_b1=b1, adam_b2=b2, adam_learning_rate=adam_lr,
                                muon_weight_dimension_numbers=transform.muon_dimension_numbers)
    else:
        raise ValueError(f"name={name!r}; allowed: {', '.join(transform.BASES)}")
    return promotion_safe(tx)
