"""The MLP of every learner (nuisances, DR-learner, rankers): d -> hidden -> 1, ReLU."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def _torch_linear(d_in: int, d_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    # PyTorch's nn.Linear default, as in the official code: weight and bias uniform in
    # +-1/sqrt(fan_in) (kaiming_uniform with a = sqrt(5) gives that bound for the weight).
    bound = 1.0 / np.sqrt(d_in)
    uniform = lambda key, shape, dtype=jnp.float32: jax.random.uniform(  # noqa: E731
        key, shape, dtype, -bound, bound)
    return nnx.Linear(d_in, d_out, kernel_init=uniform, bias_init=uniform, rngs=rngs)


class MLP(nnx.Module):
    """Two-layer perceptron ``d_in -> hidden -> d_out`` with a ReLU, initialised as PyTorch's
    ``nn.Linear`` (the official code's ``ClassificationHead`` / ``RegressionHead``).

    Returns ``[..., d_out]``, or ``[...]`` when ``d_out == 1`` (a score per row).
    """

    def __init__(self, d_in: int, hidden: int = 64, d_out: int = 1, *, rngs: nnx.Rngs):
        self.hidden = _torch_linear(d_in, hidden, rngs)
        self.out = _torch_linear(hidden, d_out, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.out(jax.nn.relu(self.hidden(x)))
        return y[..., 0] if y.shape[-1] == 1 else y


def init_stack(seeds: Sequence[int], d_in: int, hidden: int = 64):
    """``(graphdef, params)`` of ``len(seeds)`` MLPs stacked on a leading replica axis,
    replica ``r`` initialised from ``nnx.Rngs(seeds[r])``."""
    if d_in < 1 or hidden < 1:
        raise ValueError(f"d_in and hidden must be >= 1, got d_in={d_in}, hidden={hidden}")
    graphdef, ps = None, []
    for s in seeds:
        g, p = nnx.split(MLP(d_in, hidden, rngs=nnx.Rngs(int(s))), nnx.Param)
        graphdef = graphdef or g
        ps.append(p)
    return graphdef, jax.tree.map(lambda *a: jnp.stack(a), *ps)


def apply(graphdef, params, x: jax.Array) -> jax.Array:
    """The score ``[n]`` of one MLP (unstacked ``params``) at ``x [n, d]``."""
    return nnx.merge(graphdef, params)(x)
