r"""DSGD-HP benchmark: gossip by ppermute vs all_gather vs jit-sharded dense, and the simulator.

    python benchmarks/dsgd_hp.py            # the spec's sizes, ~4-5 min on 2 CPU cores
    python benchmarks/dsgd_hp.py --quick    # T = 100, n = 64 only, < 60 s

Measured in one process on the same inputs, with 8 (simulated CPU) devices, R = 256 runs,
d = 10 (the paper's benchmark):

1. Gossip only: T mixing steps in one jitted ``lax.scan`` (no noise), n in {64, 256}, users
   sharded over a ``core.mesh.users_mesh(n)`` mesh (block [R, n/8, d] per device):
   ``gossip.mix_ring`` (two one-row ``ppermute`` halo exchanges) vs ``gossip.mix_dense`` on
   the ring's W (``all_gather`` of every user, then the device's rows of W) in the same
   ``shard_map``, vs a jit-sharded dense ``einsum`` on arrays placed with
   ``NamedSharding(mesh, P(None, USERS, None))`` (XLA picks the collectives). Targets:
   dense/ppermute >= 3 at n = 64 and >= 4 at n = 256 (reference 5.0x, 6.3x).
2. Full DSGD step (``dsgd.simulate``, quadratic, n = 64, T = 2000): ring vs exp vs complete,
   each alone, in microseconds per user·run·step. No target: drawing the Gaussian noise
   dominates the step (reference 0.70 / 0.79 / 0.66 us); on simulated CPU devices the
   collectives per step weigh in as well.
3. Network sweep: ring, torus, exp, er, complete (n = 64, R = 128, T = 2000) in one
   common-noise ``simulate`` vs five separate calls. Target: >= 2x.

Every case is timed twice: the first call (trace + XLA compile + run; the XLA compile seconds
inside it are summed from ``jax.monitoring`` events) and then steady-state calls with fresh
inputs (another noise key), which must not compile. Ratios use steady-state times; absolute
times on shared CPUs are noise. Prints the tables and writes ``benchmarks/results/
dsgd_hp.json`` (``dsgd_hp_quick.json`` with ``--quick``, so a smoke run never overwrites the
measured numbers).
"""

import jax

# First action: the CPU device count is fixed when the backend starts (which any device
# query or computation does), so it is set before anything else can touch JAX.
jax.config.update("jax_num_cpu_devices", 8)

import functools
import json
import os
import platform
import time

import jax.numpy as jnp
import jaxlib
import numpy as np
from absl import app, flags
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import results
from icml26_jax.core.mesh import USERS
from icml26_jax.core.testing import BACKEND_COMPILE_EVENT
from icml26_jax.dsgd_hp import dsgd, gossip, graphs, problems

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

QUICK = flags.DEFINE_bool("quick", False, "Small sizes (T = 100, n = 64 only): a < 60 s smoke "
                          "run of every code path; ratios are indicative only.")
REPEATS = flags.DEFINE_integer("repeats", 1, "Steady-state calls per case (fresh inputs each); "
                               "the minimum is reported, which filters out load spikes of "
                               "a shared machine.")
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/dsgd_hp.json, "
                          "or dsgd_hp_quick.json with --quick).")

RUNS = 256
DIM = 10
NETWORK_GRAPHS = ("ring", "torus", "exp", "er", "complete")
# Spec targets (ratio >= bound) and the reference implementation's measured ratios.
GOSSIP_TARGETS = {64: 3.0, 256: 4.0}
GOSSIP_REFERENCE = {64: {"dense": 5.0, "jit": 4.1}, 256: {"dense": 6.3, "jit": 8.2}}
NETWORK_TARGET = 2.0
STEP_REFERENCE_US = {"ring": 0.70, "exp": 0.79, "complete": 0.66}
# float32 iterates of size ~1: the three gossip paths differ only in summation order.
GOSSIP_ATOL = 1e-5
# The common-noise scan and a single-graph scan apply the same float32 operations to the same
# noise; only XLA's fusion (and so rounding) differs between the two programs. The compared
# gaps (~5e-5) are squares of distances ~5e-3 to x* of iterates ~1, so one float32 ulp of x
# is ~3e-5 of the gap, and 2000 steps of differently rounded updates random-walk to a few
# 1e-3 at the extreme run (measured: 3e-4 to 3e-3 over repeated runs). A wrong noise draw or
# neighbour changes the gaps by O(1), so 1e-2 still catches it.
NETWORK_RTOL = 1e-2


