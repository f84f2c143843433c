"""The baselines of spec §Baselines, as frequency tables ``[L, H, P]`` and logit multipliers.

Every baseline is a fixed rotary schedule: NoPE, partial-RoPE(p), p-RoPE(p) for pretraining;
PI, NTK-aware and YaRN for context extension by a factor s. A table holds the effective
frequency of every (layer, head, pair) (0 = the pair does not rotate) and a multiplier
``[L, H]`` of the attention logits (YaRN's temperature; 1 elsewhere). The module
``rope.RotaryPositional`` implements the same schedules from a :class:`rope.RopeConfig`;
:func:`table` evaluates any config's step-0 table through these builders, and the tests check
the two agree. YaRN-learned-uniform (YaRN init, then one λ vector and one temperature shared
by all heads and layers, trained) and AdaRoPE-ext start from :func:`yarn_table`.
"""

from __future__ import annotations

import numpy as np

from icml26_jax.adarope import rope

# Named experiment arms -> RopeConfig fields (pretraining and extension).
PRETRAIN_ARMS = {
    "rope": dict(kind="rope"),
    "nope": dict(kind="nope"),
    "partial-0.25": dict(kind="partial", fraction=0.25),
    "partial-0.5": dict(kind="partial", fraction=0.5),
    "prope-0.75": dict(kind="prope", fraction=0.75),
    "prope-0.25": dict(kind="prope", fraction=0.25),
    "adarope": dict(kind="adarope"),
    "adarope-shared": dict(kind="adarope", share_heads=True),
    "adarope-base-only": dict(kind="adarope", learn_base_only=True),
    "adarope-freq-only": dict(kind="adarope", learn_scale=False),
    "adarope-scale-only": dict(kind="adarope", learn_freq=False),
}
EXTENSION_ARMS = {
    "none": dict(ext="none"),
    "pi": dict(ext="pi"),
    "ntk": dict(ext="ntk"),
    "yarn": dict(ext="yarn"),
    "yarn-learned-uniform": dict(ext="yarn_learned"),
    "adarope-ext": dict(ext="adarope"),
}
TRAINED_EXTENSIONS = ("yarn-learned-uniform", "adarope-ext")


def _stack(theta: np.ndarray, mult: float, num_layers: int, num_heads: int):
    table = np.broadcast_to(theta, (num_layers, num_heads, theta.shape[-1])).copy()
    return table, np.full((num_layers, num_heads), mult)


def rope_table(num_layers: int, num_heads: int, head_dim: int, base: float):
    """RoPE: θ_i = b^(-2i/D) for every layer and head; multiplier 1."""
    return _stack(rope.rope_frequencies(head_dim, base), 1.0, num_layers, num_heads)


def nope_table(num_layers: int, num_heads: int, head_dim: int):
    """NoPE: no rotation (the causal mask still carries position)."""
    return _stack(np.zeros(head_dim // 2), 1.0, num_layers, num_heads)


def partial_table(num_layers: int, num_heads: int, head_dim: int, base: float, fraction: float):
    """Partial-RoPE(p) (GPT-NeoX ``rotary_pct``): first ⌊pD⌋ dims, schedule over them."""
    return _stack(rope.partial_frequencies(head_dim, base, fraction), 1.0, num_layers,
                  num_heads)


def prope_table(num_layers: int, num_heads: int, head_dim: int, base: float, keep: float):
    """p-RoPE(p): the lowest (1 - p) P RoPE frequencies set to 0."""
    return _stack(rope.prope_frequencies(head_dim, base, keep), 1.0, num_layers, num_heads)


def pi_table(theta: np.ndarray, factor: float):
    """Position Interpolation (Chen et al., 2023): θ'_i = θ_i / s (positions squeezed)."""
    return np.asarray(theta) / factor, np.ones(np.shape(theta)[:-1])


def ntk_table(num_layers: int, num_heads: int, head_dim: int, base: float, factor: float):
    """NTK-aware scaling: b' = b s^(D/(D-2)); multiplier 1."""
    return _stack(rope.ntk_frequencies(head_dim, base, factor), 1.0, num_layers, num_heads)


def yarn_table(theta: np.ndarray, train_len: int, factor: float, alpha: float = 1.0,
               beta: float = 32.0):
    """YaRN: θ'_i = θ_i / λ_i with the ramp of ``rope.yarn_factors``; logits x (0.1 ln s + 1)^2.

    Args:
      theta: ``[..., P]`` frequencies (e.g. a ``[L, H, P]`` table).
    """
    theta = np.asarray(theta, np.float64)
    lam, mult = rope.yarn_factors(theta.reshape(-1), train_len, factor, alpha, beta)
    return theta / lam.reshape(theta.shape), np.full(theta.shape[:-1], mult)


def table(config: rope.RopeConfig, num_layers: int):
    """The step-0 ``(frequencies [L, H, P], logit multiplier [L, H])`` of any config."""
    c, L, H, D = config, num_layers, config.num_heads, config.head_dim
    if c.kind in ("rope", "adarope"):
        theta, mult = rope_table(L, H, D, c.base)
    elif c.kind == "nope":
        theta, mult = nope_table(L, H, D)
    elif c.kind == "partial":
        theta, mult = partial_table(L, H, D, c.base, c.fraction)
    else:
        theta, mult = prope_table(L, H, D, c.base, c.fraction)
    if c.ext == "pi":
        return pi_table(theta, c.ext_factor)
    if c.ext == "ntk":
        return ntk_table(L, H, D, c.base, c.ext_factor)
    if c.ext in ("yarn", "yarn_learned", "adarope"):
        return yarn_table(theta, c.train_len, c.ext_factor, c.yarn_alpha, c.yarn_beta)
    return theta, mult
