r"""Rank-Learner benchmark: accuracy per cost of stage 2, and vmapped vs looped seeds.

    python benchmarks/rank_learner.py            # 10 seeds at the default sizes, ~2-4 min
    python benchmarks/rank_learner.py --quick    # 3 seeds, 500-row splits: a < 60 s run

Measured in one process on the synthetic DGP (the paper's benchmark):

1. Accuracy per cost: the stage-2 wall time (a compiled, warm call fitting every seed at
   once) and the mean test AUTOC of Rank-Learner, the plug-in ranker, the DR-learner and the
   T-learner (no stage 2: its time is 0), plus econml's DRLearner / causalml's
   BaseDRRegressor when installed (per seed, sequentially). All share the splits and the
   stage-1 nuisances. Target: Rank's stage-2 time <= 5x the DR-learner's, at >= its AUTOC.
2. vmapped vs looped seeds: the time of one compiled 10-seed vmapped ranker epoch divided by
   the time of 10 single-seed epochs (one device, no sharding). Target <= 1.5.

Ratios are what to quote; absolute times on shared CPUs are noise. Writes
``benchmarks/results/rank_learner.json`` (``rank_learner_quick.json`` with ``--quick``).
"""

import jax

# The CPU device count is fixed when the backend starts: set it before anything touches JAX.
jax.config.update("jax_num_cpu_devices", 8)

import functools
import json
import os
import platform
import time

import jax.numpy as jnp
import numpy as np
from absl import app, flags

from icml26_jax.core import results
from icml26_jax.rank_learner import (baselines, configs, fitting, model, nuisance,
                                     ranking, train)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

QUICK = flags.DEFINE_bool("quick", False, "3 seeds, 500-row splits, <= 10 epochs: a < 60 s "
                          "run of every code path; ratios are indicative only.")
REPEATS = flags.DEFINE_integer("repeats", 5, "Timed repeats of the epoch comparison (the "
                               "median is reported).")
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/"
                          "rank_learner.json, or rank_learner_quick.json with --quick).")

STAGE2_TARGET = 5.0  # Rank stage-2 time / DR-learner stage-2 time, at most
VMAP_TARGET = 1.5  # 10-seed vmapped epoch / 10 single-seed epochs, at most


def _timed(fn):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t


def _stage2(c, P, seeds):
    """Stage-1 nuisances, then each stage-2 learner twice (compile, then the timed call)."""
    s2, test = P["stage2"], P["test"]
    n_tr = P["n_stage2_train"]
    nu2, nut, _ = train._nuisances(c, P, seeds)
    phi2 = np.asarray(ranking.aipw(s2.y, s2.t, nu2.mu0, nu2.mu1, nu2.pi, c.prop_clip))
    phit = np.asarray(ranking.aipw(test.y, test.t, nut.mu0, nut.mu1, nut.pi, c.prop_clip))
    tau2 = nu2.mu1 - nu2.mu0
    rc, fc = train.ranker_config(c), train.fit_config(c)
    S = len(seeds)
    w = np.zeros(phi2.shape, bool)
    w[:, :n_tr] = True
    args = (seeds, s2.x[:, :n_tr], tau2[:, :n_tr], phi2[:, :n_tr], s2.x[:, n_tr:],
            phi2[:, n_tr:])
    runs = {
        "rank": lambda: ranking.train_rankers(*args, np.ones(S, bool), rc, c.hidden),
        "plugin": lambda: baselines.plugin_ranker(*args, rc, c.hidden),
        "dr": lambda: baselines.dr_learner(seeds, s2.x, phi2, w, ~w, fc, c.hidden),
    }
    rows = {}
    for name, fn in runs.items():
        _, compile_s = _timed(fn)
        (g, p, h), s = _timed(fn)
        score = nuisance.predict_stack(g, p, test.x)
        rows[name] = {"stage2_s": s, "first_call_s": compile_s,
                      "epochs": float(np.mean(np.asarray(h.epochs))),
                      "autoc": float(train.evaluate(score, test, phit)["autoc"].mean())}
    rows["t"] = {"stage2_s": 0.0, "first_call_s": 0.0, "epochs": 0.0,
                 "autoc": float(train.evaluate(nut.mu1 - nut.mu0, test, phit)["autoc"].mean())}
    rows["oracle"] = {"stage2_s": 0.0, "first_call_s": 0.0, "epochs": 0.0,
                      "autoc": float(train.evaluate(test.tau, test, phit)["autoc"].mean())}
    for name, fn in (("econml_dr", baselines.econml_dr), ("causalml_dr", baselines.causalml_dr)):
        try:
            t0 = time.perf_counter()
            est = np.stack([fn(np.concatenate([P["nuis"].x[k], s2.x[k]]),
                               np.concatenate([P["nuis"].t[k], s2.t[k]]),
                               np.concatenate([P["nuis"].y[k], s2.y[k]]), test.x[k], seed=k)
                            for k in range(S)])
            rows[name] = {"stage2_s": time.perf_counter() - t0, "first_call_s": 0.0,
                          "epochs": 0.0,
                          "autoc": float(train.evaluate(est, test, phit)["autoc"].mean())}
        except ImportError:
            pass
    return rows, (tau2[:, :n_tr], phi2[:, :n_tr], s2.x[:, :n_tr])


