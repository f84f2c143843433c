"""Configurations of the simplicity-bias experiment: ``default`` and ``smoke``.

Use as ``--config=icml26_jax/simplicity_bias/configs.py:smoke`` and override any field, e.g.
``--config.parts=pairwise,cumulant``, ``--config.replicas=64``, ``--config.eta=0.5``,
``--config.cumulant.dims=8,16``.

Step sizes are delta = eta * eta_part * d^-q: q = 1 for the pair-wise spike (and the mixed
runs), q = 2 for the fourth-cumulant spike; ``eta`` scales every part at once (never a
per-d tuning, spec §Forbidden shortcuts).
"""

from __future__ import annotations

import math

import ml_collections

VARIANTS = ("default", "smoke")
PARTS = ("pairwise", "cumulant", "linear_budget", "correlated", "exponent", "images")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.parts = PARTS
    c.replicas = 32
    c.beta_u = 4.0
    c.beta_v = 4.0
    c.a = 1.0 / math.sqrt(2.0)  # VP: b = sqrt(1 - a^2)
    c.eta = 1.0  # global multiplier of every part's step size
    c.thr = 0.5  # escape threshold on the median |m|
    c.shard = True  # replicas sharded over the devices (core.mesh.runs_mesh)

    c.pairwise = ml_collections.ConfigDict(dict(
        dims=(32, 64, 128, 256), n_over_d=20, eta=1.0, q=1, records=200))
    # beta_u = 0 (pure cumulant spike), n up to n_over_d3 * d^3, early stop one d^3 after the
    # median |m_v| crossed thr; host checks every d^3 / 50 steps.
    c.cumulant = ml_collections.ConfigDict(dict(
        dims=(8, 12, 16, 24, 32), beta_u=0.0, beta_v=9.0, n_over_d3=8, eta=2.0, q=2,
        records=400, extra_d3=1.0, segment_d3=0.02))
    c.linear_budget = ml_collections.ConfigDict(dict(
        dims=(32, 64, 128, 256), n_over_d=100, eta=1.0, q=1, records=200))
    c.correlated = ml_collections.ConfigDict(dict(
        dims=(64, 128, 256), n_over_d=150, eta=0.25, q=1, records=200,
        latents=("independent", "nonlinear"),
        sign_n_over_d=50, sign_eta=1.0, sign_tau=0.0))
    c.exponent = ml_collections.ConfigDict(dict(
        m_min=0.02, m_max=0.2, points=10, m_u_fixed=0.9, tsodyks_rho=0.7))
    c.images = ml_collections.ConfigDict(dict(
        epochs=400, batch=64, lr=1e-3, hidden=256, b_levels=(0.2, 0.4, 0.6, 0.8),
        n_checkpoints=60, claim_b=(0.6, 0.8),
        # Real-data path (optional): a prepared TFDS image set instead of the digits.
        tfds_name="", tfds_data_dir="", tfds_size=16, tfds_limit=5000))

    if variant == "smoke":
        c.replicas = 16
        c.parts = ("pairwise", "linear_budget", "exponent", "images")
        c.pairwise.dims = (16, 32, 64)
        c.linear_budget.dims = (32, 64)
        c.images.epochs = 120
    return c
