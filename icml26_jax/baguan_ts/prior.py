"""The synthetic pretraining prior (spec §Method "Prior" [R]): task samplers and the task bank.

A task is one series ``y`` [T] with ``F`` covariates ``X`` [T, F] (F in 0..F_MAX), T in
[192, 512]. Families (``FAMILIES``; ``Task.family`` is the index into it):

* ``covariate`` (the rest, 55 %): F in 1..3 covariates, each one of calendar sin/cos (period
  in {7, 12, 24, 52, 168}, random start), an RBF GP path (length-scale in [5, 50], 64 random
  Fourier features), event pulses with exponential decay (known ahead), or regime steps. The
  target is ``trend + seasonal + sum_f beta_f h_f(x_{f, t - l_f}) + eps`` with ``h_f`` linear
  or a random width-8 tanh net of the standardised covariate (output standardised),
  ``|beta_f|`` in [0.7, 1.5], lag ``l_f`` in {0, 1, 2}, and ``eps`` an AR(1) (phi in [0, 0.9])
  whose innovations have a smoothly varying (heteroscedastic) scale. The covariate part has
  variance sum_f beta_f^2 (0.49 to 6.75) against ~1.25 amp^2 <= 1.25 for the seasonal part
  (amp in [0.3, 1], two harmonics), a trend of sd ~0.2 and a noise sd <= 0.4 x the
  heteroscedastic factor, so covariates carry a large share of the variance (median R^2 of y
  on its lagged covariates ~0.87 in tests/baguan_ts/test_prior.py). 80 % of these tasks have
  a seasonal part (period in the config periods <= T/2), the rest have period 1.
* ``kernelsynth`` (30 %, F = 0): a GP sample (Chronos' KernelSynth) whose kernel combines 1-3
  of {RBF, periodic, linear, RQ, white} by + or x, drawn by Cholesky with jitter.
* ``spike`` (15 %): a sinusoid of period p plus sharp one-step spikes (3-8x the amplitude) at
  a fixed phase every p steps. With probability 1/2 the task has F = 0 and a spike every
  period; otherwise F = 1, each spike occurs with probability in [0.6, 1] (at least two
  occur) and the covariate is the known-ahead 0/1 spike indicator (so the covariate is
  informative beyond periodicity).
  These tasks measure oversmoothing (OSI).
* ``mini`` (only when ``PriorConfig.mini``; the smoke prior): ``A sin(2 pi t / p + phase) +
  beta x_t + small noise`` with one RBF GP covariate x, p in the config periods <= 24.
* ``synthetic_energy``: not in the prior; ``data_real.synthetic_energy`` uses this code.

Every task gets a random sign flip, scale (log-uniform in [0.1, 1000]) and offset (scale *
U[-3, 3]) of ``y`` (the anti-symmetric ensembling assumes sign symmetry). Covariates are not
rescaled (inference normalises every channel).

``Task.period`` is the dominant season of the target (1 when there is none): the seasonal
period of a covariate task, the periodic kernel's period of a KernelSynth task, the spike
period, the sinusoid's period. It is the natural MASE / seasonal-naive ``m`` (see Task on its
use as the retrieval grouping period).

All generation is numpy (float64 inside, float32 out) from ``np.random.default_rng``;
:func:`make_bank` draws task i from its own ``SeedSequence(seed, spawn_key=(BANK_STREAM, i))``,
so a bank's first k tasks do not depend on n, and any other stream (e.g. the held-out set,
``EVAL_STREAM``) is disjoint from every bank whatever the two integer seeds are. make_bank
runs BLAS single-threaded (threadpoolctl): 4,096 tasks take ~6 s of CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import NamedTuple, Sequence

import numpy as np
from scipy import signal
from scipy.linalg import blas, lapack

try:
    from threadpoolctl import ThreadpoolController  # a scikit-learn dependency
except ImportError:  # pragma: no cover
    ThreadpoolController = None

F_MAX = 3  # the most covariates a task has; banks pad X to [.., F_MAX] with zeros
T_MAX = 512  # the default longest task (PriorConfig.t_max); banks are [n, cfg.t_max]
FAMILIES = ("covariate", "kernelsynth", "spike", "mini", "synthetic_energy")
COVARIATE, KERNELSYNTH, SPIKE, MINI, SYNTHETIC_ENERGY = range(len(FAMILIES))
KERNELS = ("rbf", "periodic", "linear", "rq", "white")
COVARIATE_KINDS = ("calendar", "gp", "pulses", "steps")
BANK_STREAM = 0xBA4C  # SeedSequence spawn-key namespaces: the bank ...
EVAL_STREAM = 0xE7A1  # ... and the synthetic held-out set (data_real.synthetic_eval_set)

_COVARIATE_KIND_P = (0.25, 0.35, 0.2, 0.2)
_MINI_MAX_PERIOD = 24  # mini-prior sinusoids have several cycles inside an M = 64 window


@dataclasses.dataclass(frozen=True)
class PriorConfig:
    """Prior hyper-parameters (spec §Method "Prior"; all [R]).

    Attributes:
      t_min, t_max: task length range (inclusive); banks are [n, t_max].
      max_feat: most covariates per task (<= F_MAX).
      periods: calendar / seasonal periods.
      gp_lengthscale: (lo, hi) RBF length-scale range (log-uniform) for GP covariates and the
        KernelSynth RBF / RQ kernels.
      n_rff: random Fourier features per GP covariate path.
      p_kernelsynth: probability of a univariate KernelSynth task.
      p_spike: probability of a periodic-with-spikes task; covariate tasks take the rest.
      ar_phi: (lo, hi) AR(1) coefficient range of the covariate-task noise.
      max_kernels: most kernels combined in a KernelSynth task.
      tanh_width: hidden width of the random tanh covariate response.
      max_lag: covariate lags are drawn from {0, ..., max_lag}.
      mini: the smoke "mini prior": every task is a sinusoid plus one covariate.
    """

    t_min: int = 192
    t_max: int = T_MAX
    max_feat: int = F_MAX
    periods: tuple[int, ...] = (7, 12, 24, 52, 168)
    gp_lengthscale: tuple[float, float] = (5.0, 50.0)
    n_rff: int = 64
    p_kernelsynth: float = 0.30
    p_spike: float = 0.15
    ar_phi: tuple[float, float] = (0.0, 0.9)
    max_kernels: int = 3
    tanh_width: int = 8
    max_lag: int = 2
    mini: bool = False

    def __post_init__(self):
        if not 16 <= self.t_min <= self.t_max:
            raise ValueError(f"need 16 <= t_min <= t_max, got t_min={self.t_min}, "
                             f"t_max={self.t_max}")
        if not 1 <= self.max_feat <= F_MAX:
            raise ValueError(f"max_feat must be in 1..{F_MAX}, got {self.max_feat}")
        if not self.periods or min(self.periods) < 2 or min(self.periods) > self.t_min // 4:
            raise ValueError(f"periods must be non-empty, >= 2, with one <= t_min/4 = "
                             f"{self.t_min // 4}; got {self.periods}")
        if not 0 < self.gp_lengthscale[0] <= self.gp_lengthscale[1]:
            raise ValueError(f"gp_lengthscale must be 0 < lo <= hi, got {self.gp_lengthscale}")
        p = (self.p_kernelsynth, self.p_spike)
        if min(p) < 0 or sum(p) > 1:
            raise ValueError(f"p_kernelsynth={p[0]} and p_spike={p[1]} must be >= 0 with a "
                             "sum <= 1")
        if not 0 <= self.ar_phi[0] <= self.ar_phi[1] < 1:
            raise ValueError(f"ar_phi must be 0 <= lo <= hi < 1, got {self.ar_phi}")
        if self.max_kernels < 1 or self.n_rff < 1 or self.tanh_width < 1 or self.max_lag < 0:
            raise ValueError("max_kernels, n_rff, tanh_width must be >= 1 and max_lag >= 0, got "
                             f"{self.max_kernels}, {self.n_rff}, {self.tanh_width}, "
                             f"{self.max_lag}")

    @property
    def p_covariate(self) -> float:
        return 1.0 - self.p_kernelsynth - self.p_spike


class Task(NamedTuple):
    """One series. X [T, F] float32 (F in 0..F_MAX, unpadded), y [T] float32, family (int index
    into FAMILIES), period (int >= 1, the target's dominant season; 1 if none).

    ``period`` is the season m for MASE / seasonal naive. Used as the RBfcst grouping period
    (groups floor(s / period)) it can be as large as 168, which leaves only a few groups in a
    short history; the spec's inference default groups by 5.
    """

    X: np.ndarray
    y: np.ndarray
    family: int
    period: int


class Bank(NamedTuple):
    """n tasks padded to T_max = cfg.t_max: y [n, T_max] float32 (zeros after ``length``),
    X [n, T_max, F_MAX] float32 (zeros after ``length`` and in columns >= ``n_feat``), length
    [n] int32, n_feat [n] int32, family [n] int32 (index into FAMILIES), period [n] int32."""

    y: np.ndarray
    X: np.ndarray
    length: np.ndarray
    n_feat: np.ndarray
    family: np.ndarray
    period: np.ndarray


_CONTROLLER = []


def _one_blas_thread():
    """Context: one BLAS thread. On 2 shared cores a threaded 512 x 512 Cholesky (and the RFF
    matvecs) run ~10x slower than single-threaded ones."""
    if ThreadpoolController is None:  # pragma: no cover
        return contextlib.nullcontext()
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0].limit(limits=1, user_api="blas")


# --------------------------------------------------------------------------- building blocks

def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _standardize(v: np.ndarray) -> np.ndarray:
    sd = v.std()
    return (v - v.mean()) / (sd if sd > 1e-8 else 1.0)


def _periods_upto(cfg: PriorConfig, limit: float) -> list[int]:
    ps = [p for p in cfg.periods if p <= limit]
    return ps or [min(cfg.periods)]


def rff_path(rng: np.random.Generator, T: int, lengthscale: float, n_rff: int) -> np.ndarray:
    """An approximate RBF-GP path with unit variance via random Fourier features.

    f(t) = sqrt(2 / n) sum_k a_k cos(w_k t + b_k), w_k ~ N(0, 1/l^2), b_k ~ U[0, 2 pi),
    a_k ~ N(0, 1): E f(t) f(t') -> exp(-(t - t')^2 / (2 l^2)).

    Returns:
      [T] float64.
    """
    w = rng.normal(0.0, 1.0 / lengthscale, n_rff)
    b = rng.uniform(0.0, 2 * np.pi, n_rff)
    a = rng.normal(0.0, 1.0, n_rff)
    t = np.arange(T, dtype=np.float64)
    return np.sqrt(2.0 / n_rff) * (np.cos(np.outer(t, w) + b) @ a)


def _ar1(rng: np.random.Generator, scale: np.ndarray, phi: float) -> np.ndarray:
    """AR(1) e_t = phi e_{t-1} + sqrt(1 - phi^2) scale_t z_t (stationary sd ~ scale)."""
    z = rng.normal(size=scale.shape) * scale * np.sqrt(1.0 - phi * phi)
    z[0] /= np.sqrt(1.0 - phi * phi)  # start in the stationary distribution
    return signal.lfilter([1.0], [1.0, -phi], z)


def _lagged(x: np.ndarray, lag: int) -> np.ndarray:
    """x_{t - lag}, holding the first value for t < lag."""
    if lag == 0:
        return x
    return np.concatenate([np.full(lag, x[0]), x[:-lag]])


def _covariate(rng: np.random.Generator, cfg: PriorConfig, T: int, kind: str) -> np.ndarray:
    t = np.arange(T, dtype=np.float64)
    if kind == "calendar":  # sin or cos of the phase at a random calendar start
        p = int(rng.choice(cfg.periods))
        phase = 2 * np.pi * (t + rng.integers(p)) / p
        return np.sin(phase) if rng.random() < 0.5 else np.cos(phase)
    if kind == "gp":
        return rff_path(rng, T, _loguniform(rng, *cfg.gp_lengthscale), cfg.n_rff)
    if kind == "pulses":  # events at a random rate, each decaying exponentially; known ahead
        rate = 1.0 / rng.uniform(10.0, 60.0)
        impulses = (rng.random(T) < rate) * rng.uniform(0.5, 1.5, T)
        if not impulses.any():
            impulses[rng.integers(T)] = 1.0
        decay = np.exp(-1.0 / rng.uniform(1.0, 10.0))
        return signal.lfilter([1.0], [1.0, -decay], impulses)
    if kind == "steps":  # piecewise-constant regimes
        cuts = np.sort(rng.integers(1, T, rng.integers(1, 5)))
        levels = rng.normal(size=cuts.size + 1)
        return levels[np.searchsorted(cuts, t, side="right")]
    raise ValueError(f"covariate kind must be one of {COVARIATE_KINDS}, got {kind!r}")


def _response(rng: np.random.Generator, cfg: PriorConfig, x: np.ndarray) -> np.ndarray:
    """h(x): the standardised covariate itself or a random width-`tanh_width` tanh net of it,
    standardised to zero mean and unit sd."""
    xs = _standardize(x)
    if rng.random() < 0.5:
        return xs
    w = rng.normal(0.0, 1.5, cfg.tanh_width)
    b = rng.normal(0.0, 1.0, cfg.tanh_width)
    v = rng.normal(0.0, 1.0, cfg.tanh_width)
    h = np.tanh(np.outer(xs, w) + b) @ v
    return _standardize(h) if h.std() > 1e-3 else xs


def _finish(rng: np.random.Generator, y: np.ndarray) -> np.ndarray:
    """Random sign flip, scale (log-uniform [0.1, 1000]) and offset (scale * U[-3, 3])."""
    scale = 10.0 ** rng.uniform(-1.0, 3.0)
    sign = 1.0 if rng.random() < 0.5 else -1.0
    return (sign * scale * _standardize(y) + scale * rng.uniform(-3.0, 3.0)).astype(np.float32)


def _task(X: np.ndarray, y: np.ndarray, family: int, period: int) -> Task:
    return Task(np.asarray(X, np.float32), y.astype(np.float32), int(family), int(period))


# --------------------------------------------------------------------------- families

def sample_covariate_task(rng: np.random.Generator, cfg: PriorConfig, T: int) -> Task:
    """A generic covariate task: y = trend + seasonal + sum_f beta_f h_f(x_{f,t-l_f}) + AR(1).

    Args:
      rng: numpy generator.
      cfg: prior configuration.
      T: length.

    Returns:
      Task with family COVARIATE, F in 1..cfg.max_feat.
    """
    t = np.arange(T, dtype=np.float64)
    u = t / T
    F = int(rng.integers(1, cfg.max_feat + 1))
    X = np.zeros((T, F))
    effect = np.zeros(T)
    for f in range(F):
        X[:, f] = _covariate(rng, cfg, T, COVARIATE_KINDS[rng.choice(4, p=_COVARIATE_KIND_P)])
        beta = rng.uniform(0.7, 1.5) * (1.0 if rng.random() < 0.5 else -1.0)
        lag = int(rng.integers(cfg.max_lag + 1))
        effect += beta * _lagged(_response(rng, cfg, X[:, f]), lag)
    trend = rng.normal(0.0, 0.7) * u + (rng.normal(0.0, 0.5) * u * u if rng.random() < 0.3
                                        else 0.0)
    seasonal, period = np.zeros(T), 1
    if rng.random() < 0.8:
        period = int(rng.choice(_periods_upto(cfg, T / 2)))
        amp = rng.uniform(0.3, 1.0)
        for k in (1, 2):  # two harmonics of the dominant period
            c = rng.normal(size=2) * amp / k
            seasonal += c[0] * np.sin(2 * np.pi * k * t / period) + c[1] * np.cos(
                2 * np.pi * k * t / period)
        if rng.random() < 0.3:  # a weaker second season
            p2 = int(rng.choice(_periods_upto(cfg, T / 2)))
            seasonal += 0.3 * amp * np.sin(2 * np.pi * t / p2 + rng.uniform(0, 2 * np.pi))
    hetero = np.exp(rng.uniform(0.0, 0.7) * rff_path(rng, T, 50.0, cfg.n_rff))
    noise = _ar1(rng, rng.uniform(0.05, 0.4) * hetero, rng.uniform(*cfg.ar_phi))
    return _task(X, _finish(rng, trend + seasonal + effect + noise), COVARIATE, period)


# A KernelSynth kernel is kept as terms [(d, s)]: K = sum_j diag(d_j) Toeplitz(s_j) diag(d_j)
# with d_j [T] (None = ones) and s_j [T] a stationary kernel's values at lags 0..T-1. Sums
# concatenate the terms; products multiply them pairwise, since (D S D) * (E R E) =
# (DE)(S * R)(DE) elementwise. Lag rows cost O(T); K is one strided Toeplitz view per term.
_Terms = list[tuple[np.ndarray | None, np.ndarray]]


def _kernel_terms(rng: np.random.Generator, cfg: PriorConfig, name: str,
                  T: int) -> tuple[_Terms, int]:
    """One KernelSynth kernel (unit variance except white) as terms, and its period (or 0)."""
    lag = np.arange(T, dtype=np.float64)
    if name == "rbf":
        ls = _loguniform(rng, *cfg.gp_lengthscale)
        return [(None, np.exp(-0.5 * (lag / ls) ** 2))], 0
    if name == "periodic":
        p = int(rng.choice(_periods_upto(cfg, T / 2)))
        ls = rng.uniform(0.5, 1.5)
        return [(None, np.exp(-2.0 * np.sin(np.pi * lag / p) ** 2 / ls**2))], p
    if name == "linear":  # (t - c)(t' - c) / T^2 + 0.1
        tc = (lag - rng.uniform(0.0, T)) / T
        return [(tc, np.ones(T)), (None, np.full(T, 0.1))], 0
    if name == "rq":
        ls = _loguniform(rng, *cfg.gp_lengthscale)
        alpha = _loguniform(rng, 0.5, 5.0)
        return [(None, (1.0 + lag**2 / (2 * alpha * ls * ls)) ** (-alpha))], 0
    if name == "white":
        row = np.zeros(T)
        row[0] = rng.uniform(0.01, 0.1)
        return [(None, row)], 0
    raise ValueError(f"kernel must be one of {KERNELS}, got {name!r}")


def _times(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return b if a is None else (a if b is None else a * b)


def _toeplitz(s: np.ndarray) -> np.ndarray:
    """The symmetric Toeplitz matrix [T, T] with entries s[|i - j|], as a read-only view."""
    T = s.shape[0]
    v = np.concatenate([s[:0:-1], s])  # [2T - 1]: s_{T-1} .. s_1 s_0 s_1 .. s_{T-1}
    return np.lib.stride_tricks.sliding_window_view(v, T)[::-1]  # row i starts at T - 1 - i


def _gram(terms: _Terms, T: int) -> np.ndarray:
    """K [T, T] float64 from its terms."""
    K = np.zeros((T, T))
    for d, s in terms:
        K += _toeplitz(s) if d is None else _toeplitz(s) * np.outer(d, d)
    return K


def kernelsynth_gram(rng: np.random.Generator, cfg: PriorConfig, T: int,
                     kernels: Sequence[str] | None = None,
                     ops: Sequence[str] | None = None) -> tuple[np.ndarray, int]:
    """A random KernelSynth covariance (Ansari et al. 2024, "Chronos", §4.2, Algorithm 2).

    1..cfg.max_kernels kernels from KERNELS (the first never 'white'), combined left to right
    by + or x with equal odds. Time is the integer step index.

    Args:
      rng: numpy generator.
      cfg: prior configuration.
      T: length.
      kernels: fix the kernel names instead of sampling them.
      ops: with ``kernels``, the len(kernels) - 1 combinations, each '+' or '*' (default +).

    Returns:
      (K [T, T] float64, period): period is the first periodic kernel's period, 0 if none.
    """
    if kernels is None:
        n = int(rng.integers(1, cfg.max_kernels + 1))
        names = [KERNELS[rng.integers(4)]] + [KERNELS[rng.integers(5)] for _ in range(n - 1)]
        ops = ["+" if rng.random() < 0.5 else "*" for _ in range(n - 1)]
    else:
        names = list(kernels)
        ops = ["+"] * (len(names) - 1) if ops is None else list(ops)
        if not names or any(k not in KERNELS for k in names):
            raise ValueError(f"kernels must name one or more of {KERNELS}, got {kernels!r}")
        if len(ops) != len(names) - 1 or any(o not in "+*" or not o for o in ops):
            raise ValueError(f"ops must be {len(names) - 1} of '+' / '*', got {ops!r}")
    terms, period = None, 0
    for i, name in enumerate(names):
        new, p = _kernel_terms(rng, cfg, name, T)
        period = period or p
        if terms is None:
            terms = new
        elif ops[i - 1] == "+":
            terms = terms + new
        else:
            terms = [(_times(d1, d2), s1 * s2) for d1, s1 in terms for d2, s2 in new]
    return _gram(terms, T), period


def sample_kernelsynth_task(rng: np.random.Generator, cfg: PriorConfig, T: int,
                            kernels: Sequence[str] | None = None,
                            ops: Sequence[str] | None = None) -> Task:
    """A univariate KernelSynth GP sample y = chol(K + jitter I) z, z ~ N(0, I) (float64).

    Args:
      rng: numpy generator.
      cfg: prior configuration.
      T: length.
      kernels, ops: fix the kernel expression (see :func:`kernelsynth_gram`).

    Returns:
      Task with family KERNELSYNTH, F = 0, period = the first periodic kernel's period (1 if
      none).
    """
    K, period = kernelsynth_gram(rng, cfg, T, kernels, ops)
    z = rng.normal(size=T)
    jitter = 1e-6 * float(np.mean(np.diag(K)))
    diag = np.arange(T)
    with _one_blas_thread():
        for _ in range(6):
            Kj = K.copy()
            Kj[diag, diag] += jitter
            chol, info = lapack.dpotrf(Kj, lower=1, clean=0, overwrite_a=1)
            if info == 0:
                break
            jitter *= 10.0  # reaches 10 % of the mean variance at most
        else:  # pragma: no cover
            raise np.linalg.LinAlgError("KernelSynth Gram matrix is not positive definite")
        y = blas.dtrmv(chol, z, lower=1)  # the upper triangle of chol is not cleaned: ignored
    return _task(np.zeros((T, 0)), _finish(rng, y), KERNELSYNTH, max(period, 1))


def sample_spike_task(rng: np.random.Generator, cfg: PriorConfig, T: int) -> Task:
    """A periodic-with-spikes task: a sinusoid of period p plus one-step spikes every p steps.

    p is drawn from cfg.periods <= T/4. Half the tasks are univariate with a spike every
    period; the other half have each spike occur with probability in [0.6, 1] (at least two
    occur) and one covariate, the known-ahead 0/1 spike indicator.

    Returns:
      Task with family SPIKE, F in {0, 1}, period p.
    """
    t = np.arange(T, dtype=np.float64)
    p = int(rng.choice(_periods_upto(cfg, T / 4)))
    amp = rng.uniform(0.5, 1.5)
    base = amp * np.sin(2 * np.pi * t / p + rng.uniform(0, 2 * np.pi))
    if rng.random() < 0.5:
        base += 0.3 * amp * np.sin(4 * np.pi * t / p + rng.uniform(0, 2 * np.pi))
    with_cov = rng.random() < 0.5
    slots = (t.astype(np.int64) % p) == rng.integers(p)  # >= 4 slots since p <= T / 4
    at = slots & (rng.random(T) < rng.uniform(0.6, 1.0)) if with_cov else slots
    if at.sum() < 2:  # keep the spikes recurring
        at[np.flatnonzero(slots)[:2]] = True
    height = rng.uniform(3.0, 8.0) * amp * (1.0 if rng.random() < 0.8 else -1.0)
    spikes = at * height * rng.uniform(0.85, 1.15, T)  # heights jitter +-15 %
    noise = _ar1(rng, np.full(T, rng.uniform(0.02, 0.1) * amp), rng.uniform(0.0, 0.5))
    X = at[:, None].astype(np.float64) if with_cov else np.zeros((T, 0))
    return _task(X, _finish(rng, base + spikes + noise), SPIKE, p)


def sample_mini_task(rng: np.random.Generator, cfg: PriorConfig, T: int) -> Task:
    """The smoke mini prior: y = A sin(2 pi t / p + phase) + beta x_t + eps, one GP covariate x.

    Returns:
      Task with family MINI, F = 1, period p (cfg.periods <= 24).
    """
    t = np.arange(T, dtype=np.float64)
    p = int(rng.choice(_periods_upto(cfg, min(T / 4, _MINI_MAX_PERIOD))))
    x = rff_path(rng, T, _loguniform(rng, *cfg.gp_lengthscale), cfg.n_rff)
    beta = rng.uniform(0.5, 1.5) * (1.0 if rng.random() < 0.5 else -1.0)
    y = (rng.uniform(0.5, 1.5) * np.sin(2 * np.pi * t / p + rng.uniform(0, 2 * np.pi))
         + beta * _standardize(x) + rng.normal(0.0, rng.uniform(0.02, 0.1), T))
    return _task(x[:, None], _finish(rng, y), MINI, p)


def sample_task(rng: np.random.Generator, cfg: PriorConfig = PriorConfig()) -> Task:
    """One prior task of length T ~ U{cfg.t_min..cfg.t_max} from the family mixture.

    Args:
      rng: numpy generator (``np.random.default_rng(seed)``).
      cfg: prior configuration; ``cfg.mini`` gives only mini tasks.

    Returns:
      Task (X [T, F], y [T], family, period).
    """
    T = int(rng.integers(cfg.t_min, cfg.t_max + 1))
    if cfg.mini:
        return sample_mini_task(rng, cfg, T)
    u = rng.random()
    if u < cfg.p_kernelsynth:
        return sample_kernelsynth_task(rng, cfg, T)
    if u < cfg.p_kernelsynth + cfg.p_spike:
        return sample_spike_task(rng, cfg, T)
    return sample_covariate_task(rng, cfg, T)


def task_rng(seed: int, index: int, stream: int = BANK_STREAM) -> np.random.Generator:
    """The generator of task ``index`` in ``stream`` (BANK_STREAM or EVAL_STREAM) for ``seed``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream, index)))


