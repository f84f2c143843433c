"""Configurations of the FPDA experiment: ``default`` (<= 10 min on 2 CPU cores), ``smoke``
(< 60 s) and ``gpu`` (12x the supervised steps, a 2x wider network, three seeds; <= 20 min on
one H100).

Use as ``--config=icml26_jax/fpda/configs.py:default`` and override any field, e.g.
``--config.steps_sup=600``, ``--config.methods=fpda,no_prompt``, ``--config.seeds=0,1,2``.
"""

from __future__ import annotations

import ml_collections

from icml26_jax.core import flags

VARIANTS = ("default", "smoke", "gpu")
# Every evaluated method (spec §Baselines and peers). fpda, all_routes, random_policy and
# best_fixed_action run on the supernet; no_prompt and fixed_prompt are trained separately;
# noise_variance_map has no learning.
METHODS = ("fpda", "no_prompt", "fixed_prompt", "all_routes", "random_policy",
           "best_fixed_action", "noise_variance_map")
TEXT_ARMS = (1.0, 0.7, 0.0)  # gated text at test with these reliabilities (plus no text)


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.seeds = ()  # e.g. 0,1,2: one run per seed in <workdir>/seed_<s> and a summary
    # Data (ForgeBench-S, spec §Data).
    c.img_size = 64
    c.n_train = 6000
    c.n_val = 1000
    c.n_test = 1200  # per test split
    c.text_reliability = 0.7  # p_rel of the training descriptions
    c.text_fraction = 0.5  # share of training images that carry a description
    # Supervised training (supernet and the two separately trained baselines).
    c.width = 32
    # The spec's 1200 steps per network measured 10.7 min for the whole default run on 2 CPU
    # cores (0.11-0.13 s per step); 1000 keeps it under the 10-minute budget (spec: steps
    # are [R] and lowered, with documentation, when the measured total exceeds it).
    c.steps_sup = 1000
    c.batch = 32
    c.lr = 3e-4
    c.weight_decay = 1e-4
    c.max_refine = 3
    c.gamma = 0.8  # deep-supervision decay
    c.chunk = 200  # checkpoint every chunk steps
    # DAPO.
    c.steps_dapo = 300
    c.dapo_batch = 32
    c.group_samples = 8
    c.dapo_epochs = 2
    c.dapo_lr = 1e-3
    c.clip_eps = 0.2
    c.ent_coef = 0.01
    c.refine_cost = 0.02  # lambda_c
    c.methods = METHODS
    c.eval_batch = 200  # sharded over the DATA axis when the device count divides it

    if variant == "smoke":
        # The spec's smoke sizes, except 32 x 32 images and 40 supervised steps (instead of
        # 64 and 60) so that the whole run, three compiles included, stays under 60 s.
        c.img_size = 32
        c.n_train = 400
        c.n_val = 100
        c.n_test = 100
        c.width = 16
        c.steps_sup = 40
        c.steps_dapo = 20
        c.chunk = 30
        c.eval_batch = 104  # a multiple of the 8 CPU devices (sharded evaluation)
    if variant == "gpu":
        # One H100, <= 20 min by core.timing's planning model (README "On an accelerator").
        # The README's default run finds the prompt bank no better than the prompt-free net:
        # 1,000 supervised steps do not turn twelve learned evidence channels (and a supernet
        # serving 15 routes x 4 depths) into a gain. Same task, data generator, test splits,
        # rewards and thresholds; more training, more data, a wider network, three seeds.
        c.n_train = 20000  # 3.3x the images: 12,000 steps of 64 see each ~38 times
        c.width = 64  # 2x the channels (0.36 M parameters in the supernet, 0.095 M in default)
        c.batch = 64  # 2x: at batch 32 the GPU is launch-bound
        c.steps_sup = 12000  # 12x default's 1,000 (10x the spec's 1,200) per network
        c.steps_dapo = 3000  # 10x: the policy's reward curve gets as long as the detector's
        c.chunk = 1000  # an orbax save per 200 fast steps would dominate; DAPO saves per 500
        c.seeds = (0, 1, 2)  # the spec's amendment judges the prompting claims on 3 seeds
    return c


def validate(c: ml_collections.ConfigDict) -> None:
    """Raises ``ValueError`` naming the flag for values outside what the code supports."""
    flags.require_positive_ints(c, ("n_train", "n_val", "n_test", "width", "steps_sup", "batch",
                                    "steps_dapo", "dapo_batch", "group_samples", "dapo_epochs",
                                    "chunk", "eval_batch"))
    if int(c.img_size) != c.img_size or c.img_size < 16 or c.img_size % 16:
        raise ValueError(f"--config.img_size must be a positive multiple of 16 (the encoder "
                         f"works at img_size / 4 and the DCT map at img_size / 8), got "
                         f"{c.img_size}")
    if c.width % 4:
        raise ValueError(f"--config.width must be a multiple of 4 (GroupNorm groups), got "
                         f"{c.width}")
    if int(c.max_refine) != c.max_refine or not 0 <= c.max_refine <= 8:
        raise ValueError(f"--config.max_refine must be an integer in [0, 8], got "
                         f"{c.max_refine}")
    if c.max_refine < 2:
        raise ValueError(f"--config.max_refine must be >= 2: the no_prompt, fixed_prompt and "
                         f"all_routes baselines run r = 2, got {c.max_refine}")
    for name in ("text_reliability", "text_fraction"):
        if not 0.0 <= c[name] <= 1.0:
            raise ValueError(f"--config.{name} must be in [0, 1], got {c[name]}")
    if not c.lr > 0 or not c.dapo_lr > 0:
        raise ValueError(f"--config.lr and --config.dapo_lr must be > 0, got {c.lr}, "
                         f"{c.dapo_lr}")
    if not 0.0 <= c.refine_cost < 0.5:
        raise ValueError(f"--config.refine_cost (lambda_c) must be in [0, 0.5), got "
                         f"{c.refine_cost}")
    if c.group_samples < 2:
        raise ValueError(f"--config.group_samples must be >= 2 (group-relative advantages), "
                         f"got {c.group_samples}")
    methods = tuple(c.methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"--config.methods must be a non-empty subset of {METHODS}, got "
                         f"{methods}")
