r"""LAD benchmark: inference cost of the debiasing against vanilla and permutation averaging,
and the host's share of a training run.

    python benchmarks/lad.py              # 1000 episodes, N in {4, 8}, 5 repeats; data time
    python benchmarks/lad.py --quick      # 200 episodes, N = 4, 2 repeats; data time
    python benchmarks/lad.py --only=data  # only the data time (merged into the results file)

The experiment's model (6 layers, d 64), jitted, timed after warm-up, median of round-robin
repeats, per 1000 instances: ``vanilla`` (the forward whose attention rows are unused, so
XLA drops their readout), ``lad`` (the same single pass with the attention readout, the
posterior and the debiased scores) and ``perm_average`` (N cyclic passes). Targets (spec
§Benchmark): LAD / vanilla <= 1.3 (paper: 1.18); perm_average / LAD >= 0.8 N. Memory: the
attention kept per instance ([L, H, T] rows) against a naive full map ([L, H, T, T]).

Data time (issue 43): the host builds every training chunk's episodes before the chunk's
jitted scan runs. At the default config, side by side: one chunk's construction
(``train.train_batches``, 100 steps x 64 episodes) against the chunk's training program on
the same batches already on the device; target data / train <= 0.1.

Writes ``benchmarks/results/lad.json`` (``lad_quick.json`` with ``--quick``).
"""

import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from icml26_jax.core import results, timing
from icml26_jax.lad import agd, configs, data, train
from icml26_jax.lad import model as model_lib

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

QUICK = flags.DEFINE_bool("quick", False, "200 episodes, N = 4, 2 repeats.")
REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls per case (median reported).")
ONLY = flags.DEFINE_enum("only", None, ["inference", "data"], "Run one part and merge it "
                         "into the existing results file (default: both parts).")


def case(n_cand: int, episodes: int, repeats: int) -> dict:
    c = configs.get_config("default")
    g, p = train.build(c)
    pool = data.load_pool(0)
    ep = data.make_episodes(pool, "test", n_cand, episodes, "random",
                            np.full(n_cand, 1.0 / n_cand), np.random.default_rng(0))
    b = data.tokenize(ep)
    cyc = data.tokenize(data.cyclic_variants(ep))
    layers = train.candidate_layers(c)
    ids = jnp.asarray(data.index_token_ids(n_cand))
    sp, ly = jnp.asarray(b.spans), jnp.asarray(layers)
    B = jnp.zeros((n_cand, n_cand))
    prior = jnp.full((len(layers), n_cand), 0.1)
    args = lambda x: [jnp.asarray(v) for v in (x.tokens, x.patches, x.is_patch, x.last_idx)]  # noqa: E731

    @jax.jit
    def vanilla(p, *a):
        logits, _ = model_lib.logits_and_attention(g, p, data.Batch(*a, None))
        return jnp.argmax(agd.candidate_logprobs(logits, ids), -1)

    @jax.jit
    def lad(p, *a):
        logits, attn = model_lib.logits_and_attention(g, p, data.Batch(*a, None))
        lp = agd.candidate_logprobs(logits, ids)
        return jnp.argmax(agd.lad_scores(lp, agd.layer_scores(attn, sp, ly), B, prior), -1)

    @jax.jit
    def perm(p, *a):
        logits, _ = model_lib.logits_and_attention(g, p, data.Batch(*a, None))
        lp = agd.candidate_logprobs(logits, ids).reshape(-1, n_cand, n_cand)
        cand = (jnp.arange(n_cand)[None, :] + jnp.arange(n_cand)[:, None]) % n_cand
        out = jnp.zeros((lp.shape[0], n_cand)).at[:, cand].add(lp)
        return jnp.argmax(out, -1)

    progs = {"vanilla": (vanilla, args(b)), "lad": (lad, args(b)), "perm_average": (perm, args(cyc))}
    times = {k: [] for k in progs}
    for f, a in progs.values():
        jax.block_until_ready(f(p, *a))  # compile
    for _ in range(repeats):
        for k, (f, a) in progs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(p, *a))
            times[k].append(time.perf_counter() - t0)
    per_1k = {k: float(np.median(v)) * 1000 / episodes for k, v in times.items()}
    T, L, H = data.T_MAX, int(c.num_layers), int(c.num_heads)
    return {"s_per_1k": per_1k, "lad_over_vanilla": per_1k["lad"] / per_1k["vanilla"],
            "perm_over_lad": per_1k["perm_average"] / per_1k["lad"],
            "attn_bytes_rows": 4 * L * H * T, "attn_bytes_full": 4 * L * H * T * T,
            "memory_ratio_full_over_rows": float(T)}