def _sizes(quick: bool) -> dict:
    if quick:
        return {"gossip_ns": (64,), "gossip_T": 100, "step_n": 64, "step_T": 100,
                "step_log_every": 50, "network_n": 64, "network_runs": 128, "network_T": 100,
                "network_log_every": 50, "check_steps": 3}
    return {"gossip_ns": (64, 256), "gossip_T": 1000, "step_n": 64, "step_T": 2000,
            "step_log_every": 500, "network_n": 64, "network_runs": 128, "network_T": 2000,
            "network_log_every": 500, "check_steps": 3}


class _CompileClock:
    """Counts and sums XLA backend compilations (any thread) inside a ``with`` block."""

    def __init__(self):
        self.count, self.seconds = 0, 0.0

    def _listener(self, event: str, duration_secs: float, **kwargs) -> None:
        del kwargs
        if event == BACKEND_COMPILE_EVENT:
            self.count += 1
            self.seconds += duration_secs

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listener)


def _call(fn, *args):
    """``(output, wall seconds, XLA compile seconds, compilations)`` of one blocking call."""
    with _CompileClock() as clock:
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        wall = time.perf_counter() - t0
    return out, wall, clock.seconds, clock.count


def _measure(fn, make_args, repeats: int) -> tuple[dict, object]:
    """First call on ``make_args(0)``, then ``repeats`` steady calls on ``make_args(1..)``.

    Returns the timing record and the output of the last call.
    """
    out, first, compile_s, n_compiles = _call(fn, *make_args(0))
    steady, steady_compiles = [], 0
    for i in range(1, repeats + 1):
        out, wall, _, count = _call(fn, *make_args(i))
        steady.append(wall)
        steady_compiles += count
    if steady_compiles:
        # A steady-state call that compiles measures the compiler, not the program.
        raise RuntimeError(f"{steady_compiles} compilation(s) in steady-state calls")
    return {"first_call_s": first, "compile_s": compile_s, "n_compiles": n_compiles,
            "steady_s": min(steady), "steady_all_s": steady}, out


# ----------------------------------------------------------------------------- 1. gossip


def _gossip_programs(mesh, n: int, steps: int):
    """The three jitted T-step mixing programs on X [R, n, d] (same scan, same carry)."""
    spec = P(None, USERS, None)
    xs = NamedSharding(mesh, spec)

    def scan(mix, y):
        return lax.scan(lambda c, _: (mix(c), None), y, None, length=steps)[0]

    ring = jax.jit(jax.shard_map(lambda y: scan(functools.partial(gossip.mix_ring, n=n), y),
                                 mesh=mesh, in_specs=spec, out_specs=spec))
    dense = jax.jit(jax.shard_map(
        lambda y, w_rows: scan(lambda c: gossip.mix_dense(c, w_rows), y),
        mesh=mesh, in_specs=(spec, P(USERS, None)), out_specs=spec))
    # The contraction runs over the sharded users axis: out_sharding keeps the carry's type.
    jit_dense = jax.jit(lambda y, w: scan(
        lambda c: jnp.einsum("ij,rjd->rid", w, c, out_sharding=xs), y))
    return {"ppermute": ring, "dense": dense, "jit": jit_dense}


