r"""ATC benchmark: per-observation cost of the jitted learner against its alternatives.

    python benchmarks/atc_cusum.py            # the spec's sizes, ~1-2 min on 2 CPU cores
    python benchmarks/atc_cusum.py --quick    # T = 1000 / 4000, R = 16: a < 60 s smoke run

Measured in one process, float64, on the same G1 series (the paper's benchmark):

1. JAX ATC ``scan="geom"`` vs ``scan="full"`` (jit + vmap over R = 64 runs, one device),
   T = 2000, S in {0, 4, 16}. Targets: geom >= 2x faster (reference 2-3x) with regret within
   10% (reference 19.4 vs 19.7, 89.8 vs 89.0, 227.7 vs 221.3).
2. JAX ATC geom at T = 16000, R = 64 vs ``atc.atc_numpy`` (the same algorithm as a Python loop
   over t vectorised over runs and candidates). Target: JAX >= 5x faster [R]. The JAX learner
   is also timed with the runs sharded over 8 (simulated CPU) devices, as ``train.scores``
   runs it.
3. The peers, for context (no target): ``focus_predict`` (FOCuS, exact scan, O(log t) per
   step, plus re-feeds after alarms) and ``adwin_predict`` (river's ADWIN), per update.

JAX cases are timed after a compiling call, on fresh series; the minimum over ``--repeats``
calls is kept. Ratios are what to quote; absolute times on shared CPUs are noise. Writes
``benchmarks/results/atc_cusum.json`` (``atc_cusum_quick.json`` with ``--quick``).
"""

import jax

# The CPU device count is fixed when the backend starts: set it before anything touches JAX.
jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_enable_x64", True)

import json
import os
import platform
import time

import jax.numpy as jnp
import numpy as np
from absl import app, flags

from icml26_jax.atc_cusum import atc, baselines, envs, metrics, train
from icml26_jax.core import results

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

QUICK = flags.DEFINE_bool("quick", False, "Small sizes (T = 1000 / 4000, R = 16): a < 60 s "
                          "smoke run of every code path; ratios are indicative only.")
REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls per JAX case (fresh series each); "
                               "the minimum is reported.")
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/atc_cusum.json, "
                          "or atc_cusum_quick.json with --quick).")

SCAN_TARGET = 2.0  # geom vs full speed at T = 2000
SCAN_REGRET_TOL = 0.10
NUMPY_TARGET = 5.0  # JAX geom vs the NumPy loop at T = 16000
SCAN_REFERENCE = {0: (19.4, 19.7), 4: (89.8, 89.0), 16: (227.7, 221.3)}


def _data(seed, runs, T, S):
    rng = np.random.default_rng([seed, runs, T, S])
    mu = envs.random_jumps(rng, runs, T, S)
    return mu, envs.observe(rng, mu)


def _time_jax(fn, make, repeats):
    """(seconds of the first call incl. compile, min steady seconds, last output)."""
    x = make(0)
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(x))
    first = time.perf_counter() - t0
    best = np.inf
    for i in range(repeats):
        x = make(i + 1)
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(x))
        best = min(best, time.perf_counter() - t0)
    return first, best, out


def bench_scans(T, runs, repeats):
    rows = []
    for S in (0, 4, 16):
        res = {}
        for scan in atc.SCANS:
            p = atc.ATCParams(1.0, scan=scan)
            f = jax.jit(jax.vmap(lambda v, p=p: atc.atc_predict(p, v).pred))
            data = {}

            def make(i, S=S):
                data[i] = _data(i, runs, T, S)
                return jnp.asarray(data[i][1])

            first, best, pred = _time_jax(f, make, repeats)
            reg = float(metrics.regret(np.asarray(pred), data[repeats][0]).mean())
            res[scan] = {"first_s": first, "steady_s": best,
                         "us_per_obs": best / (runs * T) * 1e6, "regret": reg}
        speed = res["full"]["steady_s"] / res["geom"]["steady_s"]
        rel = res["geom"]["regret"] / res["full"]["regret"] - 1
        rows.append({"S": S, "T": T, "runs": runs, **{f"{k}_{m}": v[m] for k, v in res.items()
                                                      for m in v},
                     "speedup": speed, "regret_rel_diff": rel,
                     "meets_target": bool(speed >= SCAN_TARGET and abs(rel) <= SCAN_REGRET_TOL),
                     "reference_regret_geom_full": SCAN_REFERENCE[S]})
    return rows


