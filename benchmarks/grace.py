r"""GRACE benchmark: memory of the packed INT4 student and the CPU cost of dequantising.

    python benchmarks/grace.py            # 5 repeats
    python benchmarks/grace.py --quick    # 2 repeats

On the default student architecture (d 64, 3 layers, SwiGLU 192, G 64) with MSE-initialised
INT4 scales, in one process, side by side:

* memory: real ``.nbytes`` of the LLM linears in fp32, bf16 and packed INT4 (uint8 codes, two
  per byte, + f16 scales); the whole student (vision tower, projector, embeddings, norms,
  lm_head in fp32). Targets (spec §Benchmark): fp32 / packed >= 7.0, bf16 / packed >= 3.5.
* latency (jitted, compile excluded, median of round-robin repeats): ``int4_dense``
  (dequantise + dot) against an fp32 dense on a [64, 192] layer, and the full student forward
  with packed weights against the fp32 forward. Reported; target <= 2x slower. XLA on CPU has
  no INT4 GEMM, so no speed-up is claimed.

Writes ``benchmarks/results/grace.json`` (``grace_quick.json`` with ``--quick``).
"""

import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

from icml26_jax.core import results
from icml26_jax.grace import configs, data, export, int4, lsq, train

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

QUICK = flags.DEFINE_bool("quick", False, "2 repeats.")
REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls per case (median reported).")


def _time(progs: dict, repeats: int) -> dict:
    for f, a in progs.values():
        jax.block_until_ready(f(*a))  # compile
    times = {k: [] for k in progs}
    for _ in range(repeats):
        for k, (f, a) in progs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(*a))
            times[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def main(argv):
    del argv
    repeats = 2 if QUICK.value else REPEATS.value
    c = configs.get_config("default")
    train.normalise_config(c)
    fp = train.build(c, "student", seed=0)
    sg, sfz, s_tr = train.split_trainable(fp)
    qg, qfz, q_tr = train.split_trainable(
        train.quantised_from(c, nnx.state(fp, nnx.Param), seed=0))
    packed = export.pack_state(q_tr, int(c.group))
    n_lin = sum(p.in_features * p.out_features for p in packed.values())
    packed_b = int4.packed_nbytes(packed)
    n_all = sum(int(np.size(x)) for x in jax.tree.leaves((sfz, s_tr)))
    mem = {"linears_fp32": 4 * n_lin, "linears_bf16": 2 * n_lin, "linears_packed": packed_b,
           "fp32_over_packed": 4 * n_lin / packed_b, "bf16_over_packed": 2 * n_lin / packed_b,
           "whole_fp32": 4 * n_all, "whole_packed": 4 * (n_all - n_lin) + packed_b}
    mem["whole_reduction_pct"] = 100 * (1 - mem["whole_packed"] / mem["whole_fp32"])

    # One [64 -> 192] layer, a batch of 64 x 27 tokens.
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((64, 192)).astype(np.float32) * 0.1)
    ls = lsq.mse_init_log_scale(w, 4, 64)
    p = int4.pack_int4(np.asarray(w), np.asarray(ls), 64)
    x = jnp.asarray(rng.standard_normal((64 * data.SEQ_LEN, 64)).astype(np.float32))
    layer = _time({"fp32_dense": (jax.jit(lambda x, w: x @ w), (x, w)),
                   "int4_dense": (jax.jit(int4.int4_dense), (x, p))}, repeats * 20)
    splits = data.load_digit_splits(0)
    d = data.make_vqa(splits, "test", 256, np.random.default_rng(0))
    fp_tr = export.fp_from_quantised(s_tr, q_tr)
    fwd = _time({
        "fp32_forward": (jax.jit(lambda tr, im, tok: train.merge(sg, sfz, tr)(im, tok).logits),
                         (s_tr, d.images, d.tokens)),
        "packed_forward": (jax.jit(lambda tr, pk, im, tok: export.packed_forward(
            sg, sfz, tr, pk, im, tok)), (fp_tr, packed, d.images, d.tokens))}, repeats * 4)
    res = {"memory": mem, "layer_s": layer, "forward_s": fwd,
           "layer_int4_over_fp32": layer["int4_dense"] / layer["fp32_dense"],
           "forward_packed_over_fp32": fwd["packed_forward"] / fwd["fp32_forward"]}
    res["targets"] = {"fp32_over_packed>=7": mem["fp32_over_packed"] >= 7.0,
                      "bf16_over_packed>=3.5": mem["bf16_over_packed"] >= 3.5,
                      "layer_slowdown<=2": res["layer_int4_over_fp32"] <= 2.0,
                      "forward_slowdown<=2": res["forward_packed_over_fp32"] <= 2.0}
    print(results.format_table(
        [["LLM linears", mem["linears_fp32"], mem["linears_bf16"], mem["linears_packed"]],
         ["whole student", mem["whole_fp32"], "", mem["whole_packed"]]],
        ["bytes", "fp32", "bf16", "packed INT4"], title="Memory (real .nbytes)"))
    print(f"fp32/packed {mem['fp32_over_packed']:.2f}, bf16/packed "
          f"{mem['bf16_over_packed']:.2f}, whole student -{mem['whole_reduction_pct']:.1f} %")
    print(f"[64,192] layer: int4_dense / fp32 {res['layer_int4_over_fp32']:.2f}; "
          f"student forward (256 questions): packed / fp32 "
          f"{res['forward_packed_over_fp32']:.2f}")
    print(json.dumps(res["targets"]))
    res["machine"] = {"platform": platform.platform(), "jax": jax.__version__,
                      "devices": str(jax.devices()[0]), "cpus": os.cpu_count()}
    path = os.path.join(REPO_ROOT, "benchmarks", "results",
                        "grace_quick.json" if QUICK.value else "grace.json")
    with open(path, "w") as f:
        json.dump(results.to_jsonable(res), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
