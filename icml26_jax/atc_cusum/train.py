"""The ATC experiment: synthetic suites G1-G4, the real series, peers; claims and figures.

``run(config, workdir)`` runs the suites in ``config.suites``; each finished suite is saved
through ``core.checkpoint`` (with the config's fingerprint) and skipped when a killed run is
resumed. Learners run as jitted ``lax.scan``s vmapped over runs, the runs sharded over the
devices; prefix sums need ``jax_enable_x64`` (the entry script and tests enable it).
"""

from __future__ import annotations

import functools
import glob
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from icml26_jax.atc_cusum import atc, baselines, envs, metrics
from icml26_jax.atc_cusum.configs import SUITES
from icml26_jax.core import checkpoint, distributed
from icml26_jax.core import mesh as mesh_lib

PAPER = "atc_cusum"


# ------------------------------------------------------------------ config


def validate_config(c) -> None:
    """Raises ``ValueError`` naming the first invalid field of an experiment config."""
    for name in ("sigma", "c", "c_estimated_sigma"):
        if not float(c[name]) > 0:
            raise ValueError(f"config.{name} must be > 0, got {c[name]!r}")
    if c.restart not in atc.RESTARTS:
        raise ValueError(f"config.restart must be one of {atc.RESTARTS}, got {c.restart!r}")
    if c.scan not in atc.SCANS:
        raise ValueError(f"config.scan must be one of {atc.SCANS}, got {c.scan!r}")
    if not float(c.ratio) > 1:
        raise ValueError(f"config.ratio must be > 1, got {c.ratio!r}")
    suites = tuple(c.suites)
    bad = [s for s in suites if s not in SUITES]
    if bad or not suites:
        raise ValueError(f"config.suites must be a non-empty subset of {SUITES}, got {suites}")
    if "csv" in suites and not c.csv_glob:
        raise ValueError("config.suites has 'csv' but --csv_glob / config.csv_glob is empty")
    g = c.synthetic
    for name in ("S", "T"):
        if not len(g[name]) or any(int(v) < 0 for v in g[name]):
            raise ValueError(f"config.synthetic.{name} must be a non-empty tuple of "
                             f"non-negative integers, got {g[name]!r}")
    if min(g.T) < 2 or max(g.S) >= min(g.T):
        raise ValueError(f"config.synthetic needs every T >= 2 and S < min(T); got S={g.S}, "
                         f"T={g.T}")
    for suite in ("synthetic", "selective", "staircase", "square"):
        for name in ("runs", "tune_runs"):
            if name in c[suite] and int(c[suite][name]) < 1:
                raise ValueError(f"config.{suite}.{name} must be >= 1, got {c[suite][name]!r}")
    if int(g.peers_runs) < 0:
        raise ValueError(f"config.synthetic.peers_runs must be >= 0, got {g.peers_runs!r}")
    for suite, name in (("synthetic", "windows"), ("staircase", "windows"),
                        ("square", "windows"), ("real", "windows")):
        if not len(c[suite][name]) or any(int(w) < 1 for w in c[suite][name]):
            raise ValueError(f"config.{suite}.{name} must be positive integers, "
                             f"got {c[suite][name]!r}")
    for suite in ("synthetic", "square", "real"):
        if not len(c[suite].gammas) or any(not 0 < float(v) < 1 for v in c[suite].gammas):
            raise ValueError(f"config.{suite}.gammas must lie in (0, 1), got {c[suite].gammas!r}")
    if not 0 < float(g.delta) < 1:
        raise ValueError(f"config.synthetic.delta must be in (0, 1), got {g.delta!r}")
    if any(float(v) < 0 for v in c.selective.deltas) or 0.0 not in tuple(c.selective.deltas):
        raise ValueError("config.selective.deltas must be non-negative and include 0.0 (the "
                         f"no-change reference), got {c.selective.deltas!r}")
    if any(not float(v) > 0 for v in c.square.cs):
        raise ValueError(f"config.square.cs must be > 0, got {c.square.cs!r}")


def atc_params(c, *, sigma: float | None = None, c_value: float | None = None) -> atc.ATCParams:
    """The run's :class:`atc.ATCParams` (sigma and c overridable per series / sweep)."""
    return atc.ATCParams(sigma=float(c.sigma if sigma is None else sigma),
                         c=float(c.c if c_value is None else c_value), restart=c.restart,
                         scan=c.scan, ratio=float(c.ratio))


# ------------------------------------------------------------------ batched learners


