"""Scaling beyond masked diffusion language models (Sahoo et al., ICML 2026): masked (MDLM,
NELBO and low-variance objectives), uniform-state (Duo) and interpolating (Eso-LM) discrete
diffusion next to AR, compared at matched FLOPs on a synthetic HMM language.

``noise`` holds the log-linear schedule and antithetic times; ``losses`` the forward noising,
the per-token losses of every family, the Duo posterior, the Eso-LM permutation and
``loss_fn``; ``model`` the backbone sizes and token layout; ``flops`` the FLOP count on the
unrolled forward; ``samplers`` the samplers of every family; ``data`` the HMM language, its
floor and the real-data path; ``metrics`` the oracle Gen-PPL and entropy guards; ``scaling``
the IsoFLOP fits; ``analysis`` the tables, fits and claims of a run; ``train`` the study (``train.run``); ``report`` its tables and figures.
"""

from icml26_jax.discrete_diffusion import (analysis, baselines, data, flops, losses, metrics,
                                           model, noise, samplers, scaling)

__all__ = ["analysis", "baselines", "data", "flops", "losses", "metrics", "model", "noise",
           "samplers", "scaling"]
