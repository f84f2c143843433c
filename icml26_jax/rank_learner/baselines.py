"""Baselines of spec §Baselines and peers, sharing the splits, nuisances, MLP and optimiser
of Rank-Learner:

- T-learner: rank by tau_hat = mu1_hat - mu0_hat (the stage-1 outcome models).
- DR-learner: an MLP regressing the AIPW pseudo-outcome phi_hat on X (MSE, early stopping on
  the validation MSE), ranked by its prediction.
- Plug-in ranker: the pairwise ranker with plug-in labels sigmoid((tau_i - tau_j)/kappa)
  (Vanderschueren et al., 2024): :func:`ranking.train_rankers` with ``orthogonal=False``.
- Oracle: rank by the true tau (the upper bound of the AUTOC ratios).

Optional anchors (an extra, never core): econml's ``DRLearner`` and causalml's
``BaseDRRegressor``, each fitted on the nuisance + stage-2 rows.
"""

from __future__ import annotations

import numpy as np

from icml26_jax.rank_learner import fitting, nuisance, ranking


def t_learner(tau_hat) -> np.ndarray:
    """Scores of the T-learner: its CATE estimate tau_hat = mu1_hat - mu0_hat."""
    return np.asarray(tau_hat)


def oracle_ranker(tau) -> np.ndarray:
    """Scores of the oracle: the true CATE."""
    return np.asarray(tau)


def dr_learner(seeds, x, phi, w_train, w_val, cfg: fitting.FitConfig, hidden: int = 64,
               mesh=None):
    """DR-learner for ``R`` replicas: MLP regression of phi_hat [R, n] on x [R, n, d] over the
    ``w_train`` rows, early-stopped on the validation MSE over ``w_val``.

    Returns ``(graphdef, params [R, ...], History)``; predict with
    ``nuisance.predict_stack(graphdef, params, x)``.
    """
    return nuisance.fit_stack(seeds, x, phi, w_train, w_val, np.full(len(seeds), nuisance.MSE),
                              cfg, hidden, mesh)


def plugin_ranker(seeds, x, tau_hat, phi_hat, x_val, phi_val, cfg: ranking.RankerConfig,
                  hidden: int = 64, mesh=None):
    """The non-orthogonal pairwise ranker (plug-in labels), ``R`` replicas."""
    return ranking.train_rankers(seeds, x, tau_hat, phi_hat, x_val, phi_val,
                                 np.zeros(len(seeds), bool), cfg, hidden, mesh)


def econml_dr(x_train, t_train, y_train, x_test, seed: int = 0) -> np.ndarray:
    """econml ``DRLearner`` (gradient-boosted outcome and final models, logistic
    propensity, cv=2): CATE predictions at ``x_test``. Needs the optional ``econml``."""
    try:
        from econml.dr import DRLearner
    except ImportError as e:  # pragma: no cover - optional
        raise ImportError("econml_dr needs econml: pip install econml") from e
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.linear_model import LogisticRegression

    est = DRLearner(model_regression=GradientBoostingRegressor(random_state=seed),
                    model_propensity=LogisticRegression(max_iter=1000),
                    model_final=GradientBoostingRegressor(random_state=seed), cv=2,
                    random_state=seed)
    est.fit(np.asarray(y_train), np.asarray(t_train).astype(int), X=np.asarray(x_train))
    return np.asarray(est.effect(np.asarray(x_test))).reshape(-1)


def causalml_dr(x_train, t_train, y_train, x_test, seed: int = 0) -> np.ndarray:
    """causalml ``BaseDRRegressor`` (gradient boosting learners): CATE at ``x_test``. Needs
    the optional ``causalml``."""
    try:
        from causalml.inference.meta import BaseDRRegressor
    except ImportError as e:  # pragma: no cover - optional
        raise ImportError("causalml_dr needs causalml: pip install causalml") from e
    from sklearn.ensemble import GradientBoostingRegressor

    est = BaseDRRegressor(learner=GradientBoostingRegressor(random_state=seed))
    est.fit(np.asarray(x_train), np.asarray(t_train).astype(int), np.asarray(y_train),
            seed=seed)
    return np.asarray(est.predict(np.asarray(x_test))).reshape(-1)