def predict(spec: tuple, x: jax.Array, mu: jax.Array | None = None):
    """``(pred [T], alarm [T])`` of the learner ``spec`` on one series.

    ``spec`` (hashable, static under jit): ``("atc", ATCParams)``,
    ``("fixed", sigma, delta, restart, scan, ratio)``, ``("page", sigma, k, h, ref, M)``,
    ``("oracle",)`` (needs ``mu``), ``("window", w)``, ``("discount", gamma)``.
    """
    kind = spec[0]
    no_alarm = jnp.zeros(x.shape, bool)
    if kind == "atc":
        out = atc.atc_predict(spec[1], x)
        return out.pred, out.alarm
    if kind == "fixed":
        sigma, delta, restart, scan, ratio = spec[1:]
        out = baselines.fixed_conf_cusum(x, sigma, delta, restart=restart, scan=scan, ratio=ratio)
        return out.pred, out.alarm
    if kind == "page":
        sigma, k, h, ref, M = spec[1:]
        out = baselines.page_cusum(x, sigma, k, h, ref, M)
        return out.pred, out.alarm
    if kind == "oracle":
        return baselines.oracle_segment_mean(x, mu), no_alarm
    if kind == "window":
        return baselines.sliding_window(x, spec[1]), no_alarm
    if kind == "discount":
        return baselines.discounted_mean(x, spec[1]), no_alarm
    raise ValueError(f"unknown learner {kind!r}")


def _scores_one(spec, x, mu, ts):
    """One run: regret, prefix regret at ``ts``, alarm count, any alarm in (T/2, T]."""
    pred, alarm = predict(spec, x, mu)
    err = jnp.cumsum((pred - mu) ** 2)
    half = x.shape[0] // 2
    return err[-1], err[ts - 1], jnp.sum(alarm), jnp.any(alarm[half:])


def _grid_one(kind, x, mu, values):
    """One run: regret ``[G]`` of window (``kind="window"``) or discount over ``values``."""
    fn = baselines.sliding_window if kind == "window" else baselines.discounted_mean
    return jax.vmap(lambda v: jnp.sum((fn(x, v) - mu) ** 2))(values)


_atc_jit = jax.jit(atc.atc_predict, static_argnums=0)


def scores(spec: tuple, x: np.ndarray, mu: np.ndarray, ts=None) -> dict:
    """Runs learner ``spec`` on ``x [R, T]``, the runs sharded over ``core.mesh.runs_mesh(R)``
    (``core.mesh.map_runs``; R need not divide the device count).

    Returns:
      ``{"regret" [R], "prefix" [R, len(ts)], "alarms" [R], "late_alarm" [R] bool}``.
    """
    R, T = x.shape
    ts = np.asarray([T] if ts is None else ts, np.int32)
    out = mesh_lib.map_runs(mesh_lib.runs_mesh(R), _scores_one, spec, x, mu,
                            np.broadcast_to(ts, (R, len(ts))))
    reg, pre, n, late = mesh_lib.to_host(out, R)
    return {"regret": reg, "prefix": pre, "alarms": n, "late_alarm": late}


