"""TRACE (Fan, Zhang & Cheng, ICML 2026): trajectory recovery for continuous mechanism
evolution in causal representation learning. See ``README.md``."""

from icml26_jax.trace import baselines, configs, data, infer, metrics, model

__all__ = ["baselines", "configs", "data", "infer", "metrics", "model"]
