"""Data of the Rank-Learner experiments: the synthetic DGP, semi-synthetic DGPs on real
covariates bundled with statsmodels, the sample splits, perturbed oracle nuisances (E2) and a
CSV path for users with real observational or RCT data.

All generators are NumPy (``np.random.default_rng(seed)``) and return host arrays; the
learners in :mod:`ranking`, :mod:`nuisance` and :mod:`baselines` are JAX.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

DGPS = ("synthetic", "randhie", "fair")
SEMISYNTHETIC = ("randhie", "fair")
PERTURB_MODES = ("mu", "both")

# Covariates of the statsmodels datasets that the semi-synthetic templates use.
_COLUMNS = {
    "randhie": ("mdvis", "lncoins", "idp", "lpi", "fmde", "physlm", "disea", "hlthg", "hlthf",
                "hlthp"),
    # The original outcome ``affairs`` is dropped.
    "fair": ("rate_marriage", "age", "yrs_married", "children", "religious", "educ",
             "occupation", "occupation_husb"),
}


class CausalData(NamedTuple):
    """Observational data with (where known) its ground truth; arrays have leading size n.

    Attributes:
      x: covariates [n, d] (float32).
      t: binary treatment [n] (float32 in {0, 1}).
      y: observed outcome [n].
      mu0, mu1: true conditional outcome means E[Y | X, T=t] [n] (NaN for real data).
      tau: true CATE mu1 - mu0 [n] (NaN for real data).
      pi: true propensity P(T=1 | X) [n] (NaN for real data).
    """

    x: np.ndarray
    t: np.ndarray
    y: np.ndarray
    mu0: np.ndarray
    mu1: np.ndarray
    tau: np.ndarray
    pi: np.ndarray

    def take(self, rows) -> "CausalData":
        """The rows ``rows`` of every field."""
        return CausalData(*(np.asarray(f)[rows] for f in self))


class Nuisances(NamedTuple):
    """Nuisance values (or predictions) at some rows: mu0, mu1, pi, each [n]."""

    mu0: np.ndarray
    mu1: np.ndarray
    pi: np.ndarray


class Splits(NamedTuple):
    """Disjoint row indices: nuisance train/val, stage-2 train/val and test."""

    nuis_train: np.ndarray
    nuis_val: np.ndarray
    stage2_train: np.ndarray
    stage2_val: np.ndarray
    test: np.ndarray


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _finish(rng, x, mu0, tau, pi, noise=0.6) -> CausalData:
    t = (rng.random(pi.shape) < pi).astype(np.float32)
    mu1 = mu0 + tau
    y = mu0 + t * tau + noise * rng.standard_normal(pi.shape)
    f = lambda a: np.asarray(a, np.float32)  # noqa: E731
    return CausalData(f(x), t, f(y), f(mu0), f(mu1), f(tau), f(pi))


def synthetic_parts(x: np.ndarray) -> dict:
    """The latent indices of the synthetic DGP at covariates ``x [..., >=9]``: the effect
    driver ``s``, the treatment-only driver ``v`` and the confounding index ``u``."""
    x0, x1, x2 = x[..., 0], x[..., 1], x[..., 2]
    s = 0.8 * x0 + 0.6 * x1 + 0.4 * x2 + 0.3 * x0 ** 2 - 0.2 * x1 * x2
    v = x[..., 7] - 0.5 * x[..., 8]
    return {"s": s, "v": v, "u": 0.8 * s + 0.6 * v}


def synthetic(rng: np.random.Generator, n: int = 11000, p: int = 10) -> CausalData:
    """The synthetic DGP of the official code (spec §Data): X ~ N(0, I_p),
    pi = 0.2 + 0.6 sigmoid(u), tau = s + 0.5 tanh(s), eps ~ N(0, 0.6^2).

    ``s`` drives both the effect and the treatment, so nuisance errors correlate with tau
    (the confounding that biases a plug-in ranker).
    """
    if n < 2:
        raise ValueError(f"n must be >= 2, got n={n}")
    if p < 9:
        raise ValueError(f"the synthetic DGP uses x0..x8: p must be >= 9, got p={p}")
    x = rng.standard_normal((n, p))
    z = synthetic_parts(x)
    pi = 0.2 + 0.6 * _sigmoid(z["u"])
    mu0 = 0.5 * x[:, 3] - 0.4 * x[:, 4] + 0.3 * np.sin(x[:, 5]) + 0.2 * (x[:, 6] ** 2 - 1)
    tau = z["s"] + 0.5 * np.tanh(z["s"])
    return _finish(rng, x, mu0, tau, pi)


def _covariates(name: str) -> np.ndarray:
    import statsmodels.api as sm

    frame = getattr(sm.datasets, name).load_pandas().data
    x = frame[list(_COLUMNS[name])].to_numpy(np.float64)
    return (x - x.mean(0)) / x.std(0)


def semisynthetic(name: str, rng: np.random.Generator, n: int = 3000) -> CausalData:
    """A CPS-style template on real covariates bundled with statsmodels (spec §Data [R]).

    The covariates (standardised over the whole dataset) are real; treatment and outcomes are
    simulated: pi = 0.1 + 0.7 sigmoid(0.6 v + 0.4 s), tau = 4 sigmoid(1.5 s - 0.25) + 0.35 s,
    Y(t) = mu_t + N(0, 0.6^2). This is "semi-synthetic on bundled covariates", not CPS.

    Args:
      name: ``"randhie"`` (20,190 rows) or ``"fair"`` (6,366 rows).
      rng: NumPy generator (draws the rows, the treatment and the noise).
      n: rows drawn without replacement.
    """
    if name not in SEMISYNTHETIC:
        raise ValueError(f"unknown semi-synthetic dataset {name!r}; allowed: "
                         f"{', '.join(SEMISYNTHETIC)}")
    pool = _covariates(name)
    if not 2 <= n <= pool.shape[0]:
        raise ValueError(f"n must be in [2, {pool.shape[0]}] for {name}, got n={n}")
    x = pool[rng.choice(pool.shape[0], size=n, replace=False)]
    c = dict(zip(_COLUMNS[name], x.T))
    if name == "randhie":
        s = (0.6 * c["disea"] - 0.5 * c["lncoins"] + 0.4 * c["physlm"]
             + 0.3 * c["disea"] * c["physlm"] - 0.3 * c["idp"])
        v = 0.7 * c["lpi"] + 0.4 * c["fmde"] - 0.3 * c["hlthg"]
        mu0 = (0.5 + 0.8 * np.tanh(c["mdvis"]) + 0.4 * c["disea"] - 0.3 * c["lncoins"]
               + 0.3 * c["hlthp"] + 0.2 * c["lpi"] * c["fmde"])
    else:
        s = (0.6 * c["educ"] - 0.5 * c["age"] + 0.4 * c["rate_marriage"]
             - 0.25 * c["age"] * c["educ"] + 0.3 * c["religious"])
        v = 0.7 * c["children"] + 0.3 * c["yrs_married"] - 0.2 * c["occupation"]
        mu0 = (1.0 + 0.6 * np.tanh(c["yrs_married"]) + 0.4 * c["occupation_husb"]
               - 0.3 * c["religious"] + 0.2 * c["age"] * c["children"])
    pi = 0.1 + 0.7 * _sigmoid(0.6 * v + 0.4 * s)
    tau = 4.0 * _sigmoid(1.5 * s - 0.25) + 0.35 * s
    return _finish(rng, x, mu0, tau, pi)


def generate(dgp: str, rng: np.random.Generator, n: int | None = None) -> CausalData:
    """``synthetic`` (default n 11,000) or a semi-synthetic dataset (default n 3,000)."""
    if dgp == "synthetic":
        return synthetic(rng, n or 11000)
    if dgp in SEMISYNTHETIC:
        return semisynthetic(dgp, rng, n or 3000)
    raise ValueError(f"unknown dgp {dgp!r}; allowed: {', '.join(DGPS)}")


def make_splits(rng: np.random.Generator, n: int, n_nuis: int = 1000, n_stage2: int = 1000,
                n_test: int = 1000, val_frac: float = 0.2) -> Splits:
    """The splits of the official code: the test set is the last ``n_test`` rows; disjoint
    nuisance and stage-2 splits are drawn from the rest, each split ``1 - val_frac`` /
    ``val_frac`` into train / validation (``int(val_frac * size)`` validation rows)."""
    for name, v in (("n_nuis", n_nuis), ("n_stage2", n_stage2), ("n_test", n_test)):
        if v < 2:
            raise ValueError(f"{name} must be >= 2, got {name}={v}")
    if not 0.0 < val_frac < 1.0:
        raise ValueError(f"val_frac must be in (0, 1), got val_frac={val_frac}")
    if n_test + n_nuis + n_stage2 > n:
        raise ValueError(f"n_test + n_nuis + n_stage2 = {n_test + n_nuis + n_stage2} exceeds "
                         f"the {n} rows of the data")
    test = np.arange(n - n_test, n)
    perm = rng.permutation(n - n_test)
    nuis, stage2 = perm[:n_nuis], perm[n_nuis:n_nuis + n_stage2]

    def train_val(pool):
        val = rng.choice(pool, size=int(val_frac * len(pool)), replace=False)
        return np.setdiff1d(pool, val, assume_unique=True), np.sort(val)

    (nt, nv), (st, sv) = train_val(nuis), train_val(stage2)
    return Splits(np.sort(nt), nv, np.sort(st), sv, test)


def perturbation_direction(x: np.ndarray) -> np.ndarray:
    """b(x) = v(x) + 0.5 x0: a nuisance error aligned with the confounding (spec §Data E2)."""
    return synthetic_parts(x)["v"] + 0.5 * x[..., 0]


def perturb_oracle(data: CausalData, delta: float, mode: str = "mu") -> Nuisances:
    """Oracle nuisances of the synthetic DGP with a controlled error of size ``delta``
    (any leading shape: ``data`` may be stacked over seeds).

    mu1_hat = mu1 + delta b(x), mu0_hat = mu0 - 0.5 delta b(x); pi_hat = pi (mode ``"mu"``)
    or sigmoid(logit pi + delta v) clipped to [0.02, 0.98] (mode ``"both"``).
    """
    if mode not in PERTURB_MODES:
        raise ValueError(f"perturb mode must be one of {', '.join(PERTURB_MODES)}, got {mode!r}")
    x = np.asarray(data.x, np.float64)
    b = perturbation_direction(x)
    mu1 = data.mu1 + delta * b
    mu0 = data.mu0 - 0.5 * delta * b
    pi = np.asarray(data.pi, np.float64)
    if mode == "both":
        v = synthetic_parts(x)["v"]
        pi = np.clip(_sigmoid(np.log(pi / (1 - pi)) + delta * v), 0.02, 0.98)
    f = lambda a: np.asarray(a, np.float32)  # noqa: E731
    return Nuisances(f(mu0), f(mu1), f(pi))


def load_csv(path: str, x_cols: Sequence[str], t_col: str, y_col: str) -> CausalData:
    """Observational or RCT data from a CSV with a header row (no ground truth: mu0, mu1,
    tau and pi are NaN, so only the DR-approximate AUTOC can be reported).

    Args:
      path: the CSV file.
      x_cols: covariate columns (standardised here).
      t_col: the binary treatment column (values 0/1).
      y_col: the outcome column.
    """
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no data rows")
    missing = [c for c in (*x_cols, t_col, y_col) if c not in rows[0]]
    if missing:
        raise ValueError(f"{path} has no column(s) {missing}; it has {list(rows[0])}")
    x = np.array([[float(r[c]) for c in x_cols] for r in rows])
    t = np.array([float(r[t_col]) for r in rows])
    if not np.isin(t, (0.0, 1.0)).all():
        raise ValueError(f"treatment column {t_col!r} must hold only 0 and 1")
    y = np.array([float(r[y_col]) for r in rows])
    sd = x.std(0)
    x = (x - x.mean(0)) / np.where(sd > 0, sd, 1.0)
    nan = np.full(len(rows), np.nan, np.float32)
    return CausalData(x.astype(np.float32), t.astype(np.float32), y.astype(np.float32),
                      nan, nan.copy(), nan.copy(), nan.copy())