def bench_numpy(T, runs, repeats):
    p = atc.ATCParams(1.0)
    f = jax.jit(jax.vmap(lambda v: atc.atc_predict(p, v).pred))
    make = lambda i: jnp.asarray(_data(100 + i, runs, T, 4)[1])  # noqa: E731
    first, best, _ = _time_jax(f, make, repeats)

    def sharded(x):
        return train.scores(("atc", p), np.asarray(x), np.zeros(x.shape))["regret"]

    s_first, s_best, _ = _time_jax(sharded, make, repeats)
    x = _data(99, runs, T, 4)[1]
    t0 = time.perf_counter()
    pred_np, _ = atc.atc_numpy(p, x)
    t_np = time.perf_counter() - t0
    same = float(np.max(np.abs(pred_np - np.asarray(f(jnp.asarray(x))))))
    return {"T": T, "runs": runs, "jax_first_s": first, "jax_steady_s": best,
            "jax_sharded_steady_s": s_best, "numpy_s": t_np,
            "jax_us_per_obs": best / (runs * T) * 1e6,
            "jax_sharded_us_per_obs": s_best / (runs * T) * 1e6,
            "numpy_us_per_obs": t_np / (runs * T) * 1e6, "speedup": t_np / best,
            "speedup_sharded": t_np / s_best, "max_abs_pred_diff": same,
            "meets_target": bool(t_np / best >= NUMPY_TARGET)}


def bench_peers(T, series):
    out = {}
    avail = baselines.peers_available()
    xs = [_data(200 + i, 1, T, 4)[1][0] for i in range(series)]
    for name, fn in (("focus", lambda x: baselines.focus_predict(x, 1.0, 3.0)),
                     ("adwin", baselines.adwin_predict)):
        if avail[name]:
            out[name] = {"skipped": avail[name]}
            continue
        t0 = time.perf_counter()
        for x in xs:
            fn(x)
        out[name] = {"us_per_update": (time.perf_counter() - t0) / (series * T) * 1e6,
                     "T": T, "series": series}
    return out


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    quick = QUICK.value
    t_scan, t_np, runs = (1000, 4000, 16) if quick else (2000, 16000, 64)
    t0 = time.time()
    scans = bench_scans(t_scan, runs, REPEATS.value)
    print(results.format_table(
        [[r["S"], r["geom_us_per_obs"], r["full_us_per_obs"], r["speedup"], r["geom_regret"],
          r["full_regret"], r["meets_target"]] for r in scans],
        ["S", "geom µs/obs", "full µs/obs", "full/geom", "regret geom", "regret full", "target"],
        title=f"(1) ATC geom vs full scan, T = {t_scan}, R = {runs} (target >= {SCAN_TARGET}x, "
              f"regret within {SCAN_REGRET_TOL:.0%})", floatfmt=".4g"))
    npy = bench_numpy(t_np, runs, REPEATS.value)
    print()
    print(results.format_table(
        [["JAX (1 device)", npy["jax_us_per_obs"], npy["speedup"]],
         ["JAX (runs on 8 devices)", npy["jax_sharded_us_per_obs"], npy["speedup_sharded"]],
         ["NumPy loop", npy["numpy_us_per_obs"], 1.0]],
        ["learner", "µs/obs", "speed-up vs NumPy"],
        title=f"(2) ATC geom, T = {t_np}, R = {runs} (target >= {NUMPY_TARGET}x)", floatfmt=".4g"))
    peers = bench_peers(t_np // 4 if quick else t_np, 2)
    print()
    print(results.format_table(
        [[k, v.get("us_per_update"), v.get("skipped", "")] for k, v in peers.items()],
        ["peer", "µs/update", "note"], title="(3) peers (Python loops, context only)",
        floatfmt=".4g"))
    out = {"paper": "atc_cusum", "quick": quick, "scans": scans, "numpy": npy, "peers": peers,
           "jax": jax.__version__, "devices": jax.device_count(), "cpu_count": os.cpu_count(),
           "platform": platform.platform(), "runtime_s": time.time() - t0}
    path = OUT.value or os.path.join(REPO_ROOT, "benchmarks", "results",
                                     "atc_cusum_quick.json" if quick else "atc_cusum.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(out), f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    app.run(main)