@functools.partial(jax.jit, static_argnums=(0, 1))
def _epochs(graphdef, cfg, params, opt, keys, x, tau, phi):
    fn = lambda p, o, k, a, b, c: ranking.ranker_epoch(  # noqa: E731
        p, o, k, graphdef, a, b, c, True, cfg)
    return jax.vmap(fn)(params, opt, keys, x, tau, phi)


def _vmap_vs_loop(c, tau, phi, x, repeats):
    """Median time of one S-seed vmapped epoch and of S single-seed epochs (one device)."""
    rc = train.ranker_config(c)
    S = x.shape[0]
    graphdef, params = model.init_stack(range(S), x.shape[-1], c.hidden)
    opt = jax.vmap(fitting.optimizer(rc.fit).init)(params)
    keys = jax.random.split(jax.random.key(0), S)
    dev = jax.devices()[0]
    put = lambda a: jax.device_put(a, dev)  # noqa: E731
    full = [put(a) for a in (params, opt, keys, jnp.asarray(x), jnp.asarray(tau),
                             jnp.asarray(phi))]
    single = [[put(jax.tree.map(lambda a: a[k:k + 1], t)) for t in full] for k in range(S)]
    jax.block_until_ready(_epochs(graphdef, rc, *full))
    jax.block_until_ready(_epochs(graphdef, rc, *single[0]))
    vm, lp = [], []
    for _ in range(repeats):  # round robin: machine noise hits both alike
        _, s = _timed(lambda: _epochs(graphdef, rc, *full))
        vm.append(s)
        t0 = time.perf_counter()
        for k in range(S):
            jax.block_until_ready(_epochs(graphdef, rc, *single[k]))
        lp.append(time.perf_counter() - t0)
    return float(np.median(vm)), float(np.median(lp)), ranking.steps_per_epoch(x.shape[1], rc)


def main(argv):
    del argv
    c = configs.get_config("smoke" if QUICK.value else "default")
    if not QUICK.value:
        c.num_seeds = 10
    seeds = train.seeds_of(c)
    P = train.prepare(c, "synthetic", seeds)
    rows, (tau, phi, x) = _stage2(c, P, seeds)
    vm, lp, steps = _vmap_vs_loop(c, tau, phi, x, REPEATS.value)
    ratio_time = rows["rank"]["stage2_s"] / rows["dr"]["stage2_s"]
    table = [[k, v["stage2_s"], v["first_call_s"], v["epochs"], v["autoc"],
              v["autoc"] / rows["oracle"]["autoc"]] for k, v in rows.items()]
    print(results.format_table(table, ["learner", "stage-2 s (warm)", "first call s",
                                       "epochs", "AUTOC", "/oracle"],
                               title=f"Stage 2, {len(seeds)} seeds at once", floatfmt=".4g"))
    print(f"\nRank / DR-learner stage-2 time: {ratio_time:.2f} (target <= {STAGE2_TARGET}); "
          f"AUTOC Rank {rows['rank']['autoc']:.4f} vs DR {rows['dr']['autoc']:.4f}")
    print(f"{len(seeds)}-seed vmapped epoch {vm:.3f} s vs {len(seeds)} single-seed epochs "
          f"{lp:.3f} s ({steps} steps of {c.batch} pairs): ratio {vm / lp:.3f} "
          f"(target <= {VMAP_TARGET})")
    out = {"benchmark": "rank_learner", "quick": QUICK.value, "num_seeds": len(seeds),
           "platform": platform.platform(), "devices": jax.device_count(),
           "stage2": rows,
           "rank_over_dr_time": ratio_time,
           "rank_over_dr_time_target": STAGE2_TARGET,
           "rank_time_target_met": bool(ratio_time <= STAGE2_TARGET),
           "rank_autoc_ge_dr": bool(rows["rank"]["autoc"] >= rows["dr"]["autoc"]),
           "vmapped_epoch_s": vm, "looped_epochs_s": lp, "steps_per_epoch": steps,
           "vmap_over_loop": vm / lp, "vmap_target": VMAP_TARGET,
           "vmap_target_met": bool(vm / lp <= VMAP_TARGET)}
    path = OUT.value or os.path.join(REPO_ROOT, "benchmarks", "results",
                                     "rank_learner_quick.json" if QUICK.value
                                     else "rank_learner.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(out), f, indent=2)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
