"""FLOPs of the backbone and training steps for a FLOP budget (spec §Method, FLOPs).

F_fwd per sequence is XLA's ``cost_analysis()["flops"]`` of the jitted forward with the layer
scan fully unrolled: XLA counts a scan/while body once, so the scanned model undercounts by
about n_layer (:func:`forward_flops` refuses it). The output projection is included, as in
the paper's profiler numbers. A training step costs 3 F_fwd per sequence (forward + backward),
so a budget C buys C / (3 F_fwd B) steps at batch B.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26_jax.discrete_diffusion import model as model_lib
from icml26_jax.lm.transformer import TransformerConfig


def compiled_flops(graphdef, params, batch: int, length: int) -> float:
    """XLA's FLOP count of one forward of ``batch`` sequences of ``length`` tokens (whatever
    the layer scan; see :func:`forward_flops`)."""
    tokens = jnp.zeros((batch, length), jnp.int32)

    def fwd(p, tok):
        return model_lib.logits_fn(graphdef, p, tok)

    cost = jax.jit(fwd).lower(params, tokens).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jax returned one dict per device
        cost = cost[0]
    return float(cost["flops"])


def forward_flops(graphdef, params, batch: int, length: int, cfg: TransformerConfig) -> float:
    """F_fwd per sequence, measured on the unrolled forward.

    Args:
      graphdef, params: a model built with ``unroll=True`` (``model.init(..., unroll=True)``).
      batch, length: the shapes to count at (the count is divided by ``batch``).
      cfg: its :class:`TransformerConfig` (checked: ``unroll_layers`` must be set).

    Raises:
      ValueError: for a scanned (not unrolled) model, whose count is ~1/n_layer of the truth.
    """
    if not cfg.unroll_layers and cfg.num_layers > 1:
        raise ValueError("forward_flops needs the unrolled forward (unroll_layers=True): XLA "
                         f"counts a scanned layer body once, ~1/{cfg.num_layers} of the truth")
    return compiled_flops(graphdef, params, batch, length) / batch


def analytic_flops(cfg: TransformerConfig, length: int) -> float:
    """Per-sequence forward FLOPs 2 N_matmul + 4 n_layer L d per token (Kaplan et al., 2020):
    N_matmul = 12 d^2 n_layer (attention and MLP) + d V (output projection)."""
    d, nl, v = cfg.d_model, cfg.num_layers, cfg.vocab_size
    n_matmul = 12 * d * d * nl + d * v
    return float(length * (2 * n_matmul + 4 * nl * length * d))


def steps_for_budget(C: float, f_fwd: float, batch: int) -> int:
    """Training steps a budget of C FLOPs buys: floor(C / (3 F_fwd B))."""
    if not (C > 0 and f_fwd > 0 and batch >= 1):
        raise ValueError(f"need C > 0, f_fwd > 0, batch >= 1, got C={C}, f_fwd={f_fwd}, "
                         f"batch={batch}")
    return int(C // (3.0 * f_fwd * batch))
