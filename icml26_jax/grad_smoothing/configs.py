"""Configurations of the Gradient Smoothing experiment: ``default``, ``smoke``, ``full``,
``gpu``.

Use as ``--config=icml26_jax/grad_smoothing/configs.py:smoke``; override any field with
``--config.<field>=...`` (e.g. ``--config.alpha=0.4``, ``--config.lrs=1e-3,2e-3``).

Budget (spec §Experiment: time 20 steps first, lower the step count for all arms if the
default would exceed 10 minutes; recorded here before any comparison ran). On 2 cores with
8 simulated devices, one step of the stage-1 program (6 replicas, sharded over 6 devices)
takes ~0.55 s and of the stage-2 program (15 replicas over 5 devices) ~1.3 s, evaluation
included, against the spec's ~1 s per 21 replica-steps: 500 steps would take ~15.5 min.
The default therefore trains **300 steps** (~9.5 min); ``--config.steps=500`` is the
spec's protocol for a bigger machine.

``full`` (spec: ~1.5 h on 2 cores; measured here before any comparison, 20 steps of each
program at depth 16, d_model 48): one step costs ~3.9 s for 15 AdamW or Muon replicas,
~1.6 s for 6, and ~2.1 s for 15 replicas at depth 8, so one step of all three LM protocols
(AdamW and Muon with the alpha x mode selection, AdamW at depth 8) costs ~20 s, and a
ViT epoch of the 26 digit replicas ~28 s. The spec's 500 steps and 150 epochs would take
~4 h; ``full`` therefore trains **200 LM steps and 25 ViT epochs** (~80 min), the same for
every arm. ``--config.steps=500 --config.full.vit.epochs=150`` is the spec's protocol.

``gpu`` (one H100, <= 20 min by ``core.timing``'s planning model; README "On an
accelerator"): the default protocol (claims 1-5) with the compute the default lacks on 2
cores: 5000 steps of depth-16, d_model-128 models (measured, layers unrolled: 257 GFLOP per
step of the 6 stage-1 replicas, 643 of the 15 stage-2 replicas; planned 3.3 min).
"""

from __future__ import annotations

import ml_collections

VARIANTS = ("default", "smoke", "full", "gpu")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.base = "adamw"  # sgd | adamw | muon
    c.alpha = 0.2
    c.mode = "plain"  # plain | norm | dir
    c.radius = 1
    c.depth = 8
    c.model = dict(d_model=32, num_heads=4, mlp_ratio=4)
    c.seq_len = 64
    c.batch_size = 32
    c.steps = 300
    c.log_every = 25  # steps per compiled chunk; metrics and a checkpoint after each
    c.lrs = (1e-3, 2e-3, 4e-3)
    c.selection_seed = 100
    c.selection_seeds = (100, 101)  # full: alpha x mode selection
    c.eval_seeds = (0, 1, 2, 3, 4)
    c.opt = dict(b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, clip=1.0, warmup_frac=0.05,
                 final_lr_frac=0.1, momentum=0.9, muon_beta=0.95, adam_lr=2e-3)
    # Training batches drawn on device by lm.hmm.sample_jax from (seed, step) (issue 43);
    # the previous protocol used the NumPy sampler.
    c.hmm = dict(num_states=128, vocab_size=64, num_successors=4, num_emissions=8,
                 concentration=0.5, seed=0)
    c.val_size = 256
    c.probe_size = 64
    c.timing_steps = 50
    # Used by the ``full`` variant only (spec §Experiment, full).
    c.full = dict(alphas=(0.1, 0.2, 0.4), modes=("plain", "norm"), muon_lrs=(0.01, 0.02, 0.04),
                  compare_depth=8,
                  vit=dict(depth=8, d_model=64, num_heads=4, patch=2, epochs=150, batch_size=64,
                           lrs=(1e-3, 2e-3, 4e-3), folds=5, seeds=(0, 1), selection_seed=100,
                           alpha=0.2, mode="plain", log_every_epochs=10))
    if variant == "smoke":
        c.model.d_model = 16
        c.eval_seeds = (0, 1)
        c.steps = 60
        c.log_every = 20
        c.lrs = (2e-3,)
        c.val_size = 64
        c.probe_size = 16
        c.timing_steps = 5
    elif variant == "gpu":
        # The README's default run is step-limited (both arms pick the largest lr, loss ~1
        # nat above the floor after 300 steps); the paper's LMs are 24-30 blocks deep.
        c.steps = 5000  # 10x the spec's 500: training that is no longer step-limited
        c.depth = 16  # the spec's full-variant depth, toward the paper's 24-30
        c.model.d_model = 128  # 4x the width (head dim 32): capacity to approach the floor
        c.log_every = 100  # 50 logged points; fewer checkpoints of the 4x wider replicas
    elif variant == "full":
        c.steps = 200
        c.depth = 16
        c.model.d_model = 48
        c.full.vit.epochs = 25
        c.full.vit.log_every_epochs = 5
    return c
