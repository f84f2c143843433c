"""Scaling beyond masked diffusion language models (Sahoo et al., ICML 2026): masked (MDLM,
NELBO and low-variance objectives), uniform-state (Duo) and interpolating (Eso-LM) discrete
diffusion next to AR, compared at matched FLOPs on a synthetic HMM language.

``noise`` holds the log-linear schedule and antithetic times; ``losses`` the forward noising
and the per-token losses of every family, the Duo posterior and the Eso-LM permutation.
"""

from icml26_jax.discrete_diffusion import losses, noise

__all__ = ["losses", "noise"]
