r"""Discrete-diffusion benchmark: training FLOP/s per size, sampling throughput, and the cost
of the training data.

    python benchmarks/discrete_diffusion.py              # sizes XS..XL, samplers at size M, data
    python benchmarks/discrete_diffusion.py --quick      # sizes XS, S; T in {4, 64}; 3 repeats
    python benchmarks/discrete_diffusion.py --only=data  # only (3), merged into the results file

(1) Training FLOP/s per size: one jitted train step (batch 32 x 64, AdamW, the MDLM loss),
3 F_fwd B / median step time, F_fwd from XLA on the unrolled forward; this is what set the
default budget (spec §Experiment). (2) Sampling at batch 64, size M, in one process: AR with
a KV cache (64 calls) and MDLM, Duo, Eso-LM (KV cache) at T in {4, 8, 16, 64}; median over
round-robin repeats, compile excluded (every (family, T) program is compiled once before
timing; a compile counter checks that the timed calls compile nothing). Targets (spec
§Benchmark): per-step cost Duo / MDLM in [0.9, 1.1]; Eso-LM <= 0.6 x MDLM time at T = 64.
The diffusion / AR throughput ratio is reported, not asserted.

(3) Training data (issue 43), at the DEFAULT config, side by side in one process: one
training chunk (100 steps, batch 32 x 64) of a default group with its batches drawn inside
the chunk on the device (``train._train_chunk_hmm``, what ``train.run`` runs) against the
same program on the same batches preloaded on the device as arguments (``train._train_chunk``),
and the host time the NumPy sampler (``lm.hmm.sample``, the protocol before issue 43) took to
build that chunk's batches (one stream per seed of the group). Groups: the vmapped MDLM pair
(6 replicas, 3 seeds) and AR (1 replica) at the sizes of ``--data_sizes`` (default XS, the
cheapest step, where data is the largest share), sharded over 8 CPU devices as in a default
run (``--num_cpu_devices``). The data part is also timed alone: the device draw of the
chunk's batches (``data.chunk_batches``, every stream of the group), which the difference
generated - preloaded estimates too but, on a shared 2-core machine, within the noise of
two multi-second timings. Target: data time <= 10 % of training: the host's is 0 now, the
device draw / preloaded chunk <= 0.1. Also reported: the old host sampling time over the
preloaded training time (what the NumPy protocol added to every chunk).

Writes ``benchmarks/results/discrete_diffusion.json`` (``_quick.json`` with ``--quick``).
"""

import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import results, timing
from icml26_jax.core.testing import CompileCounter
from icml26_jax.discrete_diffusion import configs, data, flops, losses, train
from icml26_jax.discrete_diffusion import model as model_lib
from icml26_jax.lm import hmm as hmm_lib

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

QUICK = flags.DEFINE_bool("quick", False, "sizes XS, S; T in {4, 64}; 3 repeats (< 2 min).")
REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per case (median reported).")
SAMPLE_SIZE = flags.DEFINE_string("sample_size", "M", "Model size of the sampling benchmark.")
ONLY = flags.DEFINE_enum("only", None, ["data"], "Run only part (3) and merge it into the "
                         "existing results file (default: every part).")
DATA_SIZES = flags.DEFINE_list("data_sizes", ["XS"], "Sizes of the data benchmark (3).")
DATA_REPEATS = flags.DEFINE_integer("data_repeats", 7, "Timed chunks per case of (3).")
NUM_CPU_DEVICES = flags.DEFINE_integer(
    "num_cpu_devices", 8, "Simulated CPU devices (the experiment's default, so (3) shards a "
    "group's replicas as a default run does; (1) and (2) run on one device either way).")


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


