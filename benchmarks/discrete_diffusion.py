r"""Discrete-diffusion benchmark: training FLOP/s per size and sampling throughput.

    python benchmarks/discrete_diffusion.py           # sizes XS..XL, samplers at size M
    python benchmarks/discrete_diffusion.py --quick   # sizes XS, S; T in {4, 64}; 3 repeats

(1) Training FLOP/s per size: one jitted train step (batch 32 x 64, AdamW, the MDLM loss),
3 F_fwd B / median step time, F_fwd from XLA on the unrolled forward; this is what set the
default budget (spec §Experiment). (2) Sampling at batch 64, size M, in one process: AR with
a KV cache (64 calls) and MDLM, Duo, Eso-LM (KV cache) at T in {4, 8, 16, 64}; median over
round-robin repeats, compile excluded (every (family, T) program is compiled once before
timing; a compile counter checks that the timed calls compile nothing). Targets (spec
§Benchmark): per-step cost Duo / MDLM in [0.9, 1.1]; Eso-LM <= 0.6 x MDLM time at T = 64.
The diffusion / AR throughput ratio is reported, not asserted. Writes
``benchmarks/results/discrete_diffusion.json`` (``_quick.json`` with ``--quick``).
"""

import json
import os
import platform
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from icml26_jax.core import results  # noqa: E402
from icml26_jax.core.testing import CompileCounter  # noqa: E402
from icml26_jax.discrete_diffusion import configs, data, flops, losses, train  # noqa: E402
from icml26_jax.discrete_diffusion import model as model_lib  # noqa: E402

QUICK = flags.DEFINE_bool("quick", False, "sizes XS, S; T in {4, 64}; 3 repeats (< 2 min).")
REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per case (median reported).")
SAMPLE_SIZE = flags.DEFINE_string("sample_size", "M", "Model size of the sampling benchmark.")


def train_flops_per_s(sizes, repeats: int) -> dict:
    """Median train-step time and FLOP/s per size (single replica, MDLM loss)."""
    c = configs.get_config("default")
    lang = data.make_language()
    x = jnp.asarray(data.train_batch(lang, 0, 0, int(c.batch)))
    out, live = {}, {}
    for s in sizes:
        gu, pu = model_lib.init(s, "mdlm", 64, 0, unroll=True)
        f = flops.forward_flops(gu, pu, 2, 64, model_lib.model_config(s, "mdlm", 64,
                                                                      unroll=True))
        g, p = model_lib.init(s, "mdlm", 64, 0)
        tx = train.make_tx(train.hyper(c, 1000))

        def step(p, o, key, g=g, tx=tx):
            loss, gr = jax.value_and_grad(lambda q: losses.loss_fn(
                "mdlm", q, g, {"tokens": x}, key, train=True, K=64))(p)
            u, o = tx.update(gr, o, p)
            return jax.tree.map(jnp.add, p, u), o

        step = jax.jit(step)
        o = tx.init(p)
        p, o = jax.block_until_ready(step(p, o, jax.random.key(0)))  # compile
        live[s] = [step, p, o, []]
        out[s] = {"f_fwd": f, "N": model_lib.non_embedding_params(s)}
    for i in range(repeats):
        for s, v in live.items():
            t0 = time.perf_counter()
            v[1], v[2] = jax.block_until_ready(v[0](v[1], v[2], jax.random.key(i + 1)))
            v[3].append(time.perf_counter() - t0)
    for s, v in live.items():
        t = float(np.median(v[3]))
        out[s].update(step_s=t, flops_per_s=3 * out[s]["f_fwd"] * int(c.batch) / t,
                      steps_at_6e11=flops.steps_for_budget(6e11, out[s]["f_fwd"], 32))
        out[s]["run_s_at_6e11"] = out[s]["steps_at_6e11"] * t
    return out