def bench_gossip(n: int, steps: int, check_steps: int, repeats: int) -> dict:
    mesh = mesh_lib.users_mesh(n)
    W = graphs.make_graph("ring", n).W  # [n, n] float64
    w_rows = mesh_lib.put(W.astype(np.float32), mesh, P(USERS, None))  # this device's rows
    w_full = mesh_lib.put(W.astype(np.float32), mesh, P())

    def x(seed):  # [R, n, d]
        return np.random.default_rng(seed).standard_normal((RUNS, n, DIM)).astype(np.float32)

    def args(name, seed):
        xd = mesh_lib.put(x(seed), mesh, P(None, USERS, None))
        return {"ppermute": (xd,), "dense": (xd, w_rows), "jit": (xd, w_full)}[name]

    # Correctness first, on a few steps against float64 W^k X.
    ref = x(100)
    for _ in range(check_steps):
        ref = np.einsum("ij,rjd->rid", W, ref)
    check = {}
    for name, fn in _gossip_programs(mesh, n, check_steps).items():
        got = np.asarray(jax.device_get(fn(*args(name, 100))))
        check[name] = float(np.abs(got - ref).max())
    if max(check.values()) > GOSSIP_ATOL:
        raise AssertionError(f"gossip paths disagree at n={n}: max |diff| to float64 W^k X "
                             f"{check} > {GOSSIP_ATOL}")

    out = {"n": n, "devices": int(mesh.shape[USERS]), "users_per_device": n // mesh.shape[USERS],
           "T": steps, "max_abs_diff_vs_float64": check, "check_steps": check_steps}
    finals = {}
    for name, fn in _gossip_programs(mesh, n, steps).items():
        rec, y = _measure(fn, functools.partial(args, name), repeats)
        rec["us_per_step"] = rec["steady_s"] / steps * 1e6
        out[name] = rec
        finals[name] = np.asarray(jax.device_get(y))
    # The timed T-step outputs agree too (the same last input went into every path).
    out["max_abs_diff_T_steps"] = float(max(np.abs(finals[k] - finals["ppermute"]).max()
                                            for k in ("dense", "jit")))
    base = out["ppermute"]["us_per_step"]
    out["ratio_dense_over_ppermute"] = out["dense"]["us_per_step"] / base
    out["ratio_jit_over_ppermute"] = out["jit"]["us_per_step"] / base
    return out


# ------------------------------------------------------------------ 2. full DSGD step


