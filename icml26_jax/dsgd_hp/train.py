"""The DSGD-HP experiment: sweeps -> metrics -> claims -> results.json, figures, summary.

``run(config, workdir)`` runs ``config.sweeps`` in order. Each finished sweep is saved through
``core.checkpoint``, so a killed run resumes at the next unfinished sweep and ends with the
same numbers (every sweep's noise is a pure function of the seed and the sweep's name).
"""

from __future__ import annotations

import math
import os
import time

import jax
import numpy as np
from absl import logging

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.dsgd_hp import configs, dsgd, problems, report
from icml26_jax.dsgd_hp.graphs import GRAPHS, make_graph

PAPER = "dsgd_hp"


def _powers_of_two(U: int) -> list[int]:
    return [2**k for k in range(int(math.log2(U)) + 1)]


def validate_config(c) -> None:
    """ValueError naming the bad field and the allowed values."""
    U = c.users
    lo = 16 if c.variant == "smoke" else 32
    if not (isinstance(U, int) and U >= lo and U & (U - 1) == 0):
        raise ValueError(f"--users must be a power of two >= {lo} for the {c.variant!r} "
                         f"variant, got {U}")
    unknown = [s for s in c.sweeps if s not in configs.SWEEPS]
    if unknown:
        raise ValueError(f"unknown sweep(s) {unknown} in config.sweeps; allowed: "
                         f"{', '.join(configs.SWEEPS)}")
    if c.order not in dsgd.ORDERS:
        raise ValueError(f"config.order={c.order!r}; allowed: {', '.join(dsgd.ORDERS)}")
    if not c.sigma > 0:
        raise ValueError(f"config.sigma must be > 0, got {c.sigma}")
    if not 0 < c.quantile < 1:
        raise ValueError(f"config.quantile must be in (0, 1), got {c.quantile}")
    if c.problem not in ("digits", "npz") or (c.problem == "npz" and not c.data_path):
        raise ValueError(f"config.problem={c.problem!r}: allowed 'digits', or 'npz' together "
                         "with --data_path=file.npz")
    for name in configs.SWEEPS:
        s = c[name]
        if not (isinstance(s.T, int) and s.T > 0):
            raise ValueError(f"config.{name}.T must be a positive integer, got {s.T}")
        if not (isinstance(s.runs, int) and s.runs > 0):
            raise ValueError(f"config.{name}.runs must be a positive integer, got {s.runs}")
        for g in tuple(s.get("graphs", ())) + ((s.graph,) if "graph" in s else ()):
            if g not in GRAPHS:
                raise ValueError(f"unknown graph {g!r} in config.{name}; allowed: "
                                 f"{', '.join(GRAPHS)}")
        if "log_every" in s and s.T % s.log_every:
            raise ValueError(f"config.{name}.T={s.T} must be a multiple of "
                             f"config.{name}.log_every={s.log_every}")


def _key(c, sweep: str, *parts: int):
    """The noise key of one simulation: seed, sweep name, then integer parts."""
    key = jax.random.key(c.seed)
    key = jax.random.fold_in(key, configs.SWEEPS.index(sweep))
    for p in parts:
        key = jax.random.fold_in(key, p)
    return key


def _sc_schedule(c, mu: float, L: float):
    return dsgd.strongly_convex_schedule(c.a, mu, math.ceil(c.a * L / mu))


def _quadratic(c, n, hetero):
    return problems.quadratic(n, c.dim, c.mu, c.L, hetero)


