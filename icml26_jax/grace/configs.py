"""Configurations of the GRACE experiment: ``default``, ``smoke`` and ``gpu``.

Use as ``--config=icml26_jax/grace/configs.py:smoke`` (``:gpu`` on one H100) and override
any field, e.g. ``--config.bits=4``, ``--config.group=64``, ``--config.tau=auto`` (or a number),
``--config.eta=0.01``, ``--config.beta_init=0.5``, ``--config.omega=3``,
``--config.qat_steps=500``, ``--config.arms=ptq_rtn,qat_ce,grace``.
"""

from __future__ import annotations

import ml_collections

VARIANTS = ("default", "smoke", "gpu")
ARMS = ("teacher_fp", "student_fp", "ptq_rtn", "qat_ce", "qat_dkd", "grace")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.split_seed = 0  # the 70/15/15 split of the digit images (a constant of the benchmark)
    # Data [R]: DigitGrid-VQA.
    c.n_train = 60000
    c.n_val = 1500
    c.n_test = 3000
    c.batch = 64
    c.eval_batch = 500
    # Vision tower [R] (shared, frozen after pre-training).
    c.d_v = 64
    c.vision_layers = 2
    c.vision_steps = 300
    c.vision_lr = 3e-3
    # Teacher / student LLMs [R].
    c.teacher = ml_collections.ConfigDict(dict(d=96, layers=4, heads=4, hidden=288))
    c.student = ml_collections.ConfigDict(dict(d=64, layers=3, heads=4, hidden=192))
    c.teacher_steps = 3000  # spec: 1200 [R]; raised per its gate rule (README)
    c.student_steps = 1000  # T_s: the converged FP student QAT starts from
    c.qat_steps = 500  # T_q: every QAT arm, and student_fp's continuation
    c.fp_lr = 3e-3
    c.fp_warmup = 100
    c.fp_weight_decay = 0.01
    # QAT [R] (spec "Our defaults").
    c.bits = 4
    c.group = 64
    c.lr = 3e-4  # weights
    c.scale_lr = 3e-3  # log_scale
    c.weight_decay = 1e-3
    c.warmup_frac = 0.03
    c.clip = 1.0
    # Distillation and controller.
    c.dkd_T = 2.0
    c.dkd_alpha = 1.0
    c.dkd_beta = 4.0
    c.dkd_warmup = 0
    c.omega = 3.0
    c.rcka_warmup_frac = 0.2
    c.tau = "auto"  # or a number (the paper's 3.0 pins beta at a bound here)
    c.eta = -1.0  # < 0: the [R] rule eta = (beta_max - beta_min) / (0.25 T_q tau)
    c.beta_init = 0.5
    c.beta_min = 0.1
    c.beta_max = 1.0
    c.tau_auto_steps = 50
    c.tau_auto_frac = 0.5
    c.arms = ARMS
    c.chunk = 100
    c.seeds = ()  # confirmatory: --config.seeds=0,1,2 runs every seed in one call

    if variant == "smoke":
        c.teacher = ml_collections.ConfigDict(dict(d=48, layers=2, heads=4, hidden=96))
        c.student = ml_collections.ConfigDict(dict(d=32, layers=2, heads=4, hidden=64))
        c.d_v = 32
        c.group = 32
        c.vision_steps = 40
        c.teacher_steps = 40
        c.student_steps = 40
        c.qat_steps = 40
        c.tau_auto_steps = 10
        c.n_train = 4000
        c.n_val = 300
        c.n_test = 300
        c.eval_batch = 300
        c.chunk = 20
    if variant == "gpu":
        # One H100, <= 20 min by core.timing's planning model (README "On an accelerator"):
        # the README's default run finds no INT4 gap, a vision tower that caps every model
        # near 90 % and 500 QAT steps too short to move the student; this scales each toward
        # the paper's setting (larger models, G = 128, converged FP models, longer QAT).
        c.d_v = 128  # a wider vision tower: every model plateaus near 90 % at d_v = 64
        c.vision_steps = 2000  # the amendment's >= 99 % per-digit accuracy needs convergence
        # Teacher 5.1 M / student 1.3 M decoder parameters (0.5 M / 0.16 M in default): larger
        # models toward the paper's, at the 4x ratio of its Qwen3-VL 8B -> 2B pair.
        c.teacher = ml_collections.ConfigDict(dict(d=256, layers=6, heads=8, hidden=768))
        c.student = ml_collections.ConfigDict(dict(d=128, layers=6, heads=4, hidden=384))
        c.group = 128  # the paper's Table 6 G (divides the student's 128 and 384)
        c.batch = 256  # 4x the tokens per step: the GPU is launch-bound at batch 64
        c.teacher_steps = 10000  # teacher and student train equally long (amendment)
        c.student_steps = 8000  # T_s: a converged FP student, as QAT in the paper starts from
        c.qat_steps = 2000  # T_q (4x): the controller and distillation get time to act
        c.seeds = (0, 1, 2)  # the confirmatory three seeds in one call, as the README reports
        c.chunk = 500  # fewer checkpoints: an orbax save per 100 fast steps would dominate
    return c
