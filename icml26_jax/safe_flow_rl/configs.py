"""Configurations of the SafeFlowRL experiment: ``default`` and ``smoke``.

Use as ``--config=icml26_jax/safe_flow_rl/configs.py:smoke`` and override any field, e.g.
``--config.latent_budget=0.5``, ``--config.eps_sweep=0.1,0.25,0.5,1,inf``,
``--config.critic_steps=6000``, ``--config.num_candidates=16``.
"""

from __future__ import annotations

import ml_collections

VARIANTS = ("default", "smoke")
ENVS = ("point_robot", "corridor_run")
REFINERS = ("ordered", "gaussian")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.env = "point_robot"
    c.dataset_size = 100_000
    c.num_seeds = 3  # training seeds, vmapped
    c.hidden = 128
    c.batch_size = 256
    # FISOR critics (gamma, expectiles, Polyak, lr) and our step budgets [R].
    c.gamma = 0.99
    c.expectile_h = 0.9
    c.expectile_r = 0.9
    c.lr = 3e-4
    c.critic_steps = 12_000
    c.flow_steps = 6_000
    c.refiner_steps = 2_000  # per stage
    c.actor_steps = 3_000  # BC-All, BC-Safe, BC-Lag, FISOR-lite
    c.lag_lr = 0.005  # BC-Lag's dual-ascent step on lambda [R]
    c.chunk = 1_000  # checkpoint every chunk steps
    # Feasibility weights (FISOR).
    c.alpha_c = 5.0
    c.alpha_r = 3.0
    c.cost_ub = 150.0
    # Flow prior [R].
    c.n_coupling = 6
    c.s_max = 2.0
    c.prior_unweighted_coef = 0.1
    # Latent refiner [R]: eps fixed a priori, never tuned on evaluation seeds.
    c.refiner = "ordered"
    c.latent_budget = 0.5  # eps = eps_h + eps_r, split evenly
    c.eps_sweep = (0.1, 0.25, 0.5, 1.0, float("inf"))
    c.beta = 10.0
    c.margin_sd = 0.05  # m = margin_sd * sd_D(h)
    # Deployment and evaluation.
    c.num_candidates = 16
    # Selection margin [R]: a candidate counts as feasible when Q_h <= -m_sel. m_sel is chosen
    # per seed on validation starts (never the evaluation starts) from this grid, in units of
    # sd_D(h): the largest validation R_norm whose avoidable-start violation rate is at most
    # val_target (else the safest margin).
    c.select_margins_sd = (0.0, 0.05, 0.15, 0.3, 0.45, 0.6, 0.9)
    c.val_episodes = 100
    c.val_target = 0.05
    c.eval_episodes = 100
    c.kappa = 5.0
    c.seeds = ()  # e.g. 0,1,2: one run per seed in <workdir>/seed_<s> and a summary
    c.data_path = ""  # a DSRL-style .npz/.hdf5 of PointRobotHazard transitions (optional)

    if variant == "smoke":
        c.num_seeds = 1
        c.dataset_size = 20_000
        c.hidden = 64
        c.critic_steps = 1_500
        c.flow_steps = 1_000
        c.refiner_steps = 500
        c.actor_steps = 500
        c.chunk = 500
        c.eval_episodes = 20
        c.val_episodes = 20
    return c
