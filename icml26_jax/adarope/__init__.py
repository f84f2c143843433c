"""AdaRoPE: head-specific learnable rotary frequencies and attention scaling (ICML 2026).

The module ``RotaryPositional`` drops into ``icml26_jax.lm.Transformer`` through its
position-encoder hook (``position_encoder_factory=make_factory(RopeConfig(kind="adarope"))``).
"""

from icml26_jax.adarope.analysis import head_scores, spearman
from icml26_jax.adarope.baselines import (EXTENSION_ARMS, PRETRAIN_ARMS, nope_table,
                                          ntk_table, partial_table, pi_table, prope_table,
                                          rope_table, table, yarn_table)
from icml26_jax.adarope.optim import make_optimizer, pe_param_labels
from icml26_jax.adarope.rope import (RopeConfig, RotaryPositional, apply_rotary,
                                     head_temperature, make_factory, ntk_frequencies,
                                     partial_frequencies, prope_frequencies, rope_frequencies,
                                     rotary_angles, yarn_factors)
from icml26_jax.adarope.tasks import mqar_batch, passkey_batch

__all__ = [
    "EXTENSION_ARMS", "PRETRAIN_ARMS", "RopeConfig", "RotaryPositional", "apply_rotary",
    "head_scores", "head_temperature", "make_factory", "make_optimizer", "mqar_batch",
    "nope_table", "ntk_frequencies", "ntk_table", "partial_frequencies", "partial_table",
    "passkey_batch", "pe_param_labels", "pi_table", "prope_frequencies", "prope_table",
    "rope_frequencies", "rope_table", "rotary_angles", "spearman", "table", "yarn_factors",
    "yarn_table",
]
