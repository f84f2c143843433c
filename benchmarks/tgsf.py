r"""TGsF benchmark: rasteriser cost and memory, feed-forward inference, accuracy per cost.

    python benchmarks/tgsf.py                     # ~3 min on 2 CPU cores
    python benchmarks/tgsf.py --ff_workdir=runs/tgsf_ff --clips=20

In one process (the paper's benchmark):

1. rasteriser forward + backward (grad of an L1 loss w.r.t. every Gaussian field) ms per view
   and the compiled program's temporary memory, for 32 x 32 with N in {256, 512, 1024} and
   64 x 64 with N = 1500, chunked (256 pixels per ``lax.map`` step) against unchunked (all
   pixels at once); reports ms / (P N) so the dense O(P N) scaling shows.
2. feed-forward inference per clip (3 frames of 16 x 16, jit-warm, CPU). Target <= 1 s.
3. accuracy per cost on ``--clips`` test clips: FF-TGsF inference (the EMA weights of a
   finished ``feedforward`` run in ``--ff_workdir``, else freshly initialised weights and the
   row says so) against per-scene fitting (800 steps, order 2, TGs-Flow on the same three
   input frames) of the same clips: time ratio (target >= 50x) and the PSNR gap on the
   held-out cameras at the query times.

Writes ``benchmarks/results/tgsf.json``.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

import functools
import json
import os
import platform
import tempfile
import time

import jax.numpy as jnp
from absl import app, flags
from flax import nnx

from icml26_jax.core import checkpoint, results, timing
from icml26_jax.tgsf import camera, configs, ff, fit, model, render
from icml26_jax.tgsf import data as tdata
from icml26_jax.tgsf import gaussians as G

REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per measurement (median).")
CLIPS = flags.DEFINE_integer("clips", 20, "Test clips for accuracy per cost.")
FIT_STEPS = flags.DEFINE_integer("fit_steps", 800, "Per-scene fitting steps per clip.")
FF_WORKDIR = flags.DEFINE_string("ff_workdir", "runs/tgsf_ff",
                                 "workdir of a finished feedforward run (trained weights).")
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/tgsf.json).")


def _random_gaussians(n: int, key) -> G.TaylorGaussians:
    k = jax.random.split(key, 4)
    return G.TaylorGaussians(
        mean=jax.random.uniform(k[0], (n, 3), minval=-1.5, maxval=1.5),
        vel=0.3 * jax.random.normal(k[1], (n, 3)), acc=jax.random.normal(k[2], (n, 3)),
        t_anchor=jnp.zeros((n,)), log_tscale=jnp.zeros((n,)),
        log_scale=jnp.full((n, 3), -2.5), quat=jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, 1)),
        opacity_logit=jnp.zeros((n,)), rgb=jax.random.uniform(k[3], (n, 3)))


def bench_rasteriser(repeats: int) -> list:
    rows = []
    for size, n in ((32, 256), (32, 512), (32, 1024), (64, 1500)):
        cam = camera.index(camera.arc_cameras(1, height=size, width=size), 0)
        g = _random_gaussians(n, jax.random.key(n))
        target = jax.random.uniform(jax.random.key(1), (size, size, 3))
        P = size * size
        for label, chunk in (("chunked", 256), ("unchunked", P)):
            def loss(gs, chunk=chunk):
                out = render.render(gs, cam, 0.5, pixel_chunk=chunk)
                return jnp.mean(jnp.abs(out["rgb"] - target))

            f = jax.jit(jax.value_and_grad(loss))
            mem = f.lower(g).compile().memory_analysis()
            temp = getattr(mem, "temp_size_in_bytes", None) if mem is not None else None
            ms = 1e3 * timing.median_seconds(f, g, repeats=repeats)
            rows.append({"size": size, "N": n, "mode": label, "pixel_chunk": chunk,
                         "fwd_bwd_ms": ms, "ns_per_pixel_gaussian": 1e6 * ms / (P * n),
                         "temp_mib": None if temp is None else temp / 2**20})
    return rows


def _trained_ff(c, workdir: str, graphdef, params0):
    """EMA weights of the ``ff_tgsf`` arm of a finished run, or None."""
    directory = os.path.join(workdir, "ckpt", "e3")
    if checkpoint.latest_step(directory) is None:
        return None
    try:
        state = checkpoint.restore_latest(directory)[1]
        leaves = state["leaves"]
        A = len(ff.ARM_NAMES)
        like = ff.FFState(jax.tree.map(lambda x: jnp.stack([x] * A), params0), None, None)
        n_params = len(jax.tree.leaves(like.params))
        ema_leaves = leaves[-n_params:]  # FFState(params, opt, ema): ema is last
        ema = jax.tree.unflatten(jax.tree.structure(like.params), ema_leaves)
        return jax.tree.map(lambda x: jnp.asarray(x)[0], ema)
    except (KeyError, ValueError, TypeError) as e:  # a run of another config
        print(f"could not restore {directory}: {e}")
        return None


def bench_feedforward(c, clips: int, fit_steps: int, repeats: int, ff_workdir: str) -> dict:
    size = int(c.ff_image_size)
    net = model.FFTGsF(image_size=size, num_frames=len(ff.INPUT_TIMES), width=int(c.ff_width),
                       rngs=nnx.Rngs(0))
    graphdef, params0 = nnx.split(net, nnx.Param)
    params = _trained_ff(c, ff_workdir, graphdef, params0)
    trained = params is not None
    params = params if trained else params0
    kinds, groups = ff.test_kinds((clips, 0, 0) if clips else (1, 0, 0))
    kinds, groups = kinds[:clips], groups[:clips]
    test = ff.make_clips(kinds, ff.TEST_SEED0, "test", size)
    one = jax.tree.map(lambda x: x[0], test.inputs)
    infer = functools.partial(ff.predict_jit, graphdef)  # run_e3's compiled forward
    infer_ms = 1e3 * timing.median_seconds(infer, params, one, repeats=repeats)
    arm = fit.make_arm(2, True, "decoupled")
    rgb_ff = ff.render_queries_jit(graphdef, params, arm, test)  # as run_e3 renders
    ff_scores = ff.score(rgb_ff, test, groups)
    # Per-scene fitting of the same clips (their three input frames), all clips vmapped.
    kf = (0, 1, 2)
    arms = tdata.stack([arm] * clips)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.time()
        g, _ = fit.fit(test.inputs, arms, keyframes=kf, num_gaussians=int(c.num_gaussians),
                       num_seeds=1, steps=fit_steps, key=jax.random.key(0), directory=d,
                       fingerprint=1, chunk=fit_steps, lr_scale=float(c.lr_scale),
                       motion_lr_scale=float(c.motion_lr_scale), name="bench_fit")
        jax.block_until_ready(g)
        fit_s = time.time() - t0
    cams = ff.query_cameras(size)
    qt = jnp.asarray(ff.QUERY_TIMES)

    def render_one(gs):
        gs = fit.apply_arm(gs, arm)
        return jax.vmap(lambda cam: jax.vmap(lambda t: jnp.clip(
            render.render(gs, cam, t, pixel_chunk=256)["rgb"], 0, 1))(qt))(cams)

    rgb_fit = jax.jit(jax.vmap(render_one))(jax.tree.map(lambda x: x[:, 0], g))
    fit_scores = ff.score(rgb_fit, test, groups)
    per_clip_fit_s = fit_s / clips
    ratio = per_clip_fit_s / (infer_ms / 1e3)
    return {"trained_weights": trained, "inference_ms_per_clip": infer_ms,
            "fit_s_per_clip_vmapped": per_clip_fit_s, "fit_steps": fit_steps,
            "time_ratio_fit_over_ff": ratio, "clips": clips,
            "psnr_ff": ff_scores["psnr/all/all"], "psnr_fit": fit_scores["psnr/all/all"],
            "psnr_gap_fit_minus_ff": fit_scores["psnr/all/all"] - ff_scores["psnr/all/all"],
            "psnr_ff_extrap": ff_scores["psnr/all/extrap"],
            "psnr_fit_extrap": fit_scores["psnr/all/extrap"]}


def main(argv):
    del argv
    t0 = time.time()
    c = configs.get_config("feedforward")
    rast = bench_rasteriser(REPEATS.value)
    print(results.format_table(
        [[f"{r['size']}x{r['size']}", r["N"], r["mode"], f"{r['fwd_bwd_ms']:.2f}",
          f"{r['ns_per_pixel_gaussian']:.2f}",
          "-" if r["temp_mib"] is None else f"{r['temp_mib']:.1f}"] for r in rast],
        ["image", "N", "mode", "fwd+bwd ms", "ns / (pixel Gaussian)", "temp MiB"],
        title="dense rasteriser, forward + backward per view (jitted, CPU)"))
    ffb = bench_feedforward(c, CLIPS.value, FIT_STEPS.value, REPEATS.value, FF_WORKDIR.value)
    inf_ok = ffb["inference_ms_per_clip"] <= 1000
    ratio_ok = ffb["time_ratio_fit_over_ff"] >= 50
    print(f"\nFF-TGsF inference: {ffb['inference_ms_per_clip']:.1f} ms / clip (target <= 1 s: "
          f"{'holds' if inf_ok else 'fails'})")
    print(f"per-scene fit ({ffb['fit_steps']} steps, {ffb['clips']} clips vmapped): "
          f"{ffb['fit_s_per_clip_vmapped']:.2f} s / clip; ratio "
          f"{ffb['time_ratio_fit_over_ff']:.0f}x (target >= 50x: "
          f"{'holds' if ratio_ok else 'fails'})")
    print(f"PSNR on held-out cameras: FF {ffb['psnr_ff']:.2f} dB "
          f"({'trained' if ffb['trained_weights'] else 'UNTRAINED: no feedforward run found'})"
          f", per-scene fit {ffb['psnr_fit']:.2f} dB, gap fit - FF "
          f"{ffb['psnr_gap_fit_minus_ff']:.2f} dB")
    out = {"rasteriser": rast, "feedforward": ffb,
           "targets": {"ff_inference_le_1s": inf_ok, "fit_over_ff_time_ge_50x": ratio_ok},
           "jax": jax.__version__, "devices": jax.device_count(), "cpu_count": os.cpu_count(),
           "platform": platform.platform(), "runtime_s": time.time() - t0}
    path = OUT.value or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                     "tgsf.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(out), f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    app.run(main)
