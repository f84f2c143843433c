"""Evaluation of Baguan-TS, its inference ablations and every baseline, and the claims.

Every method forecasts the same (task, origin) windows: 3 rolling origins per task, the
history strictly before the origin, the known future covariates, the horizon H of the task.
Errors are averaged over a task's origins before tasks are compared (spec §Experiment).
Nothing here is tuned: the test origins are only ever scored.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import time

import jax
import numpy as np
from absl import logging

from icml26_jax.baguan_ts import baselines, data_real, metrics, predict, prior
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import results

# The real-task win-rate field (spec claim 10), Baguan first.
REAL_FIELD = ("baguan", "seasonal_naive", "ets", "sarimax_exog", "tabular_qr",
              "retrieval_average", "2d")
BASELINES = ("seasonal_naive", "naive", "drift", "retrieval_average", "tabular_qr", "ets",
             "sarimax_exog")
SMOKE_BASELINES = ("seasonal_naive", "ets")
# Inference ablations on the synthetic tasks: name -> InferenceConfig overrides.
ABLATIONS = {"k0": dict(K=0), "recent": dict(rag="recent"), "random": dict(rag="random"),
             "no_antisym": dict(antisymmetric=False), "2d": dict(mode="2d")}
SMOKE_ABLATIONS = ("k0", "recent", "random")
# Baselines that fit on the host, one core each (statsmodels): with ``eval_workers > 0`` they
# run in worker processes while the main process evaluates the model (deterministic fits, so
# the numbers do not depend on where they ran).
HOST_BASELINES = ("ets", "sarimax_exog")


def eval_sets(c) -> tuple[list, list]:
    """(synthetic held-out tasks, real tasks) of the run."""
    if c.mini_prior:  # smoke: mini-prior tasks from the held-out stream
        cfg = prior.PriorConfig(mini=True)
        syn = [prior.sample_mini_task(prior.task_rng(int(c.eval_seed), i, prior.EVAL_STREAM),
                                      cfg, 256) for i in range(int(c.n_synthetic))]
        syn = [data_real.make_real_task(f"mini_{i}", t.y, t.X, m=t.period, H=16,
                                        family="covariate") for i, t in enumerate(syn)]
    else:
        syn = data_real.synthetic_eval_set(int(c.eval_seed))[:int(c.n_synthetic)]
    real = [data_real.load_task(name) for name in c.real_tasks]
    return syn, real


def windows(task) -> list[tuple]:
    """The (y_train, X_train, X_test, y_test) of each origin of a task."""
    H = task.H
    return [(task.y[:L], task.X[:L], task.X[L:L + H], task.y[L:L + H]) for L in task.origins]


def task_config(icfg: predict.InferenceConfig, task) -> predict.InferenceConfig:
    """The task's window and support count (short series: M 32, K <= 6)."""
    return dataclasses.replace(icfg, M=task.M, K=min(icfg.K, task.K_max))


def forecast_groups(tasks, icfg) -> list[tuple]:
    """The compiled calls of :func:`baguan_on`: tasks that share (M, K, H), as ``(tasks,
    series [(y_train, X_train, X_test)], H, InferenceConfig, season lengths)``."""
    groups = {}
    for t in tasks:
        groups.setdefault((t.M, min(icfg.K, t.K_max), t.H), []).append(t)
    return [(ts, [w[:3] for t in ts for w in windows(t)], H,
             dataclasses.replace(icfg, M=M, K=K), [t.m for t in ts for _ in t.origins])
            for (M, K, H), ts in groups.items()]


def baguan_on(graphdef, params, tasks, icfg, key, mesh=None) -> dict:
    """Forecasts every origin of every task: {task name: (mean [3, H], q [3, H, 9])}.

    Tasks that share (M, K, H) are forecast in one compiled call, their (task, origin) series
    sharded over the ``DATA`` axis of ``mesh`` (every device) when one is given."""
    out = {}
    for ts, series, H, cfg, ms in forecast_groups(tasks, icfg):
        mean, q = predict.forecast_many(graphdef, params, series, H, cfg, key, m=ms, mesh=mesh)
        i = 0
        for t in ts:
            n = len(t.origins)
            out[t.name] = (mean[i:i + n], q[i:i + n])
            i += n
    return out


def baseline_on(name, tasks, K: int, key) -> dict:
    """{task name: (mean [3, H], q [3, H, 9])} of one baseline."""
    fn = baselines.METHODS[name]
    out = {}
    for t in tasks:
        kw = dict(M=t.M, K=min(K, t.K_max)) if name == "retrieval_average" else {}
        fc = [fn(yt, Xt, Xs, t.H, t.m, jax.random.fold_in(key, i), **kw)
              for i, (yt, Xt, Xs, _) in enumerate(windows(t))]
        out[t.name] = (np.stack([f[0] for f in fc]), np.stack([f[1] for f in fc]))
    return out


