"""DSGD-HP: high-probability convergence of decentralized SGD (Armacki & Sayed, ICML 2026).

``dsgd.simulate`` runs DSGD over simulated users sharded on a ``(runs, users)`` mesh with one
``jax.shard_map`` around the whole scan; ``graphs``, ``problems``, ``gossip``, ``metrics`` and
``baselines`` are its parts; ``train.run`` is the experiment.
"""

from icml26_jax.dsgd_hp.baselines import (
    centralized_sgd,
    dense_reference_dsgd,
    gt_dsgd,
    noise_tensor,
    single_user_sgd,
)
from icml26_jax.dsgd_hp.dsgd import (
    DSGDState,
    Trace,
    constant_schedule,
    nonconvex_step_size,
    simulate,
    strongly_convex_schedule,
)
from icml26_jax.dsgd_hp.graphs import Graph, check_mixing, make_graph, metropolis_hastings, spectral_gap
from icml26_jax.dsgd_hp.metrics import TailFit, quantiles, slope_ci, tail_fit, transient_time
from icml26_jax.dsgd_hp.problems import Digits, Quadratic, digits, quadratic

__all__ = [
    "DSGDState", "Digits", "Graph", "Quadratic", "TailFit", "Trace", "centralized_sgd",
    "check_mixing", "constant_schedule", "dense_reference_dsgd", "digits", "gt_dsgd",
    "make_graph", "metropolis_hastings", "noise_tensor", "nonconvex_step_size", "quadratic",
    "quantiles", "simulate", "single_user_sgd", "slope_ci", "spectral_gap",
    "strongly_convex_schedule", "tail_fit", "transient_time",
]
