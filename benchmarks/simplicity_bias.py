r"""Simplicity-bias benchmark: online-SGD speed against a NumPy reference, and the sample
efficiency of online SGD, FastICA and PCA for the non-Gaussian direction.

    python benchmarks/simplicity_bias.py           # d in {32, 256} speed; d in {32, 64} ICA
    python benchmarks/simplicity_bias.py --quick   # d = 32 only, fewer steps: < 60 s

(a) Speed (spec §Benchmark): replica-steps per second of ``online.run_online`` (R = 32; one
jitted program, vmapped replicas, on one device and sharded over the CPU devices) against
``baselines.online_numpy``, the same step vectorised over replicas in NumPy, in the same
process; compile time reported separately. Target: JAX / NumPy >= 2 at d = 256.

(b) Sample efficiency, no target: median over repeats of |m_v| reached from the same n in
{10 d, d^2, 10 d^2} MCM samples (beta_u = 0, beta_v = 9: v is visible only in the fourth
cumulant) by online SGD of the single-index denoiser (link v, delta = 2/d^2, one pass), by
scikit-learn ``FastICA`` (whitened, ``fun='cube'`` and ``'logcosh'``, best component and the
blindly chosen most platykurtic one) and by PCA (top covariance eigenvector). ICA is a batch
method that reuses the samples; online SGD sees each one once and needs n ~ d^3.
Writes ``benchmarks/results/simplicity_bias.json`` (``simplicity_bias_quick.json`` with
``--quick``).
"""

import json
import os
import platform
import time

from absl import app, flags

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

QUICK = flags.DEFINE_bool("quick", False, "d = 32 only, fewer steps and repeats: < 60 s.")
NUM_CPU_DEVICES = flags.DEFINE_integer("num_cpu_devices", 8, "Simulated CPU devices for the "
                                       "sharded column.")


def _speed(d: int, steps_jax: int, steps_np: int, R: int = 32) -> dict:
    import jax
    import numpy as np

    from icml26_jax.core import mesh as mesh_lib
    from icml26_jax.simplicity_bias import baselines, mcm, online

    cfg = mcm.MCMConfig(d=d)
    oc = online.OnlineConfig(d=d, delta=1 / d, n_steps=steps_jax, n_records=10, replicas=R)
    out = {}
    for name, mesh in (("jax_1dev", None), ("jax_sharded", mesh_lib.runs_mesh(R))):
        t0 = time.perf_counter()
        online.run_online(jax.random.key(0), cfg, oc, mesh=mesh)  # compile + run
        first = time.perf_counter() - t0
        times = []
        for k in range(3):
            t0 = time.perf_counter()
            online.run_online(jax.random.key(k + 1), cfg, oc, mesh=mesh)
            times.append(time.perf_counter() - t0)
        run = float(np.median(times))
        out[name] = {"replica_steps_per_s": R * steps_jax / run, "run_s": run,
                     "compile_s": max(0.0, first - run)}
    t0 = time.perf_counter()
    baselines.online_numpy(np.random.default_rng(0), cfg, 1 / d, steps_np, R)
    run = time.perf_counter() - t0
    out["numpy"] = {"replica_steps_per_s": R * steps_np / run, "run_s": run}
    for name in ("jax_1dev", "jax_sharded"):
        out[name]["ratio_vs_numpy"] = (out[name]["replica_steps_per_s"]
                                       / out["numpy"]["replica_steps_per_s"])
    return out


