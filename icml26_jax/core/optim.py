"""optax helpers shared by every paper."""

from __future__ import annotations

import jax
import optax


def promotion_safe(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """``tx`` traced under standard dtype promotion.

    optax's Adam bias correction raises a Python float to an int32 step count, which
    ``jax_numpy_dtype_promotion='strict'`` (our test suite's setting) rejects; the context
    manager is thread-local and leaves the caller's setting untouched.
    """
    def init_fn(params):
        with jax.numpy_dtype_promotion("standard"):
            return tx.init(params)

    def update_fn(updates, state, params=None, **extra_args):
        with jax.numpy_dtype_promotion("standard"):
            return tx.update(updates, state, params, **extra_args)

    if isinstance(tx, optax.GradientTransformationExtraArgs):  # e.g. lbfgs (value, value_fn)
        return optax.GradientTransformationExtraArgs(init_fn, update_fn)
    return optax.GradientTransformation(init_fn, update_fn)