def data_on_device(sizes, repeats: int) -> dict:
    """Part (3): one default training chunk with batches drawn inside it vs preloaded, and the
    NumPy host sampling of its batches; medians of ``repeats`` calls (compile excluded)."""
    c = configs.get_config("default")
    train.normalise_config(c)
    K, B, L, n = train.vocab_size(c), int(c.batch), int(c.length), int(c.chunk)
    lang = train.language(c)
    lang_dev = hmm_lib.device_hmm(lang)
    draw = jax.jit(data.chunk_batches, static_argnums=(3, 4, 5))
    f_fwd = {s: train._forward_flops(s, K, L) for s in sizes}
    cs = c.copy_and_resolve_references()
    cs.sizes = tuple(sizes)
    out = {}
    for g in train.groups(cs, f_fwd):
        if g.budget != cs.budgets[0] or g.family not in ("mdlm", "ar"):
            continue
        R = len(g.seeds)
        graphdef, ps = None, []
        for s in g.seeds:
            graphdef, p = model_lib.init(g.size, g.family, K, s)
            ps.append(p)
        static = (g.family, graphdef, train.hyper(c, g.steps))
        mesh = mesh_lib.runs_mesh(R)
        params = mesh_lib.shard_replicas(jax.tree.map(lambda *x: np.stack(x), *ps), mesh, R)
        opt = mesh_lib.map_runs(mesh, train._init_opt, static, params)
        seeds = np.asarray(g.seeds, np.int32)
        low_var = np.asarray(g.low_var, bool)
        start = np.zeros((R,), np.int32)  # the first chunk: steps 0..n-1
        lang_r = mesh_lib.shard_replicas(jax.tree.map(
            lambda a: np.broadcast_to(np.asarray(a), (R,) + a.shape), lang_dev), mesh, R)
        # The same batches, drawn once and placed on the devices as train_group places
        # arguments: the timed preloaded call does no host work and no transfer.
        tok = mesh_lib.shard_replicas(
            np.stack([np.asarray(draw(lang_dev, s, 0, n, B, L)) for s in g.seeds]), mesh, R)

        def generated():
            return mesh_lib.map_runs(mesh, train._train_chunk_hmm, static + (n, B, L), params,
                                     opt, seeds, low_var, start, lang_r)[2]

        def preloaded():
            return mesh_lib.map_runs(mesh, train._train_chunk, static, params, opt, seeds,
                                     low_var, start, tok)[2]

        streams = np.asarray(sorted(set(g.seeds)), np.int32)
        draw_all = jax.jit(jax.vmap(lambda s: data.chunk_batches(lang_dev, s, 0, n, B, L)))

        def drawn():  # the data part of generated() alone: every stream's chunk, on device
            return draw_all(streams)

        def host():  # the old advance(): one NumPy stream per distinct seed of the group
            return [np.stack([hmm_lib.sample(lang, B, L, seed=(int(s), i)) for i in range(n)])
                    for s in sorted(set(g.seeds))]

        # Compiles both programs; equal losses: the chunk trains on the batches it is given.
        same = np.array_equal(mesh_lib.to_host(generated(), R), mesh_lib.to_host(preloaded(), R))
        jax.block_until_ready(drawn())  # compile
        ts = {f: [] for f in (generated, preloaded, drawn, host)}
        for _ in range(repeats):  # round robin: every case sees the same machine load
            for f, t in ts.items():
                t.append(timing.median_seconds(f, repeats=1, warmup=0))
        gen_s, pre_s, draw_s, host_s = (float(np.median(t)) for t in ts.values())
        out[f"{g.size}/{g.family}"] = {
            "size": g.size, "group": g.family, "replicas": R, "streams": len(set(g.seeds)),
            "steps": n, "batch": B, "length": L, "repeats": repeats,
            "same_losses": bool(same),
            "generated_s_per_chunk": gen_s, "preloaded_s_per_chunk": pre_s,
            "device_draw_s_per_chunk": draw_s, "host_sampling_s_per_chunk": host_s,
            "generated_minus_preloaded_over_preloaded": (gen_s - pre_s) / pre_s,
            "device_data_over_train": draw_s / pre_s,
            "host_data_over_train": host_s / pre_s,
            "host_ms_per_batch": 1e3 * host_s / (n * len(set(g.seeds)))}
    return out


def print_data(d: dict) -> None:
    print(results.format_table(
        [[k, v["replicas"], v["streams"], v["generated_s_per_chunk"], v["preloaded_s_per_chunk"],
          v["device_draw_s_per_chunk"], v["host_sampling_s_per_chunk"],
          v["generated_minus_preloaded_over_preloaded"], v["device_data_over_train"],
          v["host_data_over_train"], v["same_losses"]] for k, v in d.items()],
        ["group", "R", "streams", "generated s", "preloaded s", "draw s", "host NumPy s",
         "(gen-pre)/pre", "draw/pre", "host/pre", "same losses"], floatfmt=".3f",
        title="Default training chunk (100 steps, 32 x 64): data drawn on the device vs "
              "preloaded, and the old host sampling"), flush=True)


def data_targets(d: dict) -> dict:
    worst = max(v["device_data_over_train"] for v in d.values())
    return {"measured": worst, "target": "device draw of a chunk's batches / the chunk's "
            "training on preloaded batches <= 0.1 for every group (host data time: 0)",
            "holds": bool(worst <= 0.1 and all(v["same_losses"] for v in d.values()))}


def main(argv):
    del argv
    jax.config.update("jax_num_cpu_devices", NUM_CPU_DEVICES.value)  # before any backend use
    quick = QUICK.value
    repeats = 3 if quick else REPEATS.value
    path = os.path.join(REPO_ROOT, "benchmarks", "results",
                        "discrete_diffusion_quick.json" if quick else "discrete_diffusion.json")
    machine = {"platform": platform.platform(), "jax": jax.__version__,
               "devices": str(jax.devices()[0]), "cpus": os.cpu_count()}
    if ONLY.value == "data":
        res = {}
        if os.path.exists(path):  # keep parts (1) and (2) as they were measured
            with open(path) as f:
                res = json.load(f)
        d = data_on_device(tuple(DATA_SIZES.value), DATA_REPEATS.value)
        res["data"] = dict(d, machine=machine)
        res.setdefault("targets", {})["data_on_device_le_0.1_of_training"] = data_targets(d)
        print_data(d)
        print(json.dumps(res["targets"]["data_on_device_le_0.1_of_training"]))
        with open(path, "w") as f:
            json.dump(results.to_jsonable(res), f, indent=1)
        print(f"wrote {path}")
        return
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
    d = data_on_device(tuple(DATA_SIZES.value), DATA_REPEATS.value)
    res["data"] = d
    res["targets"]["data_on_device_le_0.1_of_training"] = data_targets(d)
    print_data(d)
    for k, v in res["targets"].items():
        print(f"{k}: {v['measured']} (target {v['target']}): {'holds' if v['holds'] else 'FAILS'}")
    res["machine"] = machine
    with open(path, "w") as f:
        json.dump(results.to_jsonable(res), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
