r"""CoF-T2I benchmark: what a 3-frame trajectory costs against a single frame (the paper's
benchmark).

    python benchmarks/cof_t2i.py                      # default widths (d=64, depth 4)
    python benchmarks/cof_t2i.py --d_model=96 --repeats=10

In one process, with the default config's widths (weights do not change the cost, so freshly
initialised models are timed):

1. one training step (flow-matching loss, gradient, AdamW, EMA) of ``cof`` (3 frames) and
   ``single`` (1 frame): XLA's FLOPs (``cost_analysis`` of the compiled step) and median
   wall time. Expected ratio ~3, target <= 3.5.
2. sampling wall time per final image (30 Euler steps, batched CFG, AE decode of the last
   frame), ``cof`` / ``single``: target <= 3.5.
3. AE encoding of 3-frame clips: independent calls (one per frame) against one batched call
   over all frames (``vae.encode_frames``): reported.

Writes ``benchmarks/results/cof_t2i.json``.
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

from icml26_jax.cof_t2i import baselines, configs, train, vae
from icml26_jax.core import results, timing

D_MODEL = flags.DEFINE_integer("d_model", None, "DiT width (default: the default config's).")
REPEATS = flags.DEFINE_integer("repeats", 20, "Timed repetitions (median).")
SAMPLE_BATCH = flags.DEFINE_integer("sample_batch", 64, "Prompts per sampling call.")
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/cof_t2i.json).")


def main(argv):
    del argv
    t_start = time.time()
    c = configs.get_config("default")
    if D_MODEL.value:
        c.d_model = D_MODEL.value
    reps = REPEATS.value
    rng = np.random.default_rng(0)
    pool = train.make_pool(256, 0)
    latents = jnp.asarray(rng.normal(size=(256, 3, 8, 8, 8)), jnp.float32)
    text_ids = jnp.asarray(pool["text_ids"])
    ae = vae.FrameAE(int(c.ae_width), rngs=nnx.Rngs(0))

    step_rows, sample_rows = {}, {}
    for name in ("cof", "single"):
        spec = baselines.arm(name)
        graphdef, params = nnx.split(train.make_model(c, spec.num_frames, 0))
        tx = train.optimizer(c, 100)
        step = train.make_train_step(graphdef, tx, c, spec.frames, jax.random.key(0))
        one = jax.jit(lambda carry, i, step=step: step(carry, i, latents, text_ids))
        carry = (params, tx.init(params), params)
        flops = train.step_cost(c, name, latents, text_ids)["flops"]
        wall = timing.median_seconds(lambda: one(carry, jnp.int32(0))[1]["loss"],
                                     repeats=reps)
        step_rows[name] = {"flops": flops, "wall_ms": 1e3 * wall,
                           "params": int(sum(x.size for x in jax.tree.leaves(params)))}
        b = SAMPLE_BATCH.value
        fn = train.make_sampler(c, graphdef, spec.num_frames, ae, float(configs.cfg_value(c)),
                                all_frames=False)
        ids = text_ids[:b]
        mask = ids != 0
        t = timing.median_seconds(fn, params, ids, mask, jax.random.key(1),
                                  repeats=max(2, reps // 5))
        sample_rows[name] = {"ms_per_image": 1e3 * t / b}

    clips = jnp.asarray(pool["frames"][:64], jnp.float32) / 255.0  # [64, 3, 32, 32, 3]
    enc = jax.jit(ae.encode)
    batched = jax.jit(lambda x: vae.encode_frames(ae, x))

    def independent():  # one call per frame, each finished before the next starts
        return [jax.block_until_ready(enc(clips[:, f])) for f in range(3)]

    t_ind = timing.median_seconds(independent, repeats=reps)
    t_bat = timing.median_seconds(batched, clips, repeats=reps)
    same = np.allclose(np.stack([np.asarray(z) for z in independent()], 1),
                       np.asarray(batched(clips)) * float(ae.latent_scale[...]), atol=1e-5)

    flops_ratio = step_rows["cof"]["flops"] / step_rows["single"]["flops"]
    wall_ratio = step_rows["cof"]["wall_ms"] / step_rows["single"]["wall_ms"]
    sample_ratio = sample_rows["cof"]["ms_per_image"] / sample_rows["single"]["ms_per_image"]
    print(results.format_table(
        [[n, f"{r['flops'] / 1e9:.2f}", f"{r['wall_ms']:.1f}", f"{r['params']:,}",
          f"{sample_rows[n]['ms_per_image']:.2f}"] for n, r in step_rows.items()],
        ["arm", "GFLOPs / step", "ms / step", "params", "sampling ms / image"],
        title=f"batch {c.batch}, d={c.d_model}, depth {c.depth}, {c.sample_steps} Euler steps, "
              f"CFG in one batch (CPU, {jax.device_count()} devices)"))
    print(f"cof / single: FLOPs {flops_ratio:.2f}, step wall {wall_ratio:.2f} (target <= 3.5: "
          f"{'holds' if wall_ratio <= 3.5 else 'fails'}), sampling {sample_ratio:.2f} (target "
          f"<= 3.5: {'holds' if sample_ratio <= 3.5 else 'fails'})")
    print(f"AE encode of 64 three-frame clips: independent calls {1e3 * t_ind:.2f} ms, batched "
          f"over frames {1e3 * t_bat:.2f} ms (same latents: {same})")
    out = {"train_step": step_rows, "sampling": sample_rows,
           "ratios": {"flops": flops_ratio, "step_wall": wall_ratio, "sampling": sample_ratio},
           "ae_encode_ms": {"independent_calls": 1e3 * t_ind, "batched": 1e3 * t_bat,
                            "same_latents": bool(same)},
           "targets": {"step_wall_le_3.5": wall_ratio <= 3.5,
                       "sampling_le_3.5": sample_ratio <= 3.5},
           "config": {"d_model": c.d_model, "depth": c.depth, "batch": c.batch,
                      "sample_steps": c.sample_steps, "sample_batch": SAMPLE_BATCH.value},
           "jax": jax.__version__, "devices": jax.device_count(), "cpu_count": os.cpu_count(),
           "platform": platform.platform(), "runtime_s": time.time() - t_start}
    path = OUT.value or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                     "cof_t2i.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(out), f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    app.run(main)
