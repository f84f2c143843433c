"""Baselines for covariate-aware probabilistic forecasting (spec §Baselines and peers).

Every method has one signature, so the evaluator treats them (and the model) alike::

    fn(y_train [L], X_train [L, F], X_test [H, F], H, m, key) -> (mean [H], q [H, 9])

``F`` may be 0 (``X`` of shape ``[L, 0]``; ``None`` is accepted too), ``m`` is the season
length (``m = 1``: no season) and ``key`` a typed ``jax.random.key`` that only stochastic
methods would read (none of the ones below is stochastic: each is a deterministic function
of its data). Outputs are float32 NumPy arrays; ``q`` holds the levels of
:data:`icml26_jax.baguan_ts.losses.QUANTILES` (0.1, ..., 0.9) and is sorted along its last
axis.

Methods ([R] marks our choices where the spec leaves them open):

- :func:`seasonal_naive`, :func:`naive`, :func:`drift`: empirical quantiles of in-sample
  errors, scaled by the square root of the number of seasons/steps ahead [R].
- :func:`retrieval_average`: the RBfcst supports' futures, put on the query's scale, averaged
  ("RBfcst as the forecaster"; kept apart from the model) [R].
- :func:`tabular_qr`: a linear 9-quantile regression fitted with Adam in JAX: the in-house
  anchor for the tabular (TabPFN-TS) paradigm [R].
- :func:`ets`: statsmodels ``ETSModel`` (additive error, damped trend, additive season).
- :func:`sarimax_exog`: statsmodels ``SARIMAX`` with covariates and Fourier terms as exog.

:data:`METHODS` maps each name to its function.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
from scipy.special import ndtri
from threadpoolctl import threadpool_limits  # a scikit-learn dependency

from icml26_jax.baguan_ts import retrieval
from icml26_jax.baguan_ts.losses import QUANTILES
from icml26_jax.core.optim import promotion_safe

Forecast = tuple[np.ndarray, np.ndarray]  # (mean [H], q [H, 9]), float32

_NQ = len(QUANTILES)
_Z = ndtri(QUANTILES)  # standard-normal quantiles of the nine levels, [9]


# --------------------------------------------------------------------------- validation


def _check_int(name: str, value, lo: int) -> int:
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not is_int or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _prepare(y_train, X_train, X_test, H, m, *, min_len: int, method: str):
    """Checks the common signature; returns float64 ``y [L]``, ``Xtr [L, F]``, ``Xte [H, F]``."""
    H = _check_int("H", H, 1)
    m = _check_int("m", m, 1)
    y = np.asarray(y_train, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError(f"y_train must be a 1-D series [L], got shape {y.shape}")
    L = y.shape[0]
    if not np.all(np.isfinite(y)):
        raise ValueError("y_train must be finite (interpolate missing values before forecasting)")
    Xtr = np.zeros((L, 0)) if X_train is None else np.asarray(X_train, dtype=np.float64)
    Xte = np.zeros((H, 0)) if X_test is None else np.asarray(X_test, dtype=np.float64)
    if Xtr.ndim != 2 or Xtr.shape[0] != L:
        raise ValueError(f"X_train must have shape [L={L}, F], got {Xtr.shape}")
    if Xte.ndim != 2 or Xte.shape != (H, Xtr.shape[1]):
        raise ValueError(f"X_test must have shape [H={H}, F={Xtr.shape[1]}], got {Xte.shape}")
    if not (np.all(np.isfinite(Xtr)) and np.all(np.isfinite(Xte))):
        raise ValueError("X_train and X_test must be finite")
    if L < min_len:
        raise ValueError(f"{method} needs len(y_train) >= {min_len} (for H={H}, m={m}), got L={L}")
    return y, Xtr, Xte, H, m


def _finish(mean, q) -> Forecast:
    """float32, quantiles sorted along the last axis (removes any crossing)."""
    mean = np.asarray(mean, dtype=np.float32)
    q = np.sort(np.asarray(q, dtype=np.float32), axis=-1)
    return mean, q


def _error_quantiles(err: np.ndarray) -> np.ndarray:
    """Empirical (linear-interpolation) quantiles of in-sample errors, [9]."""
    return np.quantile(err, QUANTILES)


# ------------------------------------------------------------------------- naive family


def seasonal_naive(y_train, X_train, X_test, H, m, key=None) -> Forecast:
    """Seasonal naive: ``ŷ_{L+h} = y_{L+h-m⌈h/m⌉}`` (1-based times); covariate-blind.

    Quantiles [R]: ``ŷ_{L+h} + Q_q(e)·√⌈h/m⌉`` with ``Q_q`` the empirical quantiles (linear
    interpolation) of the in-sample seasonal-naive errors ``e_t = y_t − y_{t−m}``. Empirical
    rather than Gaussian so spiky or skewed errors keep their shape; the ``√k`` growth is the
    random-walk-over-seasons rule. ``m = 1`` is the naive method with seasonal-naive errors.

    Raises:
      ValueError: if ``L < m + 1`` (no in-sample error exists) or the inputs are malformed.
    """
    y, _, _, H, m = _prepare(y_train, X_train, X_test, H, m, min_len=m + 1, method="seasonal_naive")
    L = y.shape[0]
    h = np.arange(1, H + 1)
    k = -(-h // m)  # ⌈h/m⌉
    mean = y[L + h - m * k - 1]
    err = y[m:] - y[:-m]
    q = mean[:, None] + np.sqrt(k)[:, None] * _error_quantiles(err)[None, :]
    return _finish(mean, q)


def naive(y_train, X_train, X_test, H, m, key=None) -> Forecast:
    """Last value; quantiles ``y_L + Q_q(Δy)·√h`` from the in-sample one-step errors [R]."""
    y, _, _, H, m = _prepare(y_train, X_train, X_test, H, m, min_len=2, method="naive")
    h = np.arange(1, H + 1)
    mean = np.full(H, y[-1])
    q = mean[:, None] + np.sqrt(h)[:, None] * _error_quantiles(np.diff(y))[None, :]
    return _finish(mean, q)


def drift(y_train, X_train, X_test, H, m, key=None) -> Forecast:
    """The line through the first and last points: ``ŷ_{L+h} = y_L + h·(y_L − y_1)/(L − 1)``.

    Quantiles [R]: ``ŷ + Q_q(e)·√h`` with ``e_t = y_t − y_{t−1} − slope`` the in-sample
    one-step errors of the drift model (the same √h rule as :func:`naive`; the extra
    slope-estimation variance of the textbook interval is left out).
    """
    y, _, _, H, m = _prepare(y_train, X_train, X_test, H, m, min_len=2, method="drift")
    L = y.shape[0]
    slope = (y[-1] - y[0]) / (L - 1)
    h = np.arange(1, H + 1)
    mean = y[-1] + h * slope
    q = mean[:, None] + np.sqrt(h)[:, None] * _error_quantiles(np.diff(y) - slope)[None, :]
    return _finish(mean, q)


# --------------------------------------------------------------------- retrieval average


def _feasible_window(L: int, H: int, M: int) -> int:
    """The retrieval window: ``M`` when ``L >= M + H``, else the largest that fits [R].

    ``min(M, L − H)`` keeps at least ``H + 1`` candidate starts; when even that leaves fewer
    than 2 known steps per window, ``min(M, L)`` (a single candidate) is the last resort.
    """
    if L >= M + H:
        return M
    for cand in (min(M, L - H), min(M, L)):
        if cand >= H + 2:
            return cand
    raise ValueError(
        f"retrieval_average needs len(y_train) >= H + 2 = {H + 2} (a window of H + 2 steps), "
        f"got L={L}")


# One compile per (L, M, H, K, period): far cheaper than dispatching (and compiling) each
# of rbfcst's ops eagerly for every new shape.
_rbfcst = jax.jit(retrieval.rbfcst, static_argnames=("L", "M", "H", "K", "period", "l_on_znorm"))


def retrieval_average(y_train, X_train, X_test, H, m, key=None, *, M: int = 64, K: int = 8,
                      period: int | None = None) -> Forecast:
    """RBfcst as the forecaster: the K retrieved supports' futures on the query's scale [R].

    Supports come from :func:`icml26_jax.baguan_ts.retrieval.rbfcst` (target-space only, so
    covariates are ignored; every support ends by the origin). Support ``k``'s first ``M − H``
    steps are its known part ``a_k`` and its last ``H`` steps its future ``f_k``. Each future
    is moved onto the query's scale by matching moments with the query history
    ``b = y[L − M + H : L]``::

        f̃_k = (f_k − mean(a_k)) · sd(b) / sd(a_k) + mean(b)

    (scale 1, i.e. a pure shift, when ``sd(a_k)`` is ~0). The mean is the average of the valid
    (unmasked) ``f̃_k``; the quantiles are their empirical quantiles across supports (linear
    interpolation), hence zero-width when a single support is valid.

    Fallback [R]: when ``L < M + H`` the window shrinks to ``min(M, L − H)`` (at least
    ``H + 1`` candidates), then to ``min(M, L)``; it must keep ``H + 2`` steps.

    Args:
      M: window length (spec CPU configuration: 64).
      K: number of supports (8).
      period: the retrieval's de-duplication bin (one support per ``⌊s/period⌋``); ``None``
        uses the spec's inference value 5, the same retrieval the model sees.

    Raises:
      ValueError: on malformed inputs, ``M < H + 2``, ``K < 1``, ``period < 1`` or
        ``L < H + 2``.
    """
    y, _, _, H, m = _prepare(y_train, X_train, X_test, H, m, min_len=H + 2,
                             method="retrieval_average")
    M = _check_int("M", M, 2)
    K = _check_int("K", K, 1)
    if M < H + 2:
        raise ValueError(f"M must be >= H + 2 = {H + 2} (two known steps per window), got {M}")
    period = 5 if period is None else _check_int("period", period, 1)
    L = y.shape[0]
    M = _feasible_window(L, H, M)
    y_full = jnp.asarray(np.concatenate([y, np.zeros(H)]), jnp.float32)  # >= L is never read
    # Scoring never reads covariates and only the targets are used here: pass none, so the
    # compile does not depend on F.
    no_cov = jnp.zeros((L + H, 0), jnp.float32)
    ctx = _rbfcst(y_full, no_cov, L=L, M=M, H=H, K=K, period=period)
    targ = np.asarray(ctx.targ, dtype=np.float64)[:-1, :, 0]  # supports only, [K', M]
    valid = np.asarray(ctx.mask, dtype=bool).reshape(-1)[: targ.shape[0]]
    if not valid.any():  # cannot happen for L >= M (s = 0 is a candidate); kept as a guard
        raise ValueError(f"retrieval_average found no support for L={L}, M={M}, H={H}")
    known, fut = targ[valid, : M - H], targ[valid, M - H:]  # [k, M−H], [k, H]
    hist = y[L - M + H: L]
    mu_a, sd_a = known.mean(axis=1, keepdims=True), known.std(axis=1, keepdims=True)
    tiny = 1e-8 * (1.0 + np.abs(mu_a))
    scale = np.where(sd_a > tiny, hist.std() / np.where(sd_a > tiny, sd_a, 1.0), 1.0)
    fut = (fut - mu_a) * scale + hist.mean()
    mean = fut.mean(axis=0)
    q = np.quantile(fut, QUANTILES, axis=0).T  # [H, 9]
    return _finish(mean, q)


# ---------------------------------------------------------------- tabular quantile regression

_QR_MAX_LAGS = 32
_QR_STEPS = 300
_QR_LR = 1e-2


def _qr_fit_impl(Z, t, w, steps: int, lr):
    """Fits ``Z @ W + b`` to the 9 pinball losses jointly with Adam (full batch).

    Args:
      Z: [N, D] float32 standardised design; t: [N] float32 standardised targets;
      w: [N] float32 row weights (0 for bucket padding); lr: float32 scalar.

    Returns:
      (W [D, 9], b [9]).
    """
    qs = jnp.asarray(QUANTILES, jnp.float32)
    params = (jnp.zeros((Z.shape[1], _NQ), jnp.float32), jnp.zeros((_NQ,), jnp.float32))
    opt = promotion_safe(optax.adam(lr))  # optax's bias correction mixes float and int32

    def loss_fn(p):
        u = t[:, None] - (Z @ p[0] + p[1])  # [N, 9]
        rho = u * (qs - (u < 0).astype(jnp.float32))
        return jnp.sum(w[:, None] * rho) / (jnp.sum(w) * jnp.float32(_NQ))

    def step(_, carry):
        p, s = carry
        g = jax.grad(loss_fn)(p)
        upd, s = opt.update(g, s, p)
        return optax.apply_updates(p, upd), s

    return jax.lax.fori_loop(0, steps, step, (params, opt.init(params)))[0]


# Module-level jit: compiled once per (N, D) bucket and reused across calls and series.
_qr_fit = jax.jit(_qr_fit_impl, static_argnames=("steps",))


def _qr_design(ys, Xs, L, H, m, p, origins, horizons):
    """Rows for (origin t, horizon h) pairs: the history is ``y[:t]``, the target ``y[t+h−1]``.

    Columns: lags ``ys[t−1], …, ys[t−p]``; covariates at the target time; ``sin``/``cos`` of the
    season phase ``(τ mod m)/m`` (if ``m > 1``); the time index ``τ / L``; a horizon one-hot.
    Returns ``(Z_dense [N, D1], onehot [N, H])``: only the dense part is standardised later.
    """
    tau = origins + horizons - 1  # target times, [N]
    lags = ys[origins[:, None] - np.arange(1, p + 1)[None, :]]  # [N, p]
    cols = [lags, Xs[tau]]
    if m > 1:
        phase = 2.0 * np.pi * (tau % m) / m
        cols += [np.sin(phase)[:, None], np.cos(phase)[:, None]]
    cols.append((tau / L)[:, None])
    onehot = np.eye(H)[horizons - 1]
    return np.concatenate(cols, axis=1), onehot


def tabular_qr(y_train, X_train, X_test, H, m, key=None) -> Forecast:
    """Direct multi-horizon linear quantile regression in JAX (the tabular-paradigm anchor) [R].

    Features for target time ``τ = t + h − 1`` seen from origin ``t``: ``p = min(32,
    ⌊(L − H)/2⌋)`` lags of y before the origin, the covariates at ``τ`` (known in the future),
    sin/cos of the season phase ``(τ mod m)/m`` when ``m > 1``, a normalised time index
    ``τ/L``, and a one-hot of ``h``. Training rows are all pairs with ``p <= t`` and
    ``τ <= L − 1``. The target and the dense features are standardised with training
    statistics (one-hot columns kept 0/1); rows are zero-weight padded to a power of two and
    columns zero-padded to a multiple of 16, so the jitted fit compiles once per bucket. A
    linear map with 9 outputs is fitted to the mean of the 9 pinball losses by 300
    full-batch ``optax.adam(1e-2)`` steps from zero (converged: 1,000 or 3,000 steps or
    lr 3e-2 change the MAE by < 0.02 on our checks); the quantiles are then sorted, and the
    mean is the q0.5 output (MASE rewards the median; no separate L2 head).

    The fit is deterministic (zero init, full batch); ``key`` is unused.

    Raises:
      ValueError: on malformed inputs or ``L < H + 2`` (at least one lag and training row).
    """
    y, Xtr, Xte, H, m = _prepare(y_train, X_train, X_test, H, m, min_len=H + 2, method="tabular_qr")
    L = y.shape[0]
    mu, sd = y.mean(), y.std()
    sd = sd if sd > 1e-12 * (1.0 + abs(mu)) else 1.0
    ys = (y - mu) / sd
    X = np.concatenate([Xtr, Xte], axis=0)
    xmu, xsd = Xtr.mean(axis=0), Xtr.std(axis=0)
    Xs = (X - xmu) / np.where(xsd > 1e-12, xsd, 1.0)

    p = min(_QR_MAX_LAGS, (L - H) // 2)
    o_tr, h_tr = [], []
    for h in range(1, H + 1):
        t = np.arange(p, L - h + 1)
        o_tr.append(t)
        h_tr.append(np.full(t.shape, h))
    o_tr, h_tr = np.concatenate(o_tr), np.concatenate(h_tr)
    dense, onehot = _qr_design(ys, Xs, L, H, m, p, o_tr, h_tr)
    target = ys[o_tr + h_tr - 1]
    dense_te, onehot_te = _qr_design(ys, Xs, L, H, m, p, np.full(H, L), np.arange(1, H + 1))

    cmu, csd = dense.mean(axis=0), dense.std(axis=0)
    csd = np.where(csd > 1e-12, csd, 1.0)
    Z = np.concatenate([(dense - cmu) / csd, onehot], axis=1)
    Zte = np.concatenate([(dense_te - cmu) / csd, onehot_te], axis=1)

    n, d = Z.shape
    n_pad = 1 << max(n - 1, 1).bit_length()  # next power of two
    d_pad = -(-d // 16) * 16  # zero columns get zero gradients, so their weights stay 0
    Zp = np.zeros((n_pad, d_pad), np.float32)
    Zp[:n, :d] = Z
    tp = np.zeros(n_pad, np.float32)
    tp[:n] = target
    wp = np.zeros(n_pad, np.float32)
    wp[:n] = 1.0
    W, b = _qr_fit(jnp.asarray(Zp), jnp.asarray(tp), jnp.asarray(wp), steps=_QR_STEPS,
                   lr=jnp.float32(_QR_LR))
    q_std = np.asarray(jnp.asarray(Zte, jnp.float32) @ W[:d] + b, dtype=np.float64)  # [H, 9]
    q = np.sort(q_std, axis=1) * sd + mu
    return _finish(q[:, _NQ // 2], q)


# ------------------------------------------------------------------------- statsmodels


@contextlib.contextmanager
def _statsmodels_quiet() -> Iterator[None]:
    """Silences statsmodels' warnings and pins BLAS to one thread.

    statsmodels' state-space fits make thousands of tiny LAPACK calls (the Kalman filter's
    stationary initialisation); a multithreaded OpenBLAS on busy shared cores makes each one
    20-30x slower (measured: 30 ms instead of 1.3 ms per SARIMAX(2,0,1) log-likelihood).
    """
    with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
        warnings.simplefilter("ignore")
        yield


def _standardise(y):
    mu, sd = y.mean(), y.std()
    return mu, (sd if sd > 1e-12 * (1.0 + abs(mu)) else 1.0)


def ets(y_train, X_train, X_test, H, m, key=None) -> Forecast:
    """statsmodels ``ETSModel``: additive error, damped additive trend, additive season.

    The season (``seasonal_periods=m``) is used when ``1 < m <= 52`` and ``L >= 2m``; the
    model is covariate-blind. It is fitted to the standardised series (additive ETS is
    affine-equivariant, and the optimiser behaves better at unit scale) and the forecasts are
    mapped back. Quantile ``q`` is a bound of ``get_prediction(L, L+H−1).pred_int(alpha)``
    with ``alpha = 2·min(q, 1 − q)``: the lower bound below 0.5, the upper above, and
    ``alpha = 1`` (mean ± 0) at 0.5. These are the exact Gaussian intervals for the linear
    ETS classes used here.

    Fallbacks [R], first that fits with finite forecasts wins: (A, Ad, A) -> (A, Ad, N) ->
    (A, N, N) simple exponential smoothing -> :func:`naive`. Convergence warnings are
    silenced.

    Raises:
      ValueError: on malformed inputs or ``L < 4``.
    """
    y, _, _, H, m = _prepare(y_train, X_train, X_test, H, m, min_len=4, method="ets")
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    L = y.shape[0]
    mu, sd = _standardise(y)
    ys = (y - mu) / sd
    specs = []
    if 1 < m <= 52 and L >= 2 * m:
        specs.append(dict(trend="add", damped_trend=True, seasonal="add", seasonal_periods=m))
    if L >= 6:  # a damped trend needs a few points beyond its 4 parameters
        specs.append(dict(trend="add", damped_trend=True))
    specs.append({})
    for spec in specs:
        try:
            with _statsmodels_quiet():
                # a pandas endog: ETS PredictionResults reads ``.index`` off its forecasts
                fit = ETSModel(pd.Series(ys), error="add", **spec).fit(disp=False, maxiter=200)
                pred = fit.get_prediction(start=L, end=L + H - 1)
                mean = np.asarray(pred.predicted_mean, dtype=np.float64)
                q = np.empty((H, _NQ))
                for j, lev in enumerate(QUANTILES):
                    lo_hi = np.asarray(pred.pred_int(alpha=2.0 * min(lev, 1.0 - lev)))
                    q[:, j] = lo_hi[:, 0] if lev < 0.5 else lo_hi[:, 1]
        except Exception:  # noqa: BLE001 - any numerical failure moves to the next spec
            continue
        if mean.shape == (H,) and np.all(np.isfinite(mean)) and np.all(np.isfinite(q)):
            return _finish(mean * sd + mu, q * sd + mu)
    return naive(y, None, None, H, m)


def _fourier(t: np.ndarray, m: int, pairs: int = 2) -> np.ndarray:
    """``sin, cos(2πk·t/m)`` for ``k = 1..min(pairs, ⌊m/2⌋)``; the all-zero sine at
    ``2k = m`` is left out. ``[T, ≤ 2·pairs]``."""
    cols = []
    for k in range(1, min(pairs, m // 2) + 1):
        ang = 2.0 * np.pi * k * t / m
        if 2 * k != m:
            cols.append(np.sin(ang))
        cols.append(np.cos(ang))
    return np.stack(cols, axis=1) if cols else np.zeros((t.shape[0], 0))


def _independent_columns(Z: np.ndarray) -> list[int]:
    """Greedy: the columns of ``Z`` that add rank beyond a constant and the earlier picks.

    Duplicated calendar covariates (a week sin/cos beside the Fourier terms) or a covariate
    constant over the training window would make the SARIMAX regression singular.
    """
    basis = np.ones((Z.shape[0], 1))
    keep = []
    for j in range(Z.shape[1]):
        col = Z[:, j]
        res = col - basis @ np.linalg.lstsq(basis, col, rcond=None)[0]
        if np.linalg.norm(res) > 1e-6 * max(np.linalg.norm(col), 1.0):
            keep.append(j)
            basis = np.concatenate([basis, col[:, None]], axis=1)
    return keep


SARIMAX_ORDERS = ((1, 0, 0), (2, 0, 1), (1, 1, 1))


def sarimax_exog(y_train, X_train, X_test, H, m, key=None, *, joint_mle: bool = True,
                 maxiter: int = 50) -> Forecast:
    """statsmodels ``SARIMAX`` with exog = covariates + 2 Fourier pairs of period ``m``.

    The exog columns are the standardised covariates and, when ``m > 1``, ``sin``/``cos``
    (``2πk·t/m``, ``k = 1, 2``) of the time index (seasonal SARIMAX at large ``m`` is very
    slow, hence Fourier terms); columns collinear with a constant or with earlier columns are
    dropped. Every order in (1,0,0), (2,0,1), (1,1,1) is fitted with ``trend='c'`` (in
    SARIMAX the constant enters the ARMA equation of the differenced series, so at ``d = 1``
    it is a drift) on the standardised series, and the AIC-best one forecasts. Quantiles are
    Gaussian: ``predicted_mean + z_q · se_mean`` of ``get_forecast(H, exog=...)``.

    Estimation: the joint MLE (L-BFGS, scale concentrated out) of the constant, the exog
    coefficients and the ARMA parameters, bounded at ``maxiter`` iterations, with
    ``cov_type='none'`` (only the AIC and the forecast are used). ``joint_mle=False`` [R] is a
    cheaper two-step regression with ARMA errors: the exog coefficients stay at SARIMAX's own
    ``start_params`` (OLS, on the differenced data when ``d = 1``) through ``fix_params``
    and only the constant and ARMA parameters are fitted (~1.5x faster, similar accuracy).

    Fallback [R]: if no order fits with finite output, :func:`naive`. Warnings are silenced.

    Raises:
      ValueError: on malformed inputs, ``maxiter < 1`` or ``L < 8``.
    """
    y, Xtr, Xte, H, m = _prepare(y_train, X_train, X_test, H, m, min_len=8, method="sarimax_exog")
    maxiter = _check_int("maxiter", maxiter, 1)
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    L = y.shape[0]
    mu, sd = _standardise(y)
    ys = (y - mu) / sd
    xmu, xsd = Xtr.mean(axis=0), Xtr.std(axis=0)
    xsd = np.where(xsd > 1e-12, xsd, 1.0)
    t = np.arange(L + H, dtype=np.float64)
    ex = np.concatenate([(np.concatenate([Xtr, Xte]) - xmu) / xsd, _fourier(t, m)], axis=1)
    ex = ex[:, _independent_columns(ex[:L])]
    ex_tr, ex_te = (ex[:L], ex[L:]) if ex.shape[1] else (None, None)
    k_exog = ex.shape[1]

    best = None
    for order in SARIMAX_ORDERS:
        n_par = 1 + order[0] + order[2] + k_exog
        if L - order[1] < n_par + 4:  # too short to estimate this order
            continue
        try:
            with _statsmodels_quiet():
                mod = SARIMAX(ys, exog=ex_tr, order=order, trend="c", concentrate_scale=True)
                fixed = {}
                if k_exog and not joint_mle:
                    names = mod.param_names[mod.k_trend: mod.k_trend + k_exog]
                    fixed = dict(zip(names, mod.start_params[mod.k_trend: mod.k_trend + k_exog]))
                with mod.fix_params(fixed):
                    res = mod.fit(disp=False, maxiter=maxiter, cov_type="none")
        except Exception:  # noqa: BLE001 - an order that fails to fit is skipped
            continue
        if np.isfinite(res.aic) and (best is None or res.aic < best.aic):
            best = res
    if best is not None:
        try:
            with _statsmodels_quiet():
                fc = best.get_forecast(H, exog=ex_te)
                mean = np.asarray(fc.predicted_mean, dtype=np.float64)
                se = np.asarray(fc.se_mean, dtype=np.float64)
        except Exception:  # noqa: BLE001
            mean = se = np.full(H, np.nan)
        if np.all(np.isfinite(mean)) and np.all(np.isfinite(se)):
            q = mean[:, None] + se[:, None] * _Z[None, :]
            return _finish(mean * sd + mu, q * sd + mu)
    return naive(y, None, None, H, m)


METHODS: dict[str, Callable[..., Forecast]] = {
    "seasonal_naive": seasonal_naive,
    "naive": naive,
    "drift": drift,
    "retrieval_average": retrieval_average,
    "tabular_qr": tabular_qr,
    "ets": ets,
    "sarimax_exog": sarimax_exog,
}
