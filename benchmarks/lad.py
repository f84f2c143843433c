r"""LAD benchmark: inference cost of the debiasing against vanilla and permutation averaging.

    python benchmarks/lad.py           # 1000 episodes, N in {4, 8}, 5 repeats
    python benchmarks/lad.py --quick   # 200 episodes, N = 4, 2 repeats

The experiment's model (6 layers, d 64), jitted, timed after warm-up, median of round-robin
repeats, per 1000 instances: ``vanilla`` (the forward whose attention rows are unused, so
XLA drops their readout), ``lad`` (the same single pass with the attention readout, the
posterior and the debiased scores) and ``perm_average`` (N cyclic passes). Targets (spec
§Benchmark): LAD / vanilla <= 1.3 (paper: 1.18); perm_average / LAD >= 0.8 N. Memory: the
attention kept per instance ([L, H, T] rows) against a naive full map ([L, H, T, T]).
Writes ``benchmarks/results/lad.json`` (``lad_quick.json`` with ``--quick``).
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
from icml26_jax.lad import agd, configs, data, train  # noqa: E402
from icml26_jax.lad import model as model_lib  # noqa: E402

QUICK = flags.DEFINE_bool("quick", False, "200 episodes, N = 4, 2 repeats.")
REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls per case (median reported).")


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


def main(argv):
    del argv
    quick = QUICK.value
    ns = (4,) if quick else (4, 8)
    episodes = 200 if quick else 1000
    repeats = 2 if quick else REPEATS.value
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
    print(json.dumps(res["targets"]))
    r4 = res["cases"]["N4"]
    print(f"attention kept per instance: {r4['attn_bytes_rows']} B rows vs "
          f"{r4['attn_bytes_full']} B full maps ({r4['memory_ratio_full_over_rows']:.0f}x)")
    res["machine"] = {"platform": platform.platform(), "jax": jax.__version__,
                      "devices": str(jax.devices()[0]), "cpus": os.cpu_count()}
    path = os.path.join(REPO_ROOT, "benchmarks", "results",
                        "lad_quick.json" if quick else "lad.json")
    with open(path, "w") as f:
        json.dump(results.to_jsonable(res), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
