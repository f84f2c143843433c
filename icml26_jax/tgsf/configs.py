"""Configurations of the TGsF experiments: ``default`` (E1 + E2), ``feedforward`` (E3),
``smoke`` (all three, tiny), ``full`` (bigger machines) and ``gpu`` (all three on one
accelerator, <= 20 min planned on one H100; README).

Use as ``--config=icml26_jax/tgsf/configs.py:default`` and override any field, e.g.
``--config.scenes=S1,S2,S3,S4``, ``--config.orders=0,1,2``, ``--config.steps=1600``,
``--config.label_noise=default,none,heavy``, ``--config.supervision=photo,decoupled``.
"""

from __future__ import annotations

import ml_collections

VARIANTS = ("default", "smoke", "feedforward", "full", "gpu")
EXPERIMENTS = ("e1", "e2", "e3")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.experiments = ("e1", "e2")
    # Per-scene fits (E1 representation, E2 TGs-Flow) [R].
    c.image_size = 32
    c.num_gaussians = 256
    c.steps = 800
    c.num_seeds = 2  # vmapped
    c.chunk = 200  # checkpoint every chunk steps
    c.lr_scale = 1.0  # all per-field Adam learning rates (spec values at scene extent 1)
    # Positional lrs (mean, v, a) x 30: our scene extent is ~4 (camera radius) and 800 steps
    # are ~40x fewer than a usual per-scene fit; chosen once on S1 seed 0 from {1, 10, 30}
    # before the claims were computed (README), shared by every arm.
    c.motion_lr_scale = 30.0
    c.scenes = ("S1", "S3", "S4")  # E1: order comparison (multi-view, photometric)
    c.orders = (1, 2)
    c.temporal_opacity = True  # for the order arms
    c.transient_scenes = ("S5",)  # E1: order 2 with and without temporal opacity
    c.e2_scene = "S1"  # E2: monocular, order 2
    c.e2_steps = -1  # -1: the same as steps
    c.supervision = ("photo", "coupled3d", "decoupled")
    c.label_noise = ("default", "none")  # photo runs only at the first level
    # Feed-forward (E3) [R].
    c.ff_image_size = 16
    c.ff_width = 32
    c.ff_steps = 1000
    c.ff_batch = 4
    c.ff_lr = 1e-3
    c.ff_warmup = 100
    c.ff_ema = 0.999
    c.ff_offset = False  # also train the MoVieS-style offset-head baseline (claim 14)
    c.ff_train_clips = 256  # distinct training clips (train photos), cycling S1-S5
    c.ff_test_clips = (100, 60, 40)  # accelerating, constant-velocity, transient
    c.scene_seed_offset = 0  # the per-scene fits' scenes use seed + scene_seed_offset
    c.seeds = ()  # e.g. 0,1,2: one run per seed in <workdir>/seed_<s> and a summary

    if variant == "smoke":
        c.experiments = ("e1", "e2", "e3")
        c.image_size = 16
        c.num_gaussians = 128
        c.steps = 150
        c.e2_steps = 50
        c.num_seeds = 1
        c.chunk = 50
        c.scenes = ("S1",)
        c.transient_scenes = ()
        c.supervision = ("decoupled",)
        c.label_noise = ("default",)
        c.ff_steps = 20
        c.ff_width = 16
        c.ff_batch = 2
        c.ff_train_clips = 8
        c.ff_test_clips = (2, 1, 1)
    elif variant == "feedforward":
        c.experiments = ("e3",)
    elif variant == "full":
        c.experiments = ("e1", "e2", "e3")
        c.image_size = 64
        c.num_gaussians = 2000
        c.num_seeds = 3
        c.scenes = ("S1", "S2", "S3", "S4", "S6")
        c.orders = (0, 1, 2)
        c.label_noise = ("default", "none", "heavy")
        c.ff_image_size = 32
        c.ff_steps = 3000
        c.ff_offset = True
    elif variant == "gpu":
        # The default's arms, scenes, seeds and noise levels, with the compute the README
        # says the claims lack on 2 CPU cores (fits too short and too coarse, E3 too small),
        # toward the spec's `full` sizes. Sized with core.timing (README, "On an accelerator").
        c.experiments = ("e1", "e2", "e3")  # all three claims sets in one run
        c.image_size = 64  # spec `full`: 64 x 64 per scene (4x the pixels on the object)
        c.num_gaussians = 2000  # spec `full`: N <= 2000 (~200 instead of ~25 on the object)
        # 10x (E1 and E2): 800 steps are ~40x fewer than a usual per-scene fit. The positional
        # lr factor (motion_lr_scale) stays the one chosen at 800 steps.
        c.steps = 8000
        c.chunk = 1000  # fewer host round trips and checkpoints per fit
        c.ff_image_size = 32  # spec `full`: feed-forward at 32 x 32
        c.ff_steps = 3000  # spec `full`: 3000 feed-forward steps
        c.ff_offset = True  # spec `full`: claim 14 (offset head) runs too
    return c