def _logistic(c, n, split, reg, mu=0.1):
    """Digits (scikit-learn's, or the digits_users TFDS builder's records) or a user's .npz."""
    if c.problem == "npz":
        with np.load(c.data_path) as f:
            if "X" not in f or "y" not in f:
                raise ValueError(f"--data_path={c.data_path} must hold arrays 'X' [N, D] and "
                                 "'y' [N]")
            return problems.split_problem(f["X"], f["y"], n, split, reg, mu=mu)
    if c.tfds_data_dir:
        from icml26_jax.datasets.digits_users import load_digits_users

        rec = load_digits_users(n, split, 0, data_dir=c.tfds_data_dir)
        # Records are ordered by user, so user u holds rows [u m, (u + 1) m).
        shards = np.arange(len(rec["user"])).reshape(n, -1)
        return problems.logistic_problem(rec["pixels"], rec["label"], shards, reg, mu=mu)
    return problems.digits(n, split, reg, mu=mu)


def sweep_speedup(c):
    s = c.speedup
    ns = _powers_of_two(c.users)
    sch = _sc_schedule(c, c.mu, c.L)
    out = {k: [] for k in ("gap_mean", "gap_worst", "central")}
    for i, n in enumerate(ns):
        tr = dsgd.simulate(_quadratic(c, n, s.hetero), [make_graph(s.graph, n)], sch, T=s.T,
                           runs=s.runs, key=_key(c, "speedup", i), order=c.order, sigma=c.sigma,
                           log_every=s.log_every)
        out["gap_mean"].append(tr.gap_mean[0])
        out["gap_worst"].append(tr.gap_worst[0])
        out["central"].append(tr.gap_mean[1])
        logging.info("speedup n=%d: q90 gap %.3g", n, np.quantile(tr.gap_mean[0, -1], 0.9))
    return {"ns": np.array(ns), "ts": tr.ts, **{k: np.stack(v) for k, v in out.items()}}


def sweep_network(c):
    s = c.network
    n = c.users
    gs = [make_graph(g, n, seed=c.seed) for g in s.graphs]
    tr = dsgd.simulate(_quadratic(c, n, s.hetero), gs, _sc_schedule(c, c.mu, c.L), T=s.T,
                       runs=s.runs, key=_key(c, "network"), order=c.order, sigma=c.sigma,
                       log_every=s.log_every)
    return {"ts": tr.ts, "lam": np.array([g.lam for g in gs]), "gap_mean": tr.gap_mean,
            "gap_worst": tr.gap_worst, "consensus": tr.consensus}