def _host_fit(name: str, series: list) -> tuple[list, float]:
    """Worker: one key-free host baseline on a list of (y, X, X_test, H, m) windows."""
    t0 = time.time()
    fn = baselines.METHODS[name]
    return [fn(y, X, Xs, H, m, None) for y, X, Xs, H, m in series], time.time() - t0


def submit_host_baselines(pool, names, task_lists) -> dict:
    """Submits every window of every task of ``task_lists`` for each host baseline in
    ``names``; returns {name: future}."""
    series = [(yt, Xt, Xs, t.H, t.m) for tasks in task_lists for t in tasks
              for yt, Xt, Xs, _ in windows(t)]
    return {name: pool.submit(_host_fit, name, series) for name in names}


def collect_host_baseline(future, task_lists) -> tuple[list[dict], float]:
    """The per-task-list forecasts {task: (mean [n, H], q [n, H, 9])} of a submitted baseline,
    and the seconds its worker spent fitting."""
    fc, seconds = future.result()
    out, i = [], 0
    for tasks in task_lists:
        d = {}
        for t in tasks:
            n = len(t.origins)
            d[t.name] = (np.stack([f[0] for f in fc[i:i + n]]),
                         np.stack([f[1] for f in fc[i:i + n]]))
            i += n
        out.append(d)
    return out, seconds


def score(tasks, forecasts: dict) -> dict:
    """Per task, metrics averaged over its origins: wql, mase, sql, coverage, osi."""
    out = {}
    for t in tasks:
        mean, q = forecasts[t.name]
        rows = []
        for i, (yt, _, _, ys) in enumerate(windows(t)):
            rows.append({"wql": metrics.wql(ys, q[i]), "mase": metrics.mase(ys, mean[i], yt, t.m),
                         "sql": metrics.sql(ys, q[i], yt, t.m),
                         "coverage": metrics.coverage(ys, q[i][:, 0], q[i][:, -1]),
                         "osi": metrics.osi(mean[i], ys)})
        out[t.name] = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    return out


def evaluate(c, pre: dict, main: str, icfg: predict.InferenceConfig, key) -> dict:
    """Runs every method on the synthetic and real tasks; returns the metrics dict."""
    syn, real = eval_sets(c)
    mesh = mesh_lib.data_mesh()  # the model's series over every device (None: one device)
    smoke = bool(c.mini_prior)
    g, p = pre["graphdefs"][main], pre["params"][main]
    times, fc_syn, fc_real = {}, {}, {}
    names = SMOKE_BASELINES if smoke else BASELINES
    host = [n for n in names if n in HOST_BASELINES] if int(c.eval_workers) > 0 else []
    pool, futures = None, {}
    if host:  # statsmodels fits in worker processes, concurrently with the model below
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=int(c.eval_workers), mp_context=multiprocessing.get_context("spawn"))
        futures = submit_host_baselines(pool, host, [syn, real])
    t0 = time.time()
    fc_syn["baguan"] = baguan_on(g, p, syn, icfg, key, mesh)
    fc_real["baguan"] = baguan_on(g, p, real, icfg, key, mesh)
    times["baguan"] = time.time() - t0
    ablations = SMOKE_ABLATIONS if smoke else tuple(ABLATIONS) if c.ablations else ()
    for name in ablations:
        t0 = time.time()
        cfg = dataclasses.replace(icfg, **ABLATIONS[name])
        fc_syn[name] = baguan_on(g, p, syn, cfg, key, mesh)
        if name == "2d":
            fc_real[name] = baguan_on(g, p, real, cfg, key, mesh)
        times[name] = time.time() - t0
        logging.info("evaluated %s (%.0f s)", name, times[name])
    if "co_off" in pre["params"] and not smoke:
        t0 = time.time()
        fc_syn["co_off"] = baguan_on(pre["graphdefs"]["co_off"], pre["params"]["co_off"], syn,
                                     icfg, key, mesh)
        times["co_off"] = time.time() - t0
    for name in names:
        if name in futures:
            continue
        t0 = time.time()
        fc_syn[name] = baseline_on(name, syn, int(c.K), key)
        fc_real[name] = baseline_on(name, real, int(c.K), key)
        times[name] = time.time() - t0
        logging.info("evaluated %s (%.0f s)", name, times[name])
    for name, fut in futures.items():
        t0 = time.time()
        (fc_syn[name], fc_real[name]), fit_s = collect_host_baseline(fut, [syn, real])
        times[name] = fit_s
        logging.info("evaluated %s (%.0f s in a worker; waited %.0f s for it)", name, fit_s,
                     time.time() - t0)
    if pool is not None:
        pool.shutdown()
    return {"synthetic": {m: score(syn, f) for m, f in fc_syn.items()},
            "real": {m: score(real, f) for m, f in fc_real.items()},
            "families": {t.name: t.family for t in syn},
            "eval_s": times,
            "examples": _examples(syn, real, fc_syn, fc_real)}


