"""Simplicity bias in diffusion models: from pair-wise to higher-order statistics
(Merger, Bardone & Goldt, ICML 2026).

``mcm`` holds the mixed cumulant model (spikes, correlated latents, sampler, covariance,
PCA leakage, Gaussian clones); ``denoisers`` the single-index denoiser, its oracle links and
loss; ``online`` online SGD on the sphere over replicas and escape times; ``theory`` the
float64 population loss and the diffusion information exponent.
"""

from icml26_jax.simplicity_bias import denoisers, mcm, online, theory

__all__ = ["denoisers", "mcm", "online", "theory"]
