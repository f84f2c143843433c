"""GRACE (ICML 2026): gated relational alignment via confidence-based distillation for
efficient VLMs.

``data`` the DigitGrid-VQA substitute; ``model`` the vision tower, the LLMs (LSQ linears) and
greedy decoding; ``lsq`` group-wise LSQ fake-quantisation and ``QDense``; ``int4`` the INT4
packing (AWQ-compatible layout) and the dequantising dense; ``losses`` confidence-gated DKD and
relational CKA; ``controller`` the adaptive Lagrangian controller of beta; ``baselines`` PTQ
(round to nearest) and plain KD; ``export`` the INT4 export and the packed forward;
``adapter`` the interface a real VLM implements; ``train``
every arm, the export and the claims.
"""

from icml26_jax.grace import (adapter, baselines, controller, data, export, int4, losses, lsq,
                              model)

__all__ = ["adapter", "baselines", "controller", "data", "export", "int4", "losses", "lsq",
           "model"]
