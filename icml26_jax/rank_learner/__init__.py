"""Rank-Learner: orthogonal ranking of treatment effects (Arno et al., ICML 2026).

``ranking`` holds the paper's math (AIPW scores, plug-in and orthogonal pair labels, the pair
sampler, the pairwise loss, the early-stopped ranker); ``nuisance`` stage 1; ``baselines``
the T-, DR- and plug-in learners and the oracle; ``metrics`` AUTOC, policy value and the
DR-approximate AUTOC; ``data`` the DGPs and splits; ``train.run`` the experiment.
"""

from icml26_jax.rank_learner import baselines, data, fitting, metrics, model, nuisance, ranking

__all__ = ["baselines", "data", "fitting", "metrics", "model", "nuisance", "ranking"]
