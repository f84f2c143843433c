"""gp2Scale (ICML 2026): exact Gaussian processes with compactly supported, non-stationary
kernels.

``kernels`` (Wendland, bump, Risser), ``neighbors`` (sparsity patterns), ``sparse_cov`` (BCSR
covariance, matrix-free bump operator), ``solvers`` (batched CG, Lanczos tridiagonals, SLQ),
``likelihood`` (exact log marginal likelihood with a custom VJP), ``posterior``, ``mcmc``
(block adaptive Metropolis), ``baselines``, ``data``, ``scaling``; ``train.run`` is the
experiment. float64 is the caller's switch (``jax_enable_x64``), never set here.
"""
