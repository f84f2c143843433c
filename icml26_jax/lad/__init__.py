"""Logit-Attention Divergence (LAD, ICML 2026): attention-guided calibration of the position
bias of multimodal retrieval.

``data`` holds the digit retrieval episodes (the offline substitute) and their tokenisation;
``model`` the retrieval transformer that returns logits and attention rows from one pass;
``agd`` the paper's method (calibration, bias matrix, attention posterior, debiased scores);
``baselines`` vanilla, PriDe, permutation averaging and the attention readouts; ``metrics``
accuracy, RStd, consistency; ``adapter`` the scorer protocol a real model implements;
``realdata`` the COCO JSONL episodes, the Hugging Face scorer and ``evaluate`` for real models.
"""

from icml26_jax.lad import adapter, agd, baselines, data, metrics, model, realdata

__all__ = ["adapter", "agd", "baselines", "data", "metrics", "model", "realdata"]
