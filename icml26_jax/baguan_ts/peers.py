"""Peers a user would reach for (spec §Baselines and peers), behind one ``Forecaster`` protocol.

A :class:`Forecaster` has a ``name`` and ``forecast(y_train [L], X_train [L, F], X_test [H, F],
H, m, key) -> (mean [H], q [H, 9])`` with the signature, dtypes and quantile levels of
:mod:`icml26_jax.baguan_ts.baselines`, so the evaluator can score any of them beside the
model. :func:`as_forecaster` wraps a baselines function.

The adapters (:class:`ChronosForecaster`, :class:`TimesFMForecaster`,
:class:`TabPFNTSForecaster`) import their package lazily in ``__init__`` and raise an
``ImportError`` naming the ``pip install`` line when it is missing. All of them download
their weights from the Hugging Face hub at run time (TabPFN-TS's client mode calls a remote
API instead), so none runs offline, and none is exercised by our tests or experiments: they are
thin, best-effort glue for a user who has the package and the weights. Their calls follow
each package's documented API (chronos-forecasting 2.x ``predict_df``; timesfm 2.5
``forecast``; tabpfn-time-series 1.x ``TabPFNTSPipeline.predict_df``).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from icml26_jax.baguan_ts.losses import QUANTILES

_LEVELS = [round(float(q), 2) for q in QUANTILES]  # 0.1, ..., 0.9 as clean floats


@runtime_checkable
class Forecaster(Protocol):
    """Anything the evaluator can score: a ``name`` and a ``forecast`` method."""

    name: str

    def forecast(self, y_train, X_train, X_test, H: int, m: int,
                 key) -> tuple[np.ndarray, np.ndarray]:
        """Returns ``(mean [H], q [H, 9])`` float32, quantiles sorted along the last axis."""
        ...


@dataclasses.dataclass(frozen=True)
class FunctionForecaster:
    """A :class:`Forecaster` around a function with the baselines' signature."""

    fn: Callable
    name: str

    def forecast(self, y_train, X_train, X_test, H, m, key):
        return self.fn(y_train, X_train, X_test, H, m, key)


def as_forecaster(fn: Callable, name: str | None = None) -> Forecaster:
    """Wraps ``fn(y_train, X_train, X_test, H, m, key)`` (e.g. ``baselines.ets``)."""
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    return FunctionForecaster(fn, name or getattr(fn, "__name__", "forecaster"))


def _require(module: str, pip_name: str, who: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{who} needs the optional package `{module}`: pip install {pip_name} "
            f"(it downloads model weights from the Hugging Face hub at run time, so it cannot "
            f"run offline)") from e


def _frames(y_train, X_train, X_test, H: int, id_col: str):
    """Long-format context/future DataFrames on a synthetic daily calendar."""
    import pandas as pd

    y = np.asarray(y_train, np.float64)
    L = y.shape[0]
    Xtr = np.zeros((L, 0)) if X_train is None else np.asarray(X_train, np.float64)
    Xte = np.zeros((H, Xtr.shape[1])) if X_test is None else np.asarray(X_test, np.float64)
    stamps = pd.date_range("2000-01-01", periods=L + H, freq="D")
    cov = {f"x{j}": Xtr[:, j] for j in range(Xtr.shape[1])}
    context = pd.DataFrame({id_col: 0, "timestamp": stamps[:L], "target": y, **cov})
    fut = {f"x{j}": Xte[:, j] for j in range(Xte.shape[1])}
    future = pd.DataFrame({id_col: 0, "timestamp": stamps[L:], **fut})
    return context, future


def _column(df, q):
    for k in (q, str(q), f"{q:g}"):
        if k in df.columns:
            return np.asarray(df[k], np.float64)
    raise KeyError(f"quantile column {q} not in {list(df.columns)}")


def _out(mean, q):
    return np.asarray(mean, np.float32), np.sort(np.asarray(q, np.float32), axis=-1)


class ChronosForecaster:
    """Chronos-2 (``chronos-forecasting``), with covariates via ``predict_df``."""

    def __init__(self, model_id: str = "amazon/chronos-2", device: str = "cpu"):
        chronos = _require("chronos", "chronos-forecasting", "ChronosForecaster")
        self.name = f"chronos:{model_id}"
        self._pipe = chronos.BaseChronosPipeline.from_pretrained(model_id, device_map=device)

    def forecast(self, y_train, X_train, X_test, H, m, key):
        context, future = _frames(y_train, X_train, X_test, H, "id")
        pred = self._pipe.predict_df(
            context, future_df=future if future.shape[1] > 2 else None, prediction_length=H,
            quantile_levels=_LEVELS, id_column="id", timestamp_column="timestamp",
            target="target")
        q = np.stack([_column(pred, lv) for lv in _LEVELS], axis=1)
        return _out(pred["predictions"], q)


class TimesFMForecaster:
    """TimesFM 2.5 (``timesfm``), covariate-blind; quantile head outputs (mean, q0.1..q0.9)."""

    def __init__(self, model_id: str = "google/timesfm-2.5-200m-pytorch", max_context: int = 1024,
                 max_horizon: int = 256):
        timesfm = _require("timesfm", "timesfm[torch]", "TimesFMForecaster")
        self.name = f"timesfm:{model_id}"
        self._model = timesfm.TimesFM_2p5_200M_torch.from_pretrained(model_id)
        self._model.compile(timesfm.ForecastConfig(
            max_context=max_context, max_horizon=max_horizon, normalize_inputs=True,
            use_continuous_quantile_head=True, fix_quantile_crossing=True))

    def forecast(self, y_train, X_train, X_test, H, m, key):
        point, quant = self._model.forecast(horizon=H, inputs=[np.asarray(y_train, np.float32)])
        quant = np.asarray(quant)[0]  # [H, 10]: the mean, then q0.1..q0.9
        return _out(np.asarray(point)[0], quant[:, 1:10])


class TabPFNTSForecaster:
    """TabPFN-TS (``tabpfn-time-series``): TabPFN on calendar/seasonal features + covariates."""

    def __init__(self, mode: str = "local"):
        if mode not in ("local", "client"):
            raise ValueError(f"mode must be 'local' or 'client', got {mode!r}")
        tpts = _require("tabpfn_time_series", "tabpfn-time-series", "TabPFNTSForecaster")
        self.name = f"tabpfn_ts:{mode}"
        self._pipe = tpts.TabPFNTSPipeline(
            tabpfn_mode=tpts.TabPFNMode.LOCAL if mode == "local" else tpts.TabPFNMode.CLIENT)

    def forecast(self, y_train, X_train, X_test, H, m, key):
        context, future = _frames(y_train, X_train, X_test, H, "item_id")
        pred = self._pipe.predict_df(context, future_df=future)
        q = np.stack([_column(pred, lv) for lv in _LEVELS], axis=1)
        return _out(pred["target"], q)