def data_time(repeats: int) -> dict:
    """One default training chunk: host construction of its batches vs its training program
    on the same batches, preloaded on the device (medians of ``repeats`` calls, warm)."""
    c = configs.get_config("default")
    train.normalise_config(c)
    pool = data.load_pool(int(c.pool_seed))
    t0 = time.perf_counter()
    tables = data.split_tables(pool, "train")  # once per run, before the first chunk
    tables_s = time.perf_counter() - t0
    n = int(c.chunk)
    data_s = timing.median_seconds(lambda: train.train_batches(c, pool, 0, n, tables),
                                   repeats=repeats)
    graphdef, params = train.build(c)
    tx = train.make_tx(c)
    state = (params, tx.init(params))
    program = train.train_program(graphdef, tx)
    batches = jax.device_put(train.train_batches(c, pool, 0, n, tables))
    # The program donates the state: every call gets a fresh device copy (~0.2 M parameters
    # and two Adam moments, microseconds against a chunk).
    run = lambda *b: program(*jax.tree.map(jnp.copy, state), *b)  # noqa: E731
    train_s = timing.median_seconds(run, *batches, repeats=repeats)
    return {"steps": n, "batch": int(c.batch), "repeats": repeats, "tables_s": tables_s,
            "data_s_per_chunk": data_s, "train_s_per_chunk": train_s,
            "data_ms_per_step": 1e3 * data_s / n, "train_ms_per_step": 1e3 * train_s / n,
            "data_over_train": data_s / train_s}


def inference(quick: bool, repeats: int) -> dict:
    ns = (4,) if quick else (4, 8)
    episodes = 200 if quick else 1000
    res = {"config": {"episodes": episodes, "repeats": repeats}, "cases": {}}
    rows = []
    for n in ns:
        r = case(n, episodes, repeats)
        res["cases"][f"N{n}"] = r
        rows.append([n, r["s_per_1k"]["vanilla"], r["s_per_1k"]["lad"],
                     r["s_per_1k"]["perm_average"], r["lad_over_vanilla"], r["perm_over_lad"]])
    print(results.format_table(rows, ["N", "vanilla s/1k", "LAD s/1k", "perm s/1k",
                                      "LAD/vanilla", "perm/LAD"], floatfmt=".3f",
                               title="Inference per 1000 instances (compile excluded)"))
    res["targets"] = {
        f"N{n}": {"lad_over_vanilla<=1.3": r["lad_over_vanilla"] <= 1.3,
                  "perm_over_lad>=0.8N": r["perm_over_lad"] >= 0.8 * n}
        for n, r in ((int(k[1:]), v) for k, v in res["cases"].items())}
    r4 = res["cases"]["N4"]
    print(f"attention kept per instance: {r4['attn_bytes_rows']} B rows vs "
          f"{r4['attn_bytes_full']} B full maps ({r4['memory_ratio_full_over_rows']:.0f}x)")
    return res


def main(argv):
    del argv
    quick = QUICK.value
    repeats = 2 if quick else REPEATS.value
    path = os.path.join(REPO_ROOT, "benchmarks", "results",
                        "lad_quick.json" if quick else "lad.json")
    machine = {"platform": platform.platform(), "jax": jax.__version__,
               "devices": str(jax.devices()[0]), "cpus": os.cpu_count()}
    res = {}
    if ONLY.value and os.path.exists(path):  # one part: keep the other part's numbers
        with open(path) as f:
            res = json.load(f)
    if ONLY.value in (None, "inference"):
        targets = {k: v for k, v in res.get("targets", {}).items() if k == "data_time"}
        res.update(inference(quick, repeats), machine=machine)
        res["targets"].update(targets)
    if ONLY.value in (None, "data"):
        d = res["data_time"] = dict(data_time(repeats), machine=machine)
        res.setdefault("targets", {})["data_time"] = {
            "data_over_train<=0.1": d["data_over_train"] <= 0.1}
        print(results.format_table(
            [[d["steps"], d["data_s_per_chunk"], d["train_s_per_chunk"], d["data_over_train"]]],
            ["steps", "data s/chunk", "train s/chunk", "data/train"], floatfmt=".3f",
            title="Default training chunk: host data vs training (data preloaded)"))
    print(json.dumps(res["targets"]))
    with open(path, "w") as f:
        json.dump(results.to_jsonable(res), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