def sweep_transient(c):
    s = c.transient
    ns = [c.users // k for k in s.divisors]
    gap, lam = [], []
    for i, n in enumerate(ns):
        gs = [make_graph(g, n, seed=c.seed) for g in s.graphs]
        tr = dsgd.simulate(_quadratic(c, n, s.hetero), gs, _sc_schedule(c, c.mu, c.L), T=s.T,
                           runs=s.runs, key=_key(c, "transient", i), order=c.order,
                           sigma=c.sigma, log_every=s.log_every)
        gap.append(tr.gap_mean)
        lam.append([g.lam for g in gs])
        logging.info("transient n=%d done", n)
    return {"ns": np.array(ns), "ts": tr.ts, "lam": np.array(lam), "gap_mean": np.stack(gap)}


def sweep_tails(c):
    s = c.tails
    out = []
    for i, kind in enumerate(s.noises):
        tr = dsgd.simulate(_quadratic(c, s.n, 0.0), [make_graph(s.graph, s.n)],
                           _sc_schedule(c, c.mu, c.L), T=s.T, runs=s.runs,
                           key=_key(c, "tails", i), order=c.order, noise=kind, sigma=c.sigma,
                           log_every=s.T)
        out.append(tr.gap_mean[0, -1])
    return {"gap_final": np.stack(out), "deltas": np.array(s.deltas)}


def sweep_logreg(c):
    s = c.logreg
    gap, central = [], []
    for i, n in enumerate(s.ns):
        prob = _logistic(c, n, s.split, "l2", mu=s.mu)
        tr = dsgd.simulate(prob, [make_graph(s.graph, n)], _sc_schedule(c, prob.mu, prob.L),
                           T=s.T, runs=s.runs, key=_key(c, "logreg", i), order=c.order,
                           log_every=s.log_every)
        gap.append(tr.gap_mean[0])
        central.append(tr.gap_mean[1])
    return {"ns": np.array(s.ns), "ts": tr.ts, "gap_mean": np.stack(gap),
            "central": np.stack(central)}


def sweep_nonconvex(c):
    s = c.nonconvex
    out = []
    for j, split in enumerate(s.splits):
        per_n = []
        for i, n in enumerate(s.ns):
            prob = _logistic(c, n, split, "nonconvex")
            alpha = dsgd.nonconvex_step_size(n, s.T, prob.L, c.c_alpha)
            tr = dsgd.simulate(prob, [make_graph(s.graph, n)], dsgd.constant_schedule(alpha),
                               T=s.T, runs=s.runs, key=_key(c, "nonconvex", j, i),
                               order=c.order, log_every=s.log_every, eval_every=s.eval_every)
            per_n.append(tr.gradnorm)  # [2, K, R]: DSGD, centralized
            logging.info("nonconvex %s n=%d: q90 ||grad||^2 %.3g", split, n,
                         np.quantile(tr.gradnorm[0, -1], 0.9))
        out.append(per_n)
    return {"ns": np.array(s.ns), "ts": tr.ts, "gradnorm": np.array(out)}  # [S, N, 2, K, R]


def sweep_rate_hetero(c):
    s = c.rate_hetero
    gs = [make_graph(g, s.n) for g in s.graphs]
    tr = dsgd.simulate(_quadratic(c, s.n, s.hetero), gs, _sc_schedule(c, c.mu, c.L), T=s.T,
                       runs=s.runs, key=_key(c, "rate_hetero"), order=c.order, sigma=c.sigma,
                       log_every=s.log_every)
    return {"ts": tr.ts, "gap_mean": tr.gap_mean}


SWEEP_FNS = {name: globals()[f"sweep_{name}"] for name in configs.SWEEPS}


def run(config, workdir: str) -> dict:
    """Runs the experiment; returns the results dict (also written to ``workdir``)."""
    t_start = time.time()
    validate_config(config)
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    fp = checkpoint.config_fingerprint(config)
    done, runtimes = {}, {}
    with checkpoint.Checkpointer(os.path.join(os.path.abspath(workdir), "checkpoints"),
                                 max_to_keep=1) as ckpt:
        restored = ckpt.restore() if ckpt.latest_step() is not None else None
        if restored is not None:
            if int(restored["fingerprint"]) != fp:
                raise ValueError(f"--workdir={workdir} holds a run with a different config; "
                                 "pass a new --workdir or delete that one")
            done, runtimes = restored["sweeps"], restored["runtime_s"]
            logging.info("resuming: sweeps %s already done", sorted(done))
        for i, name in enumerate(config.sweeps):
            if name in done:
                continue
            logging.info("sweep %d/%d: %s", i + 1, len(config.sweeps), name)
            t0 = time.time()
            done[name] = SWEEP_FNS[name](config)
            runtimes[name] = time.time() - t0
            logging.info("sweep %s took %.1f s", name, runtimes[name])
            ckpt.save(i, {"fingerprint": fp, "sweeps": done, "runtime_s": runtimes}, force=True)
    metrics, claims = report.evaluate(config, done)
    metrics["runtime_per_sweep_s"] = {k: float(v) for k, v in runtimes.items()}
    metrics["devices"] = jax.device_count()
    metrics["processes"] = jax.process_count()
    if distributed.is_primary():
        report.plot_all(config, done, workdir)
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=config.variant, seed=config.seed,
                                 config=config, metrics=metrics, claims=claims,
                                 runtime_s=runtime)
    if distributed.is_primary():
        print(report.summary(config, metrics, claims))
    return {"paper": PAPER, "variant": config.variant, "seed": config.seed,
            "metrics": metrics, "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}  # None on processes other than 0, which write nothing
