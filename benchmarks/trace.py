r"""TRACE benchmark, one process, same batches, compile time apart:

    python benchmarks/trace.py                 # ~1-2 min on 2 CPU cores
    python benchmarks/trace.py --repeats=50

(a) train-step throughput with the log-det of the expert flows from one ``jax.jvp`` (ours)
    against the full per-sample Jacobian of ``jax.jacfwd``, its diagonal taken after
    (target >= 3x);
(b) routed experts (expert k on its ``[K, m]`` slice) against every expert on every sample
    with a one-hot mask, at K = 5 and K = 10 (target >= 2x at K = 5);
(c) time to alpha_hat for one 50 x 500 trajectory ensemble: TRACE (encode, centroid least
    squares, clip, moving average) against ``hard_switch`` (encode, pooled expert
    log-likelihoods, Viterbi); no target.

Writes ``benchmarks/results/trace.json``.
"""

import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags
from flax import nnx

from icml26_jax.core import results, timing
from icml26_jax.trace import baselines, configs, data, infer, model

REPEATS = flags.DEFINE_integer("repeats", 20, "Timed calls per measurement (median).")
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/trace.json).")


def _step_fn(graphdef, tx, c, **variant):
    @jax.jit
    def step(params, opt, x, key):
        (loss, _), g = jax.value_and_grad(model.loss_fn, has_aux=True)(
            params, graphdef, x, key, c.beta, c.gamma, **variant)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), opt, loss
    return step


def _time_step(step, params, opt, x, repeats):
    key = jax.random.key(0)
    t0 = time.perf_counter()
    jax.block_until_ready(step(params, opt, x, key))
    compile_s = time.perf_counter() - t0
    sec = timing.median_seconds(step, params, opt, x, key, repeats=repeats, warmup=1)
    return {"step_ms": 1e3 * sec, "compile_s": compile_s,
            "sequences_per_s": x.shape[0] * x.shape[1] / sec}


def train_steps(c, k: int, batch: int, repeats: int, variants: dict) -> dict:
    net = model.TraceVAE(k, c.d, c.lags, c.hidden, c.expert_hidden, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(net, nnx.Param)
    tx = optax.adamw(c.lr, weight_decay=c.weight_decay)
    opt = tx.init(params)
    x = jax.random.normal(jax.random.key(1), (k, batch // k, c.lags + 1, c.d))
    out = {}
    for name, kw in variants.items():
        out[name] = _time_step(_step_fn(graphdef, tx, c, **kw), params, opt, x, repeats)
        print(f"K={k} batch {batch} {name:>16}: {out[name]['step_ms']:.2f} ms/step "
              f"(compile {out[name]['compile_s']:.1f} s)")
    return out


def time_to_alpha(c, repeats: int) -> dict:
    """One trajectory ensemble, a freshly initialised model of the trained shapes (the
    arithmetic does not depend on the weights' values)."""
    k = int(c.k_total)
    mp = data.make_mechanisms(int(c.data_seed), int(c.d), k)
    pure = data.sample_pure(np.random.default_rng(0), mp, 1000)
    active = (0, 2, 4)
    alpha = data.trajectory("complex", int(c.T), len(active))
    x, _ = data.sample_trajectory(np.random.default_rng(1), mp, alpha, active,
                                  batch=int(c.ensemble))
    net = model.TraceVAE(k, c.d, c.lags, c.hidden, c.expert_hidden, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(net, nnx.Param)
    encode = jax.jit(lambda p, v: model.encode_mean(graphdef, p, v))
    z_pure = np.asarray(encode(params, jnp.asarray(pure.x, jnp.float32)), np.float64)
    basis = infer.centroid_basis(z_pure[:, -1], pure.c, active)
    xj = jnp.asarray(x, jnp.float32)

    def trace_alpha():
        z = np.asarray(encode(params, xj), np.float64)
        return infer.smooth(infer.solve_alpha(z[:, :, -1].mean(1), basis, c.projection),
                            c.window)

    def hard_alpha():
        z = np.asarray(encode(params, xj))
        pooled, _ = baselines.pooled_loglik(graphdef, params, z, active)
        return baselines.hard_switch(pooled, c.p_stay)

    out = {}
    for name, fn in (("trace", trace_alpha), ("hard_switch", hard_alpha)):
        fn()  # compile
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = {"ms": 1e3 * float(np.median(times))}
        print(f"alpha_hat for one {c.T} x {c.ensemble} ensemble, {name:>11}: "
              f"{out[name]['ms']:.1f} ms")
    return out


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    c = configs.get_config("default")
    r = int(REPEATS.value)
    out = {"device": str(jax.devices()[0]), "platform": platform.platform(),
           "cpu_count": os.cpu_count(), "repeats": r}
    a = train_steps(c, int(c.k_total), int(c.batch), r,
                    {"jvp": {}, "jacfwd": {"jacobian": "jacfwd"}})
    out["a_logdet"] = {**a, "speedup": a["jacfwd"]["step_ms"] / a["jvp"]["step_ms"],
                       "target": 3.0}
    out["b_routing"] = {}
    for k, batch in ((5, int(c.batch)), (10, int(c.abl_batch))):
        b = train_steps(c, k, batch, r, {"routed": {}, "masked": {"routing": "masked"}})
        out["b_routing"][f"K{k}"] = {**b, "speedup": b["masked"]["step_ms"] /
                                     b["routed"]["step_ms"]}
    out["b_routing"]["target_K5"] = 2.0
    out["c_time_to_alpha"] = time_to_alpha(c, r)
    out["c_time_to_alpha"]["ratio_hard_over_trace"] = (
        out["c_time_to_alpha"]["hard_switch"]["ms"] / out["c_time_to_alpha"]["trace"]["ms"])
    rows = [["(a) jvp vs jacfwd log-det, K=5", f"{out['a_logdet']['speedup']:.2f}x", ">= 3x"],
            ["(b) routed vs masked, K=5", f"{out['b_routing']['K5']['speedup']:.2f}x", ">= 2x"],
            ["(b) routed vs masked, K=10", f"{out['b_routing']['K10']['speedup']:.2f}x", "-"],
            ["(c) hard_switch / TRACE time to alpha",
             f"{out['c_time_to_alpha']['ratio_hard_over_trace']:.2f}x", "-"]]
    print(results.format_table(rows, ["measurement", "ratio", "target"]))
    path = OUT.value or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                     "trace.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(out), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