def _examples(syn, real, fc_syn, fc_real) -> dict:
    """A few last-origin forecasts for the forecasts figure."""
    out = {}
    by_family = {}
    for t in syn:
        by_family.setdefault(t.family, t)
    picks = list(by_family.values()) + real[:1]
    for t in picks:
        fc = fc_syn if t.name in fc_syn["baguan"] else fc_real
        yt, _, _, ys = windows(t)[-1]
        out[t.name] = {"history": yt[-3 * t.M:].tolist(), "truth": ys.tolist(),
                       "mean": fc["baguan"][t.name][0][-1].tolist(),
                       "q10": fc["baguan"][t.name][1][-1][:, 0].tolist(),
                       "q90": fc["baguan"][t.name][1][-1][:, -1].tolist(),
                       "snaive": fc["seasonal_naive"][t.name][0][-1].tolist()}
    return out


# --------------------------------------------------------------------------- claims


def _col(table: dict, method: str, names, key="wql") -> np.ndarray:
    if method not in table:
        return np.full(len(names), np.nan)
    return np.asarray([table[method][n][key] for n in names], np.float64)


def _geo(a, b) -> float:
    ok = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    return metrics.geo_mean_ratio(a[ok], b[ok]) if ok.all() and ok.size else float("nan")


def claims(c, m: dict, key) -> tuple[list, dict]:
    """The ten claims of spec §Claims from the measured metrics; returns (claims, extra).

    Smoke runs use the smoke thresholds of the claims marked S (1 and 5)."""
    smoke = bool(c.mini_prior)
    syn, real = m["synthetic"], m["real"]
    names = list(m["families"])
    fam = np.asarray([m["families"][n] for n in names])
    wql = lambda meth, sel=slice(None): _col(syn, meth, names)[sel]  # noqa: E731
    spike = fam == "spike"
    covariate = (fam == "covariate") | (fam == "synthetic_energy")
    extra = {}
    icl = _geo(wql("baguan"), wql("k0"))
    vs_snaive = _geo(wql("baguan"), wql("seasonal_naive"))
    ets = wql("ets", covariate)
    cov_win = float(np.mean(wql("baguan", covariate) < ets)) if covariate.any() and np.all(
        np.isfinite(ets)) else float("nan")
    pair = np.stack([wql("baguan"), wql("2d")], 1)
    win_3d = float(metrics.win_rate(pair)[0]) if np.all(np.isfinite(pair)) else float("nan")
    naive_ctx = min(np.mean(wql("recent")), np.mean(wql("random")))
    rb_gain = 1.0 - float(np.mean(wql("baguan")) / naive_ctx)
    osi_on = _col(syn, "baguan", names, "osi")[spike]
    osi_off = _col(syn, "co_off", names, "osi")[spike]
    co_osi = float(np.nanmean(osi_on) - np.nanmean(osi_off)) if spike.any() else float("nan")
    co_wql = float(np.mean(wql("baguan", spike)) / np.mean(wql("co_off", spike))) if \
        spike.any() else float("nan")
    cov_err = abs(float(np.mean(_col(syn, "baguan", names, "coverage"))) - 0.8)
    rnames = list(next(iter(real.values())))
    field = [f for f in REAL_FIELD if f in real]
    E = np.stack([_col(real, f, rnames) for f in field], 1)  # [tasks, methods]
    skill = float(metrics.skill_score(E, field.index("seasonal_naive"))[0])
    win = float(metrics.win_rate(E)[0]) if len(field) > 1 else float("nan")
    k1, k2 = jax.random.split(key)
    extra["real_field"] = field
    extra["real_win_rate_ci"] = [float(v[0]) for v in metrics.bootstrap_ci(
        metrics.win_rate, E, k1)] if len(field) > 1 else None
    extra["real_skill_ci"] = [float(v) for v in metrics.bootstrap_ci(
        lambda e: metrics.skill_score(e, field.index("seasonal_naive"))[0], E, k2)]
    extra["real_skill_all"] = dict(zip(field, metrics.skill_score(
        E, field.index("seasonal_naive")).tolist()))
    extra["real_win_all"] = dict(zip(field, metrics.win_rate(E).tolist())) if len(field) > 1 \
        else {}
    cl = [results.at_most("icl_wql_ratio", icl, 0.90 if smoke else 0.80),
          results.at_most("synth_wql_ratio_vs_snaive", vs_snaive, 0.80),
          results.at_least("covariate_win_rate_vs_ets", cov_win, 0.70),
          results.at_least("win_rate_3d_vs_2d", win_3d, 0.60),
          results.at_least("rbfcst_context_gain", rb_gain, 0.0 if smoke else 0.05),
          results.at_least("co_osi_gain", co_osi, 0.10),
          results.at_most("co_wql_ratio", co_wql, 1.02),
          results.at_most("interval_coverage_error", cov_err, 0.10),
          results.check("real_skill_score", skill, "> 0", skill > 0),
          results.at_least("real_win_rate", win, 0.50)]
    return cl, extra
