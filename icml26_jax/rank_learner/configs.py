"""Configurations of the Rank-Learner experiment: ``default`` and ``smoke``.

Use as ``--config=icml26_jax/rank_learner/configs.py:smoke`` and override any field with
``--config.<field>=...`` (e.g. ``--config.kappa=0.25``, ``--config.num_seeds=5``).

Hyper-parameters are those of the official code (kappa 0.75, hidden 64, Adam 5e-4 without
weight decay, batch 128, 10 % of the ordered pairs per epoch, <= 50 epochs, patience 5).
"""

from __future__ import annotations

import ml_collections

VARIANTS = ("default", "smoke")
NUISANCE = ("learned", "oracle_perturbed", "all")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.num_seeds = 10  # seeds seed .. seed + num_seeds - 1, vmapped
    c.dgp = "synthetic"  # E1 (and, for synthetic, E2) data: synthetic | randhie | fair
    c.semisynthetic = ("randhie", "fair")  # E1 repeated on these
    # learned: E1 (learned nuisances); oracle_perturbed: E2; all: both.
    c.nuisance = "all"
    c.n_nuis = 1000
    c.n_stage2 = 1000
    c.n_test = 1000
    c.val_frac = 0.2
    c.crossfit = 1  # 1 = sample splitting (the official code); K >= 2 = K-fold cross-fitting
    # Stage 2 and every MLP fit.
    c.kappa = 0.75
    c.hidden = 64
    c.lr = 5e-4
    c.weight_decay = 0.0
    c.batch = 128
    c.pair_frac = 0.1
    c.epochs = 50  # stage 2 (rankers, DR-learner)
    c.nuisance_epochs = 50  # stage 1 (a few batches per epoch: cheap at any scale)
    c.patience = 5
    c.clip_labels = True
    c.prop_clip = 1e-3
    # E2: oracle nuisances perturbed along b(x) = v(x) + 0.5 x0.
    c.deltas = (0.0, 0.5, 1.0, 2.0)  # mode "mu"
    c.perturb = ("mu", "both")
    c.both_deltas = (1.0,)  # mode "both"
    c.bootstrap = 1000  # paired bootstrap resamples of Rank - baseline

    if variant == "smoke":
        c.num_seeds = 3
        c.n_nuis = c.n_stage2 = c.n_test = 500
        c.epochs = 10  # the 10 % pair epochs of stage 2 are the cost; stage 1 keeps 50
        c.semisynthetic = ()
        c.deltas = (0.0, 1.0)
        c.perturb = ("mu",)
    return c
