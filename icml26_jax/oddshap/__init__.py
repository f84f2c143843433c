"""OddSHAP (ICML 2026): Shapley values from the odd component of a game — paired sampling,
an oblivious-GBT proxy with an exact Walsh spectrum picks the odd interactions, and a
constrained float64 regression on the odd Walsh basis. Modules: ``fourier``, ``games``,
``sampling``, ``proxy``, ``trees``, ``estimator``, ``baselines``, ``metrics``, ``data``,
``configs``, ``train``, ``report``."""