def bench_step(n: int, steps: int, log_every: int, repeats: int) -> dict:
    prob = problems.quadratic(n)
    schedule = dsgd.strongly_convex_schedule(2.0, 1.0, 20.0)
    out = {"n": n, "runs": RUNS, "T": steps, "log_every": log_every}
    for name in ("ring", "exp", "complete"):
        g = graphs.make_graph(name, n)
        fn = lambda key, g=g: dsgd.simulate(prob, [g], schedule, T=steps, runs=RUNS, key=key,
                                            log_every=log_every)
        rec, _ = _measure(fn, lambda i: (jax.random.key(i),), repeats)
        rec["us_per_user_run_step"] = rec["steady_s"] / (n * RUNS * steps) * 1e6
        rec["reference_us"] = STEP_REFERENCE_US[name]
        # Collectives per step: one ppermute per distinct device hop (gossip.circulant_needs),
        # or one pmean for the complete graph.
        rec["collectives_per_step"] = (
            len(gossip.circulant_needs(g.offsets, n, n // jax.device_count())) if g.offsets
            else 1)
        out[name] = rec
    for name in ("exp", "complete"):
        out[f"ratio_{name}_over_ring"] = (out[name]["us_per_user_run_step"]
                                          / out["ring"]["us_per_user_run_step"])
    return out


# -------------------------------------------------------------------- 3. network sweep


def bench_network(n: int, runs: int, steps: int, log_every: int, repeats: int) -> dict:
    # The experiment's network sweep: heterogeneous users (hetero = 0.25).
    prob = problems.quadratic(n, hetero=0.25)
    schedule = dsgd.strongly_convex_schedule(2.0, 1.0, 20.0)
    gs = [graphs.make_graph(name, n) for name in NETWORK_GRAPHS]
    sim = functools.partial(dsgd.simulate, prob, schedule=schedule, T=steps, runs=runs,
                            log_every=log_every)
    keys = lambda i: (jax.random.key(i),)
    common, tr_common = _measure(lambda key: sim(gs, key=key), keys, repeats)
    separate, tr_sep = {}, {}
    for g in gs:
        separate[g.name], tr_sep[g.name] = _measure(lambda key, g=g: sim([g], key=key), keys,
                                                    repeats)
    total = {k: sum(separate[g][k] for g in separate)
             for k in ("first_call_s", "compile_s", "n_compiles", "steady_s")}
    # Same key, same noise: each graph's (and the centralized) trace in the common scan must
    # equal its own scan's.
    rel = 0.0
    for i, g in enumerate(NETWORK_GRAPHS):
        for a, b in ((tr_common.gap_mean[i], tr_sep[g].gap_mean[0]),
                     (tr_common.gap_mean[-1], tr_sep[g].gap_mean[1])):
            rel = max(rel, float(np.max(np.abs(a - b) / np.abs(b))))
    return {"n": n, "runs": runs, "T": steps, "log_every": log_every, "graphs": NETWORK_GRAPHS,
            "common": common, "separate": separate, "separate_total": total,
            "max_rel_diff_common_vs_separate": rel, "rtol": NETWORK_RTOL,
            "traces_consistent": rel <= NETWORK_RTOL,
            "ratio_separate_over_common": total["steady_s"] / common["steady_s"]}


# ---------------------------------------------------------------------------- report


def _target(name, measured, bound, reference) -> dict:
    claim = results.at_least(name, measured, bound)
    return {"name": name, "measured": claim.measured, "threshold": claim.threshold,
            "met": claim.holds, "reference": reference}


def _tables(res: dict) -> str:
    cols = ["case", "first call s", "compile s", "steady s"]
    out = []
    rows = []
    for g in res["gossip"]:
        for name in ("ppermute", "dense", "jit"):
            r = g[name]
            ratio = None if name == "ppermute" else g[f"ratio_{name}_over_ppermute"]
            ref = GOSSIP_REFERENCE.get(g["n"], {}).get(name)
            rows.append([f"n={g['n']} {name}", r["first_call_s"], r["compile_s"], r["steady_s"],
                         r["us_per_step"], ratio, ref])
    out.append(results.format_table(
        rows, cols + ["us/step", "x ppermute", "reference x"],
        title=f"(1) gossip only: ring W, R={RUNS}, d={DIM}, T={res['sizes']['gossip_T']} "
              f"mixing steps, {res['device_count']} devices (dense = shard_map all_gather, "
              "jit = jit-sharded einsum)"))
    st = res["dsgd_step"]
    rows = [[name, st[name]["first_call_s"], st[name]["compile_s"], st[name]["steady_s"],
             st[name]["us_per_user_run_step"], st[name]["reference_us"]]
            for name in ("ring", "exp", "complete")]
    out.append(results.format_table(
        rows, cols + ["us/(user run step)", "reference us"],
        title=f"(2) full DSGD step (dsgd.simulate, quadratic, incl. the centralized shadow): "
              f"n={st['n']}, R={st['runs']}, T={st['T']}") +
        f"\n  No target: the spec expects drawing the Gaussian noise (one key per run, step "
        f"and user) to dominate the step. Here exp/ring = {st['ratio_exp_over_ring']:.2f}, "
        f"complete/ring = {st['ratio_complete_over_ring']:.2f}: on simulated CPU devices each "
        f"collective (exp: {st['exp']['collectives_per_step']} ppermutes per step, ring "
        f"{st['ring']['collectives_per_step']}, complete 1 pmean) costs about as much as the "
        "noise.")
    nw = res["network_sweep"]
    rows = [["common (5 graphs, 1 scan)", nw["common"]["first_call_s"],
             nw["common"]["compile_s"], nw["common"]["steady_s"]]]
    rows += [[f"separate {g}", r["first_call_s"], r["compile_s"], r["steady_s"]]
             for g, r in nw["separate"].items()]
    tot = nw["separate_total"]
    rows.append(["separate total", tot["first_call_s"], tot["compile_s"], tot["steady_s"]])
    out.append(results.format_table(
        rows, cols, title=f"(3) network sweep: {', '.join(nw['graphs'])} at n={nw['n']}, "
                          f"R={nw['runs']}, T={nw['T']}") +
        f"\n  separate / common (steady): {nw['ratio_separate_over_common']:.2f}x; "
        f"traces agree to {nw['max_rel_diff_common_vs_separate']:.1e} (relative; "
        f"tolerance {nw['rtol']:g})")
    rows = [[t["name"], t["measured"], t["threshold"], t["reference"], t["met"]]
            for t in res["targets"]]
    out.append(results.format_table(
        rows, ["target", "measured", "threshold", "reference", "met"], floatfmt=".3g",
        title="targets (steady-state ratios)" + (
            " -- QUICK sizes, indicative only" if res["quick"] else "")))
    return "\n\n".join(out)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if REPEATS.value < 1:
        raise app.UsageError(f"--repeats must be >= 1, got {REPEATS.value}")
    t_start = time.perf_counter()
    quick = QUICK.value
    sizes = _sizes(quick)
    print(f"jax {jax.__version__}, {jax.device_count()} {jax.devices()[0].platform} devices; "
          f"{'quick' if quick else 'full'} sizes", flush=True)

    res = {"paper": "dsgd_hp", "quick": quick, "jax_version": jax.__version__,
           "jaxlib_version": jaxlib.__version__,
           "platform": jax.devices()[0].platform, "device_count": jax.device_count(),
           "host_cpu_count": os.cpu_count(), "python": platform.python_version(),
           "runs": RUNS, "dim": DIM, "repeats": REPEATS.value, "sizes": sizes}
    res["gossip"] = []
    for n in sizes["gossip_ns"]:
        t0 = time.perf_counter()
        res["gossip"].append(bench_gossip(n, sizes["gossip_T"], sizes["check_steps"],
                                          REPEATS.value))
        print(f"gossip n={n}: {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    res["dsgd_step"] = bench_step(sizes["step_n"], sizes["step_T"], sizes["step_log_every"],
                                  REPEATS.value)
    print(f"DSGD step: {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    res["network_sweep"] = bench_network(sizes["network_n"], sizes["network_runs"],
                                         sizes["network_T"], sizes["network_log_every"],
                                         REPEATS.value)
    print(f"network sweep: {time.perf_counter() - t0:.1f} s", flush=True)

    targets = []
    for g in res["gossip"]:
        n = g["n"]
        targets.append(_target(f"gossip_dense_over_ppermute_n{n}",
                               g["ratio_dense_over_ppermute"], GOSSIP_TARGETS[n],
                               GOSSIP_REFERENCE[n]["dense"]))
    targets.append(_target("network_separate_over_common",
                           res["network_sweep"]["ratio_separate_over_common"], NETWORK_TARGET,
                           None))
    res["targets"] = targets
    res["reference_jit_over_ppermute"] = {n: GOSSIP_REFERENCE[n]["jit"] for n in GOSSIP_REFERENCE}
    res["notes"] = [
        "Ratios use steady-state times (calls after the first, fresh inputs, no compilation); "
        "absolute times on shared CPUs are noise.",
        "compile_s sums XLA backend-compile events inside the first call; first_call_s also "
        "includes tracing, lowering and one run.",
        "The full DSGD step has no target (the spec expects noise generation to dominate "
        "it); with 8 simulated CPU devices the number of collectives per step matters too "
        "(one ppermute per distinct device hop, see dsgd_step.<graph>.collectives_per_step; "
        "complete 1 pmean).",
    ]
    res["wall_s"] = time.perf_counter() - t_start

    print()
    print(_tables(res))
    print(f"\nwall time {res['wall_s']:.0f} s")
    default = "dsgd_hp_quick.json" if quick else "dsgd_hp.json"
    path = OUT.value or os.path.join(REPO_ROOT, "benchmarks", "results", default)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(res), f, indent=2, allow_nan=False)
        f.write("\n")
    print(f"wrote {path}")
    if not res["network_sweep"]["traces_consistent"]:
        # Written first so the numbers survive; the exit status still flags the mismatch.
        raise SystemExit(f"common-noise and separate traces differ: max relative difference "
                         f"{res['network_sweep']['max_rel_diff_common_vs_separate']:.2e} > "
                         f"{NETWORK_RTOL}")


if __name__ == "__main__":
    app.run(main)
