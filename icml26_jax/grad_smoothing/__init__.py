"""Gradient Smoothing: depth-wise smoothing of block-wise optimiser updates (ICML 2026).

``depth_smoothing`` is an ``optax.GradientTransformation`` acting on the leading (depth)
axis of scanned block parameters; ``smoothed_optimizer`` places it after the base
optimiser's preconditioning (SGD momentum, Adam, Muon) and before weight decay and the
learning rate.
"""

from icml26_jax.grad_smoothing.baselines import base_optimizer, permuted_control
from icml26_jax.grad_smoothing.metrics import (adjacent_cka, adjacent_update_cosine,
                                               block_update_norms, linear_cka, steps_to_target)
from icml26_jax.grad_smoothing.model import ViT
from icml26_jax.grad_smoothing.transform import (default_block_filter, depth_smoothing,
                                                 muon_dimension_numbers, smoothed_optimizer,
                                                 smoothing_matrix, window_matrix)

__all__ = [
    "adjacent_cka", "adjacent_update_cosine", "base_optimizer", "block_update_norms",
    "default_block_filter", "depth_smoothing", "linear_cka", "muon_dimension_numbers",
    "permuted_control", "smoothed_optimizer", "smoothing_matrix", "steps_to_target",
    "ViT", "window_matrix",
]