def sampling(size: str, Ts, repeats: int, batch: int = 64, length: int = 64) -> dict:
    """Median seconds per sampler call per (family, T), compile excluded."""
    progs = {}
    for fam in ("ar", "mdlm", "duo", "esolm"):
        g, p = model_lib.init(size, fam, 64, 0)
        for T in ((length,) if fam == "ar" else Ts):
            fn = jax.jit(lambda p, k, g=g, fam=fam, T=T: train.SAMPLERS[fam](
                g, p, k, batch, length, T))
            jax.block_until_ready(fn(p, jax.random.key(0)))  # compile
            progs[(fam, T)] = (fn, p, [])
    with CompileCounter() as cc:
        for i in range(repeats):
            for (fam, T), (fn, p, ts) in progs.items():
                t0 = time.perf_counter()
                jax.block_until_ready(fn(p, jax.random.key(i + 1)))
                ts.append(time.perf_counter() - t0)
    out = {}
    for (fam, T), (_, _, ts) in progs.items():
        t = float(np.median(ts))
        n = train.nfe(fam, T, length)
        out[f"{fam}/T{T}"] = {"family": fam, "T": T, "nfe": n, "time_s": t,
                              "per_call_s": t / n, "tokens_per_s": batch * length / t}
    out["compiles_while_timing"] = cc.count
    return out


def main(argv):
    del argv
    quick = QUICK.value
    repeats = 3 if quick else REPEATS.value
    sizes = ("XS", "S") if quick else tuple(model_lib.SIZES)
    Ts = (4, 64) if quick else (4, 8, 16, 64)
    res = {"config": {"repeats": repeats, "sizes": sizes, "T": Ts, "batch_train": 32,
                      "batch_sample": 64, "sample_size": SAMPLE_SIZE.value}}
    tr = train_flops_per_s(sizes, repeats)
    res["train"] = tr
    print(results.format_table(
        [[s, v["N"], v["f_fwd"], 1e3 * v["step_s"], v["flops_per_s"] / 1e9, v["steps_at_6e11"],
          v["run_s_at_6e11"]] for s, v in tr.items()],
        ["size", "N", "F_fwd/seq", "ms/step", "GFLOP/s", "steps @6e11", "s @6e11"],
        title="Training (one replica, batch 32 x 64)", floatfmt=".3g"), flush=True)
    sm = sampling(SAMPLE_SIZE.value, Ts, repeats)
    res["sampling"] = sm
    print(results.format_table(
        [[v["family"], v["T"], v["nfe"], 1e3 * v["time_s"], 1e3 * v["per_call_s"],
          v["tokens_per_s"]] for k, v in sm.items() if isinstance(v, dict)],
        ["family", "T", "NFE", "ms", "ms/call", "tokens/s"],
        title=f"Sampling (size {SAMPLE_SIZE.value}, batch 64 x 64, compile excluded; "
              f"{sm['compiles_while_timing']} compiles while timing)", floatfmt=".4g"))
    ratios = {T: sm[f"duo/T{T}"]["per_call_s"] / sm[f"mdlm/T{T}"]["per_call_s"] for T in Ts}
    eso = sm["esolm/T64"]["time_s"] / sm["mdlm/T64"]["time_s"]
    res["ratios"] = {"duo_over_mdlm_per_step": ratios, "esolm_over_mdlm_T64": eso,
                     "diffusion_T4_over_ar_tokens_per_s": {
                         f: sm[f"{f}/T4"]["tokens_per_s"] / sm["ar/T64"]["tokens_per_s"]
                         for f in ("mdlm", "duo", "esolm")}}
    res["targets"] = {
        "duo_mdlm_per_step_in_0.9_1.1": {
            "measured": ratios, "target": "[0.9, 1.1] at every T",
            "holds": all(0.9 <= r <= 1.1 for r in ratios.values())},
        "esolm_kv_over_mdlm_T64": {"measured": eso, "target": "<= 0.6", "holds": eso <= 0.6},
        "one_compile_per_T": {"measured": sm["compiles_while_timing"], "target": "0 while timing",
                              "holds": sm["compiles_while_timing"] == 0}}
    for k, v in res["targets"].items():
        print(f"{k}: {v['measured']} (target {v['target']}): {'holds' if v['holds'] else 'FAILS'}")
    res["machine"] = {"platform": platform.platform(), "jax": jax.__version__,
                      "devices": str(jax.devices()[0]), "cpus": os.cpu_count()}
    path = os.path.join(REPO_ROOT, "benchmarks", "results",
                        "discrete_diffusion_quick.json" if quick else "discrete_diffusion.json")
    with open(path, "w") as f:
        json.dump(results.to_jsonable(res), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