def stack(tasks: Sequence[Task], t_max: int) -> Bank:
    """Pads tasks into a Bank of width t_max (zeros after each length and beyond n_feat)."""
    n = len(tasks)
    y = np.zeros((n, t_max), np.float32)
    X = np.zeros((n, t_max, F_MAX), np.float32)
    length = np.zeros(n, np.int32)
    n_feat = np.zeros(n, np.int32)
    for i, task in enumerate(tasks):
        T, F = task.X.shape
        if T > t_max or F > F_MAX or task.y.shape != (T,):
            raise ValueError(f"task {i}: X {task.X.shape}, y {task.y.shape} do not fit "
                             f"[<= {t_max}, <= {F_MAX}]")
        y[i, :T] = task.y
        X[i, :T, :F] = task.X
        length[i], n_feat[i] = T, F
    family = np.array([task.family for task in tasks], np.int32)
    period = np.array([task.period for task in tasks], np.int32)
    return Bank(y, X, length, n_feat, family, period)


def make_bank(seed: int, n: int, cfg: PriorConfig = PriorConfig()) -> Bank:
    """A bank of n prior tasks; task i comes from ``task_rng(seed, i)``.

    Args:
      seed: integer seed.
      n: number of tasks (4096 in the default experiment).
      cfg: prior configuration.

    Returns:
      Bank padded to cfg.t_max.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    with _one_blas_thread():
        tasks = [sample_task(task_rng(seed, i), cfg) for i in range(n)]
    return stack(tasks, cfg.t_max)
