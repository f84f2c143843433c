"""icml26_jax: JAX implementations of ICML 2026 papers, one subpackage per paper."""

__version__ = "0.1.0"
