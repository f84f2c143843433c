"""Shared small transformer LM, synthetic HMM language and LM training step.

Used by adarope, grad_smoothing and discrete_diffusion:

* ``transformer``: ``TransformerConfig``, ``Transformer`` (NNX, blocks stacked ``[L, ...]``
  and scanned), the position-encoder hook, standard ``Rope``;
* ``hmm``: a hidden-Markov language with exact per-token likelihood and entropy rate;
* ``train``: pure loss / train / eval steps over a split model;
* ``corpus``: real text (PG19 bytes, user token shards) for users who have it.
"""

from icml26_jax.lm.transformer import (Attention, Block, BlockStack, Rope, Transformer,
                                       TransformerConfig, rotate_pairs)

__all__ = ["Attention", "Block", "BlockStack", "Rope", "Transformer", "TransformerConfig",
           "rotate_pairs"]
