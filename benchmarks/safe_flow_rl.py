r"""SafeFlowRL benchmark: action-selection latency, flow density throughput, accuracy per cost.

    python benchmarks/safe_flow_rl.py                       # ~1 min on 2 CPU cores
    python benchmarks/safe_flow_rl.py --results=runs/safe_flow_rl/results.json

In one process, on states of the E1 data (the paper's benchmark):

1. action-selection latency of the batched, jitted policies at the default sizes (hidden 128,
   6 couplings, N = 16 candidates): ours (refine + decode + critics + selection) against
   FISOR-lite (N = 16 Gaussian samples + Q_h) and BC-Lag (one deterministic actor pass).
   Latency does not depend on the weight values, so freshly initialised networks of the
   trained shapes are timed. Target: ours / FISOR-lite <= 3.
2. flow ``log_prob`` throughput against the equivalent distrax flow (``model.distrax_flow``,
   the same conditioner networks) when distrax is installed. Target: ours / distrax time
   <= 1.5.
3. accuracy per cost: violation rate and R_norm of each method of a finished run
   (``--results``, default ``runs/safe_flow_rl/results.json``) per ms of its latency.

Writes ``benchmarks/results/safe_flow_rl.json``.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

import json
import os
import platform
import time

import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

from icml26_jax.core import results, timing
from icml26_jax.safe_flow_rl import (baselines, configs, critics, data, envs,
                                     policies)
from icml26_jax.safe_flow_rl.model import (ConditionalRealNVP, LatentRefiner,
                                           distrax_flow)

BATCH = flags.DEFINE_integer("batch", 256, "States per policy call.")
REPEATS = flags.DEFINE_integer("repeats", 30, "Timed calls per measurement (median).")
RESULTS = flags.DEFINE_string("results", "runs/safe_flow_rl/results.json",
                              "results.json of a finished run, for accuracy per cost.")
OUT = flags.DEFINE_string("out", None, "Output JSON (default "
                          "benchmarks/results/safe_flow_rl.json).")


def bench_latency(obs, c, repeats: int) -> dict:
    O, A, H, N = obs.shape[1], 2, (int(c.hidden),) * 2, int(c.num_candidates)
    cg, cp = critics.make_critics(O, A, H, jax.random.key(0))
    fg, fp = nnx.split(ConditionalRealNVP(A, O, H, int(c.n_coupling), float(c.s_max),
                                          rngs=nnx.Rngs(1)), nnx.Param)
    rg, rp = nnx.split(LatentRefiner(O, A, "ordered", H, rngs=nnx.Rngs(2)), nnx.Param)
    ag, ap = baselines.make_actor("fisor_lite", O, A, H, jax.random.key(3))
    lg, lp = baselines.make_actor("bc_lag", O, A, H, jax.random.key(4))
    key = jax.random.key(5)
    eps, margin = jnp.float32(c.latent_budget), jnp.float32(0.0)
    pols = {
        "ours": (policies.refined_policy(fg, rg, cg, N), (rp, fp, cp, eps, margin)),
        "ours_deterministic": (policies.refined_policy(fg, rg, cg, N, deterministic=True),
                               (rp, fp, cp, eps, margin)),
        "prior_only": (baselines.prior_only(fg, cg, N), (fp, cp, margin)),
        "fisor_lite": (baselines.fisor_lite(ag, cg, N), (ap, cp)),
        "bc_lag": (baselines.bc_lag(lg), lp),
    }
    return {name: 1e3 * timing.median_seconds(jax.jit(act), params, key, obs, repeats=repeats)
            for name, (act, params) in pols.items()}


def bench_density(obs, c, repeats: int) -> dict:
    O, A = obs.shape[1], 2
    flow = ConditionalRealNVP(A, O, (int(c.hidden),) * 2, int(c.n_coupling), float(c.s_max),
                              rngs=nnx.Rngs(0))
    g, p = nnx.split(flow, nnx.Param)
    p = jax.tree.map(lambda x: x + 0.02 * jax.random.normal(jax.random.key(1), x.shape), p)
    flow = nnx.merge(g, p)
    a = jnp.clip(flow(jax.random.normal(jax.random.key(2), (obs.shape[0], A)), obs),
                 -0.99, 0.99)
    ours = jax.jit(lambda a, s: nnx.merge(g, p).log_prob(a, s))
    out = {"ours_ms": 1e3 * timing.median_seconds(ours, a, obs, repeats=repeats)}
    try:
        _, dist = distrax_flow(flow, obs)
    except ImportError as e:
        out["distrax"] = f"skipped: {e}"
        return out
    ref = jax.jit(dist.log_prob)
    out["distrax_ms"] = 1e3 * timing.median_seconds(ref, a, repeats=repeats)
    out["max_abs_diff"] = float(jnp.max(jnp.abs(ours(a, obs) - ref(a))))
    out["ratio_ours_over_distrax"] = out["ours_ms"] / out["distrax_ms"]
    return out


def accuracy_per_cost(path: str, latency: dict) -> dict:
    if not os.path.exists(path):
        return {"skipped": f"no results.json at {path}; run experiments/safe_flow_rl.py first"}
    res = results.load_results(path)
    methods = res["metrics"]["methods"]
    lat_of = {"ours_eps" + f"{float(res['config']['latent_budget']):g}": "ours",
              "ours_deterministic": "ours_deterministic", "prior_only": "prior_only",
              "fisor_lite": "fisor_lite", "bc_lag": "bc_lag"}
    rows = []
    for name, lname in lat_of.items():
        if name in methods:
            m, ms = methods[name], latency[lname]
            rows.append({"method": name, "violation_rate": m["violation_rate"],
                         "r_norm": m["r_norm"], "c_norm": m["c_norm"], "latency_ms": ms,
                         "violation_per_ms": m["violation_rate"] / ms,
                         "r_norm_per_ms": m["r_norm"] / ms})
    return {"results": path, "variant": res["variant"], "rows": rows}


def main(argv):
    del argv
    t0 = time.time()
    c = configs.get_config("default")
    ds = data.make_dataset(envs.EnvParams(), 20_000, jax.random.key(0))
    idx = np.random.default_rng(0).choice(len(ds["rewards"]), BATCH.value, replace=False)
    obs = jnp.asarray(ds["observations"][idx])
    lat = bench_latency(obs, c, REPEATS.value)
    ratio = lat["ours"] / lat["fisor_lite"]
    print(results.format_table([[k, f"{v:.3f}", f"{1e3 * v / BATCH.value:.2f}"]
                                for k, v in lat.items()],
                               ["policy", f"ms / {BATCH.value} states", "us / state"],
                               title="action-selection latency (jitted, batched)"))
    print(f"ours / FISOR-lite = {ratio:.2f} (target <= 3: {'holds' if ratio <= 3 else 'fails'})")
    dens = bench_density(obs, c, REPEATS.value)
    if "ratio_ours_over_distrax" in dens:
        r = dens["ratio_ours_over_distrax"]
        print(f"\nflow log_prob on {BATCH.value} states: ours {dens['ours_ms']:.3f} ms, distrax "
              f"{dens['distrax_ms']:.3f} ms, ratio {r:.2f} (target <= 1.5: "
              f"{'holds' if r <= 1.5 else 'fails'}); max |diff| {dens['max_abs_diff']:.1e}")
    else:
        print(f"\nflow log_prob: ours {dens['ours_ms']:.3f} ms; distrax {dens['distrax']}")
    acc = accuracy_per_cost(RESULTS.value, lat)
    if "rows" in acc:
        print()
        print(results.format_table(
            [[r["method"], f"{r['violation_rate']:.3f}", f"{r['r_norm']:.3f}",
              f"{r['latency_ms']:.3f}", f"{r['r_norm_per_ms']:.3f}"] for r in acc["rows"]],
            ["method", "violation", "R_norm", f"ms / {BATCH.value}", "R_norm / ms"],
            title=f"accuracy per cost ({acc['results']}, {acc['variant']})"))
    else:
        print("\naccuracy per cost:", acc["skipped"])
    targets = {"latency_ratio_ours_over_fisor_lite": ratio,
               "latency_ratio_holds": ratio <= 3}
    if "ratio_ours_over_distrax" in dens:
        targets["log_prob_ratio_ours_over_distrax"] = dens["ratio_ours_over_distrax"]
        targets["log_prob_ratio_holds"] = dens["ratio_ours_over_distrax"] <= 1.5
    out = {"latency_ms": lat, "batch": BATCH.value, "density": dens, "accuracy_per_cost": acc,
           "targets": targets, "jax": jax.__version__, "devices": jax.device_count(),
           "cpu_count": os.cpu_count(), "platform": platform.platform(),
           "runtime_s": time.time() - t0}
    path = OUT.value or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                     "safe_flow_rl.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(out), f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    app.run(main)