def grid_regret(kind: str, values, x: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Regret ``[G, R]`` of ``sliding_window`` / ``discounted_mean`` over ``values`` (the
    runs sharded over ``core.mesh.runs_mesh(R)``)."""
    R = x.shape[0]
    values = np.asarray(values, np.int32 if kind == "window" else x.dtype)
    out = mesh_lib.map_runs(mesh_lib.runs_mesh(R), _grid_one, kind, x, mu,
                            np.broadcast_to(values, (R, len(values))))
    return mesh_lib.to_host(out, R).T


def tuned(kind: str, values, x_tune, mu_tune, x_eval, mu_eval) -> dict:
    """Held-out tuning: the value with the lowest mean regret on the tuning instances,
    evaluated on fresh ones; also the in-hindsight best on the evaluation instances."""
    tune = grid_regret(kind, values, x_tune, mu_tune).mean(axis=1)
    ev = grid_regret(kind, values, x_eval, mu_eval)
    i, h = int(np.argmin(tune)), int(np.argmin(ev.mean(axis=1)))
    return {"value": float(values[i]), "regret": ev[i], "hindsight_value": float(values[h]),
            "hindsight_regret": ev[h], "grid_eval_mean": ev.mean(axis=1), "grid_tune_mean": tune}


def summary_stats(r) -> dict:
    """Mean and 95% normal CI half-width over runs."""
    r = np.asarray(r, np.float64)
    half = 1.96 * r.std(ddof=1) / math.sqrt(len(r)) if len(r) > 1 else 0.0
    return {"mean": float(r.mean()), "ci": float(half)}


def _rng(seed: int, *tags) -> np.random.Generator:
    # Distinct entropy tuples give independent streams: evaluation and tuning never share one.
    return np.random.default_rng([int(seed), *[int(t) for t in tags]])


_SUITE_ID = {s: i for i, s in enumerate(SUITES)}
_EVAL, _TUNE = 1, 2


# ------------------------------------------------------------------ suites


def suite_synthetic(c) -> dict:
    """G1 random jumps on the S x T grid: ATC, held-out-tuned window and discount,
    fixed-confidence CUSUM, both Page CUSUMs, the oracle; peers on ``peers_T``."""
    g = c.synthetic
    p = atc_params(c)
    fixed = ("fixed", float(c.sigma), float(g.delta), c.restart, c.scan, float(c.ratio))
    pages = {ref: ("page", float(c.sigma), float(g.page_k), float(g.page_h), ref, int(g.page_M))
             for ref in baselines.PAGE_REFS}
    peers = baselines.peers_available() if int(g.peers_runs) else {}
    for name, reason in peers.items():
        if reason:
            logging.warning("peer %s skipped: %s", name, reason)
    out = {}
    for S in g.S:
        for T in g.T:
            t0 = time.time()
            re, rt = _rng(c.seed, _SUITE_ID["synthetic"], _EVAL, S, T), \
                _rng(c.seed, _SUITE_ID["synthetic"], _TUNE, S, T)
            mu = envs.random_jumps(re, int(g.runs), T, S)
            x = envs.observe(re, mu, c.sigma)
            mu_t = envs.random_jumps(rt, int(g.tune_runs), T, S)
            x_t = envs.observe(rt, mu_t, c.sigma)
            ts = np.arange(g.prefix_every, T + 1, g.prefix_every) if T >= g.prefix_every \
                else np.asarray([T])
            a = scores(("atc", p), x, mu, ts)
            cell = {"atc": a["regret"], "atc_prefix": a["prefix"].mean(axis=0),
                    "atc_alarms": a["alarms"].astype(np.float64), "prefix_t": ts.astype(np.float64),
                    "prefix_changes": np.stack([envs.num_changes(mu[:, :t]).mean() for t in ts])}
            cell["fixed_conf"] = scores(fixed, x, mu)["regret"]
            for ref, spec in pages.items():
                cell[f"page_{ref}"] = scores(spec, x, mu)["regret"]
            cell["oracle"] = scores(("oracle",), x, mu)["regret"]
            for kind, values in (("window", g.windows), ("discount", g.gammas)):
                tr = tuned(kind, tuple(values), x_t, mu_t, x, mu)
                cell[kind] = tr["regret"]
                cell[f"{kind}_value"] = tr["value"]
                cell[f"{kind}_hindsight"] = tr["hindsight_regret"]
                cell[f"{kind}_hindsight_value"] = tr["hindsight_value"]
            if peers and T == int(g.peers_T) and S in tuple(g.peers_S):
                n = min(int(g.peers_runs), int(g.runs))
                cell["peers_atc"] = a["regret"][:n]
                if not peers.get("adwin"):
                    cell["adwin"] = np.asarray([metrics.regret(baselines.adwin_predict(x[i]), mu[i])
                                                for i in range(n)])
                if not peers.get("focus"):
                    cell["focus"] = np.asarray([
                        metrics.regret(baselines.focus_predict(x[i], c.sigma, c.c)[0], mu[i])
                        for i in range(n)])
            out[f"S{S}_T{T}"] = cell
            logging.info("synthetic S=%d T=%d: ATC %.1f, window(%d) %.1f, discount(%.3g) %.1f, "
                         "fixed %.1f, Page %.1f/%.1f (%.1f s)", S, T, cell["atc"].mean(),
                         cell["window_value"], cell["window"].mean(), cell["discount_value"],
                         cell["discount"].mean(), cell["fixed_conf"].mean(),
                         cell["page_running"].mean(), cell["page_frozen"].mean(), time.time() - t0)
    return out


def suite_selective(c) -> dict:
    """G2: one change of size Delta at T/2 (the same noise for every Delta): ATC's alarm
    rate in (T/2, T] and excess regret over Delta = 0, next to window(w)."""
    s = c.selective
    T, R = int(s.T), int(s.runs)
    rng = _rng(c.seed, _SUITE_ID["selective"], _EVAL)
    noise = envs.observe(rng, np.zeros((R, T)), c.sigma)
    mus = envs.single_change(T, s.deltas)
    p = atc_params(c)
    out = {"deltas": np.asarray(s.deltas, np.float64), "atc": [], "late_alarm_rate": [],
           "window": []}
    for d, mu in zip(s.deltas, mus):
        mu_r = np.broadcast_to(mu, (R, T))
        a = scores(("atc", p), mu_r + noise, mu_r)
        out["atc"].append(a["regret"].mean())
        out["late_alarm_rate"].append(a["late_alarm"].mean())
        out["window"].append(scores(("window", int(s.window)), mu_r + noise, mu_r)["regret"].mean())
        logging.info("selective Delta=%g: ATC regret %.1f, alarm rate in (T/2, T] %.2f, "
                     "window(%d) %.1f", d, out["atc"][-1], out["late_alarm_rate"][-1],
                     s.window, out["window"][-1])
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def _fixed_mean_suite(c, name: str, mean_fn, Ts, methods, tune_kinds) -> dict:
    """A deterministic mean ``mean_fn(T)`` with fresh noise per run: fixed learners and
    held-out-tuned window / discount (tuned on disjoint noise seeds)."""
    s = c[name]
    out = {}
    for T in Ts:
        t0 = time.time()
        mu = np.broadcast_to(mean_fn(T), (int(s.runs), T))
        mu_t = np.broadcast_to(mean_fn(T), (int(s.tune_runs), T))
        x = envs.observe(_rng(c.seed, _SUITE_ID[name], _EVAL, T), mu, c.sigma)
        x_t = envs.observe(_rng(c.seed, _SUITE_ID[name], _TUNE, T), mu_t, c.sigma)
        cell = {key: scores(spec, x, mu)["regret"] for key, spec in methods.items()}
        for kind, values in tune_kinds:
            tr = tuned(kind, tuple(values), x_t, mu_t, x, mu)
            cell[kind], cell[f"{kind}_value"] = tr["regret"], tr["value"]
            cell[f"{kind}_hindsight"] = tr["hindsight_regret"]
            cell[f"{kind}_hindsight_value"] = tr["hindsight_value"]
        cell["changes"] = float(envs.num_changes(mu[0]))
        out[f"T{T}"] = cell
        logging.info("%s T=%d: %s (%.1f s)", name, T, ", ".join(
            f"{k} {np.mean(v):.1f}" for k, v in cell.items() if np.ndim(v)), time.time() - t0)
    return out


def _page_specs(c):
    g = c.synthetic
    return {f"page_{ref}": ("page", float(c.sigma), float(g.page_k), float(g.page_h), ref,
                            int(g.page_M)) for ref in baselines.PAGE_REFS}


def suite_staircase(c) -> dict:
    """G3 staircase: ATC, both Page CUSUMs, held-out-tuned window."""
    methods = {"atc": ("atc", atc_params(c)), **_page_specs(c)}
    return _fixed_mean_suite(c, "staircase", envs.staircase, tuple(c.staircase.T), methods,
                             (("window", c.staircase.windows),))


def suite_square(c) -> dict:
    """G4 square wave: ATC at each c of ``square.cs``, Page, tuned discount and window."""
    methods = {f"atc_c{cv:g}": ("atc", atc_params(c, c_value=cv)) for cv in c.square.cs}
    methods["atc"] = ("atc", atc_params(c))
    methods.update(_page_specs(c))
    return _fixed_mean_suite(c, "square", envs.square_wave, tuple(c.square.T), methods,
                             (("discount", c.square.gammas), ("window", c.square.windows)))


@functools.partial(jax.jit, static_argnums=0)
def _series_grid(kind, values, x):
    fn = baselines.sliding_window if kind == "window" else baselines.discounted_mean
    return jax.vmap(lambda v: fn(x, v))(values)


def series_grid(kind: str, values, x: np.ndarray) -> np.ndarray:
    """Predictions ``[G, T]`` of window / discount over ``values`` on one series."""
    dtype = np.int32 if kind == "window" else np.float64
    return np.asarray(_series_grid(kind, jnp.asarray(values, dtype), jnp.asarray(x)))


def real_series(c, x: np.ndarray, k_breaks: int | None, *, adwin: bool = False) -> dict:
    """ATC with estimated sigma (``c_estimated_sigma``) on one real series; in-hindsight best
    window / discount one-step MSE; the exact LS segmentation with ``k_breaks`` breaks."""
    r = c.real
    sig = envs.sigma_hat(x)
    p = atc_params(c, sigma=sig, c_value=c.c_estimated_sigma)
    out_atc = _atc_jit(p, jnp.asarray(x))
    pred, alarm, seg = (np.asarray(v) for v in out_atc)
    mse = float(metrics.one_step_mse(pred, x, r.burn_in))
    win = [float(v) for v in metrics.one_step_mse(
        series_grid("window", tuple(int(w) for w in r.windows), x), x, r.burn_in)]
    disc = [float(v) for v in metrics.one_step_mse(
        series_grid("discount", tuple(float(g) for g in r.gammas), x), x, r.burn_in)]
    idx = np.flatnonzero(alarm)
    out = {"sigma_hat": sig, "pred": pred, "alarm_index": idx.astype(np.float64),
           "seg_start_index": seg[idx].astype(np.float64), "atc_mse": mse,
           "window_mse": np.asarray(win), "discount_mse": np.asarray(disc),
           "best_window": float(r.windows[int(np.argmin(win))]),
           "best_discount": float(r.gammas[int(np.argmin(disc))]),
           "best_baseline_mse": float(min(min(win), min(disc)))}
    if k_breaks is not None:
        br = metrics.ls_segmentation(x, k_breaks)
        out["ls_breaks"] = br.astype(np.float64)
        out["ls_fit_mse"] = float(metrics.one_step_mse(metrics.segment_means(x, br), x, r.burn_in))
    if adwin and not baselines.peers_available()["adwin"]:
        out["adwin_mse"] = float(metrics.one_step_mse(baselines.adwin_predict(x), x, r.burn_in))
    return out


def suite_real(c) -> dict:
    """Nile (1 LS break), real interest rate 1961Q1-1986Q3 (2 breaks) and its full sample."""
    _, nile = envs.load_nile()
    _, ri = envs.load_realint(c.real.realint_start, c.real.realint_end)
    _, ri_full = envs.load_realint(None, None)
    out = {"nile": real_series(c, nile, 1), "realint": real_series(c, ri, 2),
           "realint_full": real_series(c, ri_full, None)}
    for k, v in out.items():
        logging.info("real %s: sigma_hat %.4g, %d alarms, ATC MSE %.4g vs best baseline %.4g",
                     k, v["sigma_hat"], len(v["alarm_index"]), v["atc_mse"],
                     v["best_baseline_mse"])
    return out


def suite_csv(c) -> dict:
    """User-supplied series (``csv_glob``, e.g. NAB realAWSCloudwatch): metrics only."""
    paths = sorted(glob.glob(os.path.expanduser(c.csv_glob)))
    if not paths:
        raise ValueError(f"csv_glob={c.csv_glob!r} matches no file")
    out = {}
    for path in paths:
        _, x = envs.load_csv(path, c.csv_value_col, c.csv_time_col)
        out[os.path.splitext(os.path.basename(path))[0]] = real_series(c, x, None, adwin=True)
    return out


SUITE_FNS = {"synthetic": suite_synthetic, "selective": suite_selective,
             "staircase": suite_staircase, "square": suite_square, "real": suite_real,
             "csv": suite_csv}


def run_suite(c, name: str, ckpt_root: str) -> dict:
    """One suite, restored from ``ckpt_root/<name>`` when a run with this config finished it."""
    return checkpoint.cached(os.path.join(ckpt_root, name),
                             fingerprint=checkpoint.config_fingerprint(c),
                             compute=lambda: SUITE_FNS[name](c), name=f"suite {name}")


def run(config, workdir: str) -> dict:
    """Runs ``config.suites``, evaluates the claims, writes results.json and the figures."""
    from icml26_jax.atc_cusum import report
    from icml26_jax.core import results

    c = config
    validate_config(c)
    if not jax.config.jax_enable_x64:
        raise ValueError("ATC needs float64 prefix sums: enable jax_enable_x64 before run() "
                         "(experiments/atc_cusum.py does)")
    t_start = time.time()
    ck = os.path.join(workdir, "checkpoints")
    suites = {}
    for name in c.suites:
        logging.info("suite %s", name)
        suites[name] = run_suite(c, name, ck)
    m, claims = report.evaluate(c, suites)
    m["devices"] = jax.device_count()
    if distributed.is_primary():
        report.plots(c, suites, workdir)
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed,
                                 config=c, metrics=m, claims=claims, runtime_s=runtime)
    if distributed.is_primary():
        print(report.summary(c, m, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": m,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}