def _efficiency(d: int, repeats: int) -> dict:
    import jax
    import numpy as np

    from icml26_jax.simplicity_bias import baselines, mcm, online

    cfg = mcm.MCMConfig(d=d, beta_u=0.0, beta_v=9.0)
    ns = [10 * d, d * d, 10 * d * d]
    # Online SGD: one pass, records exactly at the three budgets.
    oc = online.OnlineConfig(d=d, delta=2.0 / d ** 2, n_steps=ns[-1], n_records=200,
                             replicas=32, link="v")
    res = online.run_online(jax.random.key(0), cfg, oc)
    rec = {}
    for n in ns:
        i = int(np.searchsorted(res.ns, n, side="right")) - 1
        rec[n] = float(np.median(np.abs(res.m_v[:, i])))
    out = {}
    for n in ns:
        rows = {"online_sgd": rec[n], "pca": [], "ica_cube_best": [], "ica_cube_blind": [],
                "ica_logcosh_best": [], "ica_logcosh_blind": []}
        for r in range(repeats):
            k_spk, k_x = jax.random.split(jax.random.key(100 + r))
            u, v = mcm.spikes(k_spk, d)
            x = np.asarray(mcm.sample(k_x, n, cfg, u, v), np.float64)
            rows["pca"].append(baselines.pca_overlap(x, v))
            for fun in ("cube", "logcosh"):
                ica = baselines.fastica_overlaps(x, v, fun, seed=r, max_iter=200)
                rows[f"ica_{fun}_best"].append(ica["best"])
                rows[f"ica_{fun}_blind"].append(ica["blind"])
                chance = ica["chance"]
        out[f"n{n}"] = {k: (v if k == "online_sgd" else float(np.median(v)))
                        for k, v in rows.items()}
        out[f"n{n}"]["chance_best_of_d"] = chance
        out[f"n{n}"]["n"] = n
    return out


def main(argv):
    del argv
    from icml26_jax.core import distributed

    distributed.maybe_initialize(None, 1, 0, num_cpu_devices=NUM_CPU_DEVICES.value)
    import jax

    from icml26_jax.core import results

    quick = QUICK.value
    speed_dims = (32,) if quick else (32, 256)
    eff_dims = (32,) if quick else (32, 64)
    res = {"speed": {}, "efficiency": {}}
    rows = []
    for d in speed_dims:
        r = _speed(d, steps_jax=20_000 if quick else 100_000, steps_np=500 if quick else 3000)
        res["speed"][f"d{d}"] = r
        rows.append([d, r["numpy"]["replica_steps_per_s"], r["jax_1dev"]["replica_steps_per_s"],
                     r["jax_sharded"]["replica_steps_per_s"], r["jax_1dev"]["ratio_vs_numpy"],
                     r["jax_sharded"]["ratio_vs_numpy"], r["jax_1dev"]["compile_s"]])
        print(f"speed d={d}: JAX/NumPy {r['jax_1dev']['ratio_vs_numpy']:.1f} (1 device), "
              f"{r['jax_sharded']['ratio_vs_numpy']:.1f} (sharded)", flush=True)
    print(results.format_table(rows, ["d", "numpy rs/s", "jax rs/s", "sharded rs/s",
                                      "jax/numpy", "sharded/numpy", "compile s"],
                               title="(a) online SGD, R = 32: replica-steps per second",
                               floatfmt=".3g"))
    rows = []
    for d in eff_dims:
        r = _efficiency(d, repeats=2 if quick else 3)
        res["efficiency"][f"d{d}"] = r
        for v in r.values():
            rows.append([d, v["n"], v["online_sgd"], v["pca"], v["ica_cube_best"],
                         v["ica_cube_blind"], v["ica_logcosh_best"], v["ica_logcosh_blind"],
                         v["chance_best_of_d"]])
        print(f"efficiency d={d} done", flush=True)
    print(results.format_table(rows, ["d", "n", "online SGD", "PCA", "ICA cube best",
                                      "cube blind", "ICA logcosh best", "logcosh blind",
                                      "chance best-of-d"],
                               title="(b) median |m_v| from the same n samples "
                                     "(beta_u = 0, beta_v = 9)", floatfmt=".3f"))
    key = f"d{max(speed_dims)}"
    ratio = res["speed"][key]["jax_1dev"]["ratio_vs_numpy"]
    res["targets"] = {f"jax_vs_numpy_{key}": {"measured": ratio, "target": ">= 2",
                                              "holds": ratio >= 2}}
    res["machine"] = {"platform": platform.platform(), "jax": jax.__version__,
                      "devices": str(jax.devices()[0]), "device_count": jax.device_count(),
                      "cpus": os.cpu_count()}
    path = os.path.join(REPO_ROOT, "benchmarks", "results",
                        "simplicity_bias_quick.json" if quick else "simplicity_bias.json")
    with open(path, "w") as f:
        json.dump(results.to_jsonable(res), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
