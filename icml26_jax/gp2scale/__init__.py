"""gp2Scale (ICML 2026): exact GPs with compactly supported non-stationary kernels."""
