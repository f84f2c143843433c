"""Configurations of the AdaRoPE experiment: ``default``, ``smoke`` and ``full``.

Use as ``--config=icml26_jax/adarope/configs.py:smoke`` and override any field with
``--config.<field>=...`` (e.g. ``--config.steps=2000``, ``--config.arms=rope,adarope``).

Calibration (spec §Experiment; recorded here before any comparison ran, never changed
after seeing results). The spec's MQAR (128 keys, 24 pairs at L0 = 64) is not learned by a
single RoPE model on this machine: 12% accuracy at L0 after 3000 steps (lr 1e-3 and 3e-3),
also with d_model 128 or 16 queries, where >= 95% is required. The number of distinct keys
is what makes the associative recall slow to learn (128 keys / 8 pairs: 21% after 1500
steps; 16 keys / 8 pairs without filler: 100% after 400). So T1 keeps the mechanism and the
4x setting with a key set small enough to learn: 16 keys, 16 values, 8 key-value pairs at
random slots of a context filled with filler tokens (16 ids), 8 queries; at 4x the pairs
spread over a 4x longer context with 5x more distractor (filler) tokens.

One step of the 12 vmapped models (4 arms x 3 seeds) takes ~0.46 s on 2 cores (sharding the
models over devices gains ~15%), so 1000 steps is what fits the 10-minute budget;
adarope-shared moves to ``full`` (the spec's remedy). The calibration does NOT pass: seed
100 (RoPE alone) reaches 92% at L0 after 1000 steps (>= 95% required), and learning is a
plateau whose exit time varies by seed (RoPE seeds 1 and 2: ~25% at 1000 steps with lr 1e-3
or 2e-3; in a 2000-step run seed 2 left the plateau at step ~1200, seed 1 not at all).
Raising the steps far enough does not fit the budget; the README reports the consequence
(claim 1 fails, so the comparisons are void) instead of re-engineering the task.
"""

from __future__ import annotations

import ml_collections

VARIANTS = ("default", "smoke", "full")
TASKS = ("t1", "t1_distance", "t3")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.num_seeds = 3  # seeds seed .. seed + num_seeds - 1 run as one vmapped program
    c.arms = ("rope", "nope", "partial-0.25", "adarope")
    c.base = 100.0
    c.tasks = ("t1", "t1_distance")
    c.model = dict(d_model=64, num_layers=2, num_heads=4, mlp_ratio=2)
    c.mqar = dict(num_keys=16, num_values=16, num_pairs=8, num_filler=16, num_queries=8)
    c.train_len = 64
    c.batch_size = 32
    c.steps = 1000
    c.chunk = 50  # steps per compiled scan; a checkpoint after each chunk
    c.opt = dict(lr=1e-3, pe_lr=1e-2, weight_decay=0.1, b1=0.9, b2=0.95, clip=1.0,
                 warmup_frac=0.05)
    c.eval_lens = (64, 128, 256)
    # Sequences per evaluation length and per distance bucket: 128, not the spec's 512, so
    # that evaluating 12 + 18 models at up to T = 256 fits the 10-minute budget (measured:
    # 512 sequences take > 3 min, 256 about 2.5 min of an 11.4-min run); 128 x 8 queries
    # give an accuracy's standard error <= 0.016.
    c.eval_size = 128
    c.eval_batch = 32
    c.distance_len = 256
    c.extension = dict(arms=("none", "pi", "ntk", "yarn", "yarn-learned-uniform",
                             "adarope-ext"), backbone="rope", factor=4.0, length=256,
                       num_train=100, steps=300, batch_size=8, chunk=50, yarn_alpha=1.0,
                       yarn_beta=32.0)
    c.analysis_size = 64  # sequences at L0 for the head-role analysis
    # T3 (``tasks`` containing "t3"; the full variant): LM on the shared HMM language.
    c.lm = dict(arms=("rope", "nope", "partial-0.25", "prope-0.75", "adarope"), num_states=32,
                vocab_size=64, concentration=0.02, hmm_seed=0, steps=3000,
                eval_lens=(64, 256, 512), eval_size=256, continue_steps=300)

    if variant == "smoke":
        c.num_seeds = 1
        c.arms = ("rope", "adarope")
        c.tasks = ("t1",)
        c.steps = 250
        c.chunk = 50
        c.eval_lens = (64, 128)
        c.eval_size = 128
        c.extension.update(arms=("yarn", "yarn-learned-uniform", "adarope-ext"), steps=20,
                           chunk=20)
        c.analysis_size = 16
    elif variant == "full":
        c.arms = ("rope", "nope", "partial-0.25", "partial-0.5", "prope-0.75", "prope-0.25",
                  "adarope", "adarope-shared", "adarope-base-only", "adarope-freq-only",
                  "adarope-scale-only")
        c.steps = 3000
        c.tasks = ("t1", "t1_distance", "t3")
        c.model.mlp_ratio = 4
        c.eval_lens = (64, 128, 256)
    return c
