"""Configurations of the TRACE experiment: ``default`` (<= 10 min on 2 CPU cores), ``smoke``
(< 60 s) and ``paper`` (the paper's training scale, not for CI).

Use as ``--config=icml26_jax/trace/configs.py:default`` and override any field, e.g.
``--config.parts=main``, ``--config.steps=40000``, ``--config.mix_modes=param``,
``--config.projection=euclid``, ``--config.window=0``, ``--config.data_seed=7``.

Sizes marked [R] are ours (spec §Method "Ours"): lr 2e-3, 64 sequences per domain per step,
24,000 steps, expert width 64; the paper trains at lr 5e-4, batch 64, 100 epochs of 40,000
sequences per domain, expert width 128 (``paper``).
"""

from __future__ import annotations

import ml_collections

from icml26_jax.core import flags

VARIANTS = ("default", "smoke", "paper")
PARTS = ("main", "k_ablation", "data_sweep")
FAMILIES = ("simple", "medium", "complex")
MIX_MODES = ("param", "function")
PROJECTIONS = ("clip", "euclid")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0  # initialisation, batches and evaluation draws
    c.seeds = ()  # several whole runs (run_seeds)
    c.parts = ("main", "k_ablation")
    # data (spec §Data): mechanisms from data_seed; claims are evaluated at 42
    c.data_seed = 42
    c.d = 8
    c.lags = 2
    c.k_total = 5
    c.k_active = 3
    c.n_per_domain = 8000
    c.n_val = 2048
    # model and training (spec §Method)
    c.hidden = 128
    c.expert_hidden = 64  # [R] paper 128
    c.beta = 2e-3
    c.gamma = 2e-2
    c.lr = 2e-3  # [R] paper 5e-4
    c.weight_decay = 1e-4
    c.batch = 320  # [R] stratified: [K, batch / K, 3, d]; must be divisible by K
    c.steps = 24_000
    c.eval_every = 2_000  # MCC curve and checkpoint chunk
    # inference and evaluation
    c.T = 50
    c.ensemble = 500
    c.draws = 5
    c.families = FAMILIES
    c.mix_modes = MIX_MODES
    c.projection = "clip"  # released default
    c.window = 5  # moving average half-width (11 taps)
    c.p_stay = 0.9  # discrete-switching HMMs
    c.lam_c = 0.05  # penalized LS: lambda = lam_c * T^(1/3) (reported only)
    c.ls_steps = 500
    c.permutations = 20
    # K ablation (spec §Experiment): a K_total = 10 model, complex family, param mode
    c.abl_k_total = 10
    c.abl_steps = 8_000
    c.abl_batch = 320  # [10, 32, 3, d]
    c.abl_k_actives = (2, 3, 4, 5, 6, 7)
    c.abl_draws = 3
    c.abl_learned = True  # False: the ablation on true latents only (smoke)
    # data sweep (optional): oracle spread over data seeds
    c.sweep_seeds = tuple(range(20))
    if variant == "smoke":
        c.n_per_domain = 1000
        c.n_val = 512
        c.steps = 400
        c.batch = 160
        c.eval_every = 200
        c.families = ("simple", "complex")
        c.mix_modes = ("param",)
        c.draws = 1
        c.abl_learned = False
        c.abl_draws = 1
        c.sweep_seeds = (0, 1)
    elif variant == "paper":
        c.n_per_domain = 40_000
        c.batch = 65  # the paper's 64, rounded up to a multiple of K = 5
        c.lr = 5e-4
        c.expert_hidden = 128
        c.steps = 100 * 40_000 * 5 // 65  # 100 epochs
        c.abl_steps = 100 * 40_000 * 10 // 70
        c.abl_batch = 70
    return c


def validate(c: ml_collections.ConfigDict) -> None:
    """Raises ``ValueError`` naming the field for values the code does not support."""
    flags.require_positive_ints(c, ("d", "lags", "k_total", "k_active", "n_per_domain", "n_val",
                                    "hidden", "expert_hidden", "batch", "eval_every",
                                    "ensemble", "draws", "ls_steps", "permutations",
                                    "abl_k_total", "abl_batch", "abl_draws"))
    for name in ("steps", "abl_steps"):
        if isinstance(c[name], bool) or not isinstance(c[name], int) or c[name] < 0:
            raise ValueError(f"--config.{name} must be an integer >= 0, got {c[name]!r}")
    if c.lags != 2:
        raise ValueError(f"--config.lags: the generator has L = 2 lags, got {c.lags}")
    if not 2 <= c.k_active <= c.k_total:
        raise ValueError(f"--config.k_active must be in [2, k_total={c.k_total}], got "
                         f"{c.k_active}")
    if c.k_total > c.d * c.d:
        raise ValueError(f"--config.k_total must be <= d*d = {c.d * c.d} (one distinct edge per "
                         f"mechanism), got {c.k_total}")
    bad = [k for k in c.abl_k_actives if not 2 <= k <= c.abl_k_total]
    if bad or not c.abl_k_actives:
        raise ValueError(f"--config.abl_k_actives must be non-empty values in [2, abl_k_total="
                         f"{c.abl_k_total}], got {tuple(c.abl_k_actives)}")
    for batch, k in (("batch", "k_total"), ("abl_batch", "abl_k_total")):
        if c[batch] % c[k]:
            raise ValueError(f"--config.{batch}={c[batch]} must be divisible by --config.{k}="
                             f"{c[k]} (stratified batches hold batch / K sequences per domain)")
    if c.T < 3:
        raise ValueError(f"--config.T must be >= 3, got {c.T}")
    if isinstance(c.window, bool) or not isinstance(c.window, int) or c.window < 0:
        raise ValueError(f"--config.window must be an integer >= 0, got {c.window!r}")
    for name, allowed in (("parts", PARTS), ("families", FAMILIES), ("mix_modes", MIX_MODES)):
        vals = tuple(c[name])
        bad = [v for v in vals if v not in allowed]
        if bad or not vals:
            raise ValueError(f"--config.{name}: unknown or empty {bad or vals}; allowed: "
                             f"{', '.join(allowed)}")
    if c.projection not in PROJECTIONS:
        raise ValueError(f"--config.projection must be one of {', '.join(PROJECTIONS)}, got "
                         f"{c.projection!r}")
    if not 0.0 < c.p_stay < 1.0:
        raise ValueError(f"--config.p_stay must be in (0, 1), got {c.p_stay}")
    for name in ("lr", "beta", "gamma"):
        if not c[name] > 0:
            raise ValueError(f"--config.{name} must be > 0, got {c[name]}")
    if c.lam_c < 0 or c.weight_decay < 0:
        raise ValueError("--config.lam_c and --config.weight_decay must be >= 0")
