r"""FPDA benchmark: inference throughput with the policy, prompt overhead in training, and
F1 per unit of refinement compute (the paper's benchmark).

    python benchmarks/fpda.py --workdir=runs/fpda      # the networks of a finished default run

In one process, on the trained networks and the test_id split of ``--workdir`` (a finished
``experiments/fpda.py`` run; its checkpoints are restored, nothing is retrained):

1. inference images/s of FPDA (encode once, policy state and greedy actions, then one decode
   per bucket of images that chose the same r, with only r refinement steps compiled, so a
   smaller r really saves compute), ``all_routes`` (r = 2) and a fixed r = 3. Targets: FPDA
   >= 0.9 x all_routes; the policy's share (state pass + policy MLP) <= 10 %.
2. one supervised training step of the supernet against ``no_prompt`` (the prompt overhead).
3. F1 per unit of refinement compute: FPDA against fixed r in {0, 1, 2, 3} on the all-groups
   route (test_id F1, mean r, measured decode ms per image).

Writes ``benchmarks/results/fpda.json``.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

import json
import os
import platform
import time

import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags
from flax import nnx

from icml26_jax.core import results, timing
from icml26_jax.fpda import baselines, dapo, metrics, prompts, train
from icml26_jax.fpda import model as model_lib

WORKDIR = flags.DEFINE_string("workdir", "runs/fpda", "A finished experiments/fpda.py run.")
REPEATS = flags.DEFINE_integer("repeats", 5, "Timed passes over the split (median).")
BUCKET = flags.DEFINE_integer("bucket", 50, "Images per compiled decode call (buckets are "
                              "padded to a multiple of it).")
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/fpda.json).")


def _restore(workdir: str):
    saved = results.load_results(workdir)
    c = ml_collections.ConfigDict(saved["config"])
    c.methods = tuple(c.methods)
    c.seeds = tuple(c.seeds)
    splits = train.load_data(c, workdir)  # from the run's cache
    nets = {}
    for name in ("supernet", "no_prompt"):
        g, p, rest, _ = train.train_net(c, name, splits["train"], workdir)  # restored
        nets[name] = train.Detector(c, name, g, p, rest)
    pgraph, pparams, stats, _ = train.train_dapo(c, nets["supernet"], splits["train"], workdir)
    return c, splits, nets, (pgraph, pparams, stats)


def main(argv):
    del argv
    t_start = time.time()
    c, splits, nets, (pgraph, pparams, (mu, sd)) = _restore(WORKDIR.value)
    det = nets["supernet"]
    split = splits["test_id"]
    n, bucket, R = len(split), BUCKET.value, int(c.max_refine)
    x_all = jnp.asarray(split.images)

    @jax.jit
    def encode_and_act(params, pp, x):
        m = nnx.merge(det.graphdef, params, det.rest)
        enc = m.encode(x)
        s = (train.policy_state_raw(m, enc) - mu) / sd
        route, r = dapo.greedy(nnx.merge(pgraph, pp), s)
        return enc, route, r

    @jax.jit
    def encode_only(params, x):
        return nnx.merge(det.graphdef, params, det.rest).encode(x)

    def decode_fn(steps):
        @jax.jit
        def dec(params, enc, route_idx, r):
            m = nnx.merge(det.graphdef, params, det.rest)
            out = m.decode(enc, jnp.asarray(prompts.ROUTES)[route_idx], r, num_steps=steps)
            return jnp.take_along_axis(out.mask_logits, r[:, None, None, None], 1)[:, 0]
        return dec

    decoders = {k: decode_fn(k) for k in range(R + 1)}
    chunks = [np.arange(s, min(s + bucket, n)) for s in range(0, n, bucket)]

    def pad(idx):
        return np.resize(idx, bucket) if len(idx) < bucket else idx

    def fpda_pass(out=None):
        """Encode + policy per chunk, then decode grouped by chosen r (padded buckets)."""
        encs, routes, rs = [], [], []
        for idx in chunks:
            enc, route, r = encode_and_act(det.params, pparams, x_all[pad(idx)])
            encs.append(enc.take(np.arange(len(idx))))
            routes.append(route[:len(idx)])
            rs.append(r[:len(idx)])
        enc = model_lib.Enc.concat(encs)
        route, r = np.asarray(jnp.concatenate(routes)), np.asarray(jnp.concatenate(rs))
        masks = np.zeros((n,) + split.masks.shape[1:], np.float32)
        for k in range(R + 1):
            sel = np.flatnonzero(r == k)
            for s0 in range(0, len(sel), bucket):
                idx = sel[s0:s0 + bucket]
                p = pad(idx)
                sub = enc.take(p)
                res = decoders[k](det.params, sub, jnp.asarray(route[p]), jnp.asarray(r[p]))
                if out is not None:
                    masks[idx] = np.asarray(res)[:len(idx)]
                else:
                    jax.block_until_ready(res)
        return masks, r

    def fixed_pass(route_idx: int, r_fixed: int, out=False):
        masks = np.zeros((n,) + split.masks.shape[1:], np.float32)
        for idx in chunks:
            p = pad(idx)
            enc = encode_only(det.params, x_all[p])
            res = decoders[r_fixed](det.params, enc, jnp.full((bucket,), route_idx),
                                    jnp.full((bucket,), r_fixed))
            if out:
                masks[idx] = np.asarray(res)[:len(idx)]
            else:
                jax.block_until_ready(res)
        return masks

    def policy_only():
        for idx in chunks:
            jax.block_until_ready(encode_and_act(det.params, pparams, x_all[pad(idx)])[1])

    def encode_pass():
        for idx in chunks:
            jax.block_until_ready(encode_only(det.params, x_all[pad(idx)]))

    reps = REPEATS.value
    t_fpda = timing.median_seconds(fpda_pass, repeats=reps)
    t_all = timing.median_seconds(fixed_pass, prompts.ALL_ROUTE, baselines.BASELINE_R,
                                  repeats=reps)
    t_r3 = timing.median_seconds(fixed_pass, prompts.ALL_ROUTE, R, repeats=reps)
    t_state = timing.median_seconds(policy_only, repeats=reps)
    t_enc = timing.median_seconds(encode_pass, repeats=reps)
    policy_share = max(t_state - t_enc, 0.0) / t_fpda
    thr = {"fpda": n / t_fpda, "all_routes_r2": n / t_all, f"fixed_r{R}": n / t_r3}
    ratio = thr["fpda"] / thr["all_routes_r2"]

    # 2. training step: supernet vs no_prompt
    step_ms = {}
    for name in ("supernet", "no_prompt"):
        d = nets[name]
        tx = train.sup_optimizer(c)
        step = train.make_sup_step(d.graphdef, d.rest, tx, c, supernet=(name == "supernet"))
        tr = splits["train"]
        arrays = tuple(jnp.asarray(a) for a in (tr.images, tr.masks, tr.labels, tr.text_ids,
                                                tr.text_ok))
        one = jax.jit(lambda carry, i: step(carry, i, arrays, jax.random.key(0)))
        carry = (d.params, tx.init(d.params))
        step_ms[name] = 1e3 * timing.median_seconds(
            lambda: one(carry, jnp.int32(0))[1]["loss"], repeats=reps * 2)

    # 3. F1 per unit of refinement compute
    masks_fpda, r_fpda = fpda_pass(out=True)
    rows = [{"arm": "fpda", "mean_r": float(r_fpda.mean()),
             "pixel_f1": metrics.pixel_f1(1 / (1 + np.exp(-masks_fpda)), split.masks,
                                          split.labels),
             "ms_per_image": 1e3 * t_fpda / n}]
    for k in range(R + 1):
        mk = fixed_pass(prompts.ALL_ROUTE, k, out=True)
        rows.append({"arm": f"fixed r={k}", "mean_r": float(k),
                     "pixel_f1": metrics.pixel_f1(1 / (1 + np.exp(-mk)), split.masks,
                                                  split.labels),
                     "ms_per_image": 1e3 * timing.median_seconds(
                         fixed_pass, prompts.ALL_ROUTE, k, repeats=reps) / n})
    for row in rows:
        row["f1_per_ms"] = row["pixel_f1"] / row["ms_per_image"]

    print(results.format_table(
        [[k, f"{v:.0f}"] for k, v in thr.items()], ["arm", "images / s"],
        title=f"inference on test_id ({n} images, CPU, {jax.device_count()} devices)"))
    print(f"FPDA / all_routes throughput {ratio:.2f} (target >= 0.9: "
          f"{'holds' if ratio >= 0.9 else 'fails'}); policy share {policy_share:.1%} "
          f"(target <= 10 %: {'holds' if policy_share <= 0.10 else 'fails'}); "
          f"r histogram {np.bincount(r_fpda, minlength=R + 1).tolist()}")
    print(f"training step: supernet {step_ms['supernet']:.1f} ms, no_prompt "
          f"{step_ms['no_prompt']:.1f} ms (prompt overhead "
          f"{step_ms['supernet'] / step_ms['no_prompt']:.2f}x)")
    print(results.format_table(
        [[r["arm"], f"{r['mean_r']:.2f}", f"{r['pixel_f1']:.3f}", f"{r['ms_per_image']:.2f}",
          f"{r['f1_per_ms']:.3f}"] for r in rows],
        ["arm", "mean r", "F1 test_id", "ms / image", "F1 per ms"],
        title="F1 per unit of refinement compute (all-groups route for the fixed arms)"))
    out = {"throughput_images_per_s": thr, "fpda_over_all_routes": ratio,
           "policy_share": policy_share, "train_step_ms": step_ms, "f1_per_compute": rows,
           "targets": {"fpda_ge_0.9x_all_routes": ratio >= 0.9,
                       "policy_share_le_10pct": policy_share <= 0.10},
           "workdir": WORKDIR.value, "bucket": bucket, "jax": jax.__version__,
           "devices": jax.device_count(), "cpu_count": os.cpu_count(),
           "platform": platform.platform(), "runtime_s": time.time() - t_start}
    path = OUT.value or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                     "fpda.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(out), f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    app.run(main)
