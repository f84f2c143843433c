"""The CoF-T2I experiment (spec §Experiment): trajectory pool -> frozen frame AE -> one video
DiT per arm (flow matching, EMA) -> sampling with CFG -> pixel-only GenEval scoring -> claims.

Stages, each resumable (orbax):

1. **Pool** (``checkpoint.cached``): ``config.pool`` verified CoF trajectories (F1, F2, F3)
   with their captions, drawn once from the run seed; every arm reads the *same* minibatch
   indices from it (one data stream for all arms; an arm takes its ``ArmSpec.frames``).
2. **AE** (``run_chunks``): the frame autoencoder on random frames of the pool (drafts, flat
   and refined renders), then frozen; the latent scale is the std of the pool's latents and
   the pool is encoded once, each frame on its own (``vae.encode_frames``).
3. **Arms** (``run_chunks`` per arm): AdamW with warm-up and cosine decay, 10 % caption
   dropout, EMA weights (warm-up-corrected decay ``min(ema, (1 + i) / (10 + i))``).
4. **Evaluation**: the evaluator is validated on clean renders and on AE reconstructions of
   the test metadata, drafts and refinement score are checked, then every arm samples
   ``samples_per_prompt`` images per test prompt (EMA weights, CFG, Euler in
   ``lax.fori_loop``, batches sharded over a ``DATA`` mesh when devices allow), and only
   pixels are scored. ``cof`` decodes all three frames for the per-frame analysis.

Test prompts (25 per tag, half of the tags' prompts from held-out combinations where the tag
has combinations) and validation prompts are fixed by their own seeds, like GenEval's fixed
metadata file, and are written to ``<workdir>/evaluation_metadata.jsonl``.
"""

from __future__ import annotations

import logging
import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from icml26_jax.cof_t2i import baselines, configs, dit, evaluator, flow, scenes, vae
from icml26_jax.cof_t2i import trajectories as traj
from icml26_jax.cof_t2i.prompts import (  # noqa: F401  (train.<name> is public API)
    COMBO_TAGS, TEST_SEED, VAL_SEED, load_metadata_jsonl, prompt_set, test_metadata,
    tokenize_all, val_metadata, write_metadata_jsonl)
from icml26_jax.core import checkpoint, results
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import optim

PAPER = "cof_t2i"


def _log(msg, *args):
    logging.getLogger("absl").info("cof_t2i: " + msg, *args)




# --------------------------------------------------------------------------- pool and AE

def make_pool(n: int, seed: int) -> dict:
    """``n`` verified training trajectories (no held-out combination) with captions."""
    rng = np.random.default_rng([seed, 1])
    b = traj.sample_batch(n, "cof", rng, "train")
    return {"frames": b.frames, "text_ids": b.text_ids}


def ae_optimizer(c) -> optax.GradientTransformation:
    return optim.promotion_safe(optax.adam(optax.cosine_decay_schedule(float(c.ae_lr),
                                                                       int(c.ae_steps))))


def ae_setup(c, model, loss_fn, salt: int):
    """``_fit_ae``'s optimiser and jitted step ``one(carry, i, data)`` for ``model``: returns
    (graphdef, params, rest, tx, one). The step draws ``ae_batch`` random rows of ``data``
    (uint8 images or clips), an argument: closed over, XLA would embed the pool in the program
    (111 MB of frames at the default pool, a copy per compile)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = ae_optimizer(c)
    key = jax.random.fold_in(jax.random.key(int(c.seed)), salt)
    batch = int(c.ae_batch)

    def one(carry, i, data):
        params, opt = carry
        idx = jax.random.randint(jax.random.fold_in(key, i), (batch,), 0, data.shape[0])
        x = data[idx].astype(jnp.float32) / 255.0

        def loss(p):
            return loss_fn(nnx.merge(graphdef, p, rest), x)

        value, g = jax.value_and_grad(loss)(params)
        u, opt = tx.update(g, opt, params)
        return (optax.apply_updates(params, u), opt), {"loss": value}

    return graphdef, params, rest, tx, jax.jit(one, donate_argnums=(0,))


def _fit_ae(c, model, loss_fn, data: np.ndarray, workdir: str, stage: str, salt: int):
    """Trains an autoencoder ``model`` with ``loss_fn(model, x)`` on random rows of ``data``
    (uint8 images or clips; ``ae_steps`` Adam steps of ``ae_batch`` rows, orbax chunks);
    returns the trained model and its final training loss."""
    graphdef, params, rest, tx, one = ae_setup(c, model, loss_fn, salt)
    data = jnp.asarray(data)
    steps = int(c.ae_steps)
    logs = {"loss": np.zeros((steps,), np.float32)}

    def advance(carry, lg, start, n):
        # jax.device_put: the carry is the host copy of the previous chunk (see below).
        carry, losses = checkpoint.steps_loop(one, jax.device_put(carry), start, n, "loss",
                                              (data,), convolutional=True)
        lg["loss"][start:start + n] = losses
        # Every process trains the same AE on its first device; the checkpointed state is a
        # host copy (orbax writes it from process 0).
        return jax.device_get(carry), f"mse {float(np.mean(lg['loss'][start:start + n])):.5f}"

    fp = checkpoint.config_fingerprint({"stage": stage, **_fields(c, "seed", "pool", "ae_width",
                                                                   "ae_steps", "ae_lr",
                                                                   "ae_batch")})
    (params, _), logs = checkpoint.run_chunks(
        os.path.join(workdir, "ckpt", stage), fingerprint=fp, state=(params, tx.init(params)),
        logs=logs, steps=steps, chunk=int(c.chunk), advance=advance, name=stage)
    return nnx.merge(graphdef, params, rest), float(np.mean(logs["loss"][-50:]))


def _latent_std(encode, images: np.ndarray) -> float:
    """Std of ``encode``'s raw latents on up to ~2048 evenly spaced rows of ``images``."""
    enc = jax.jit(lambda x: encode(x.astype(jnp.float32) / 255.0))
    sample = np.asarray(images[:: max(1, images.shape[0] // 2048)])
    z = np.concatenate([np.asarray(enc(sample[i:i + 256])) for i in range(0, len(sample), 256)])
    return float(z.std())


def train_ae(c, frames: np.ndarray, workdir: str) -> tuple[vae.FrameAE, float]:
    """Trains the frame AE on random frames (drafts, flat and refined) of the pool and sets
    its latent scale; returns the frozen model and its final training MSE."""
    images = frames.reshape((-1,) + frames.shape[2:])
    ae, mse = _fit_ae(c, vae.FrameAE(int(c.ae_width), rngs=nnx.Rngs(int(c.seed))), vae.ae_loss,
                      images, workdir, "ae", 101)
    ae.latent_scale[...] = jnp.asarray(_latent_std(ae.encode, images), jnp.float32)
    return ae, mse


def train_joint_ae(c, frames: np.ndarray, workdir: str) -> tuple[vae.JointTemporalAE, float]:
    """The ``cof_joint_enc`` arm's encoder: ``JointTemporalAE`` trained like the frame AE
    (same steps, batch of clips, rate) on whole pool clips; each latent frame gets its own
    scale. Returns the frozen model and its final training MSE."""
    jae, mse = _fit_ae(c, vae.JointTemporalAE(int(c.ae_width), rngs=nnx.Rngs(int(c.seed))),
                       vae.joint_ae_loss, frames, workdir, "joint_ae", 102)
    jae.first.latent_scale[...] = jnp.asarray(_latent_std(jae.first.encode, frames[:, 0]),
                                              jnp.float32)
    pair = np.concatenate([frames[:, 1], frames[:, 2]], -1)
    jae.pair.latent_scale[...] = jnp.asarray(_latent_std(jae.pair.encode, pair), jnp.float32)
    return jae, mse


def encode_pool(ae, frames: np.ndarray, batch: int = 256) -> np.ndarray:
    """Scaled latents of the pool: ``[n, 3, 8, 8, 8]`` with a ``FrameAE`` (every frame
    encoded as its own clip), ``[n, 2, 8, 8, 8]`` with a ``JointTemporalAE``."""
    if isinstance(ae, vae.JointTemporalAE):
        enc = jax.jit(lambda x: vae.encode_joint(ae, x.astype(jnp.float32) / 255.0))
    else:
        enc = jax.jit(lambda x: vae.encode_frames(ae, x.astype(jnp.float32) / 255.0))
    return np.concatenate([np.asarray(enc(frames[i:i + batch]))
                           for i in range(0, len(frames), batch)])


def reconstruct_clips(ae, clips: np.ndarray, batch: int = 256) -> np.ndarray:
    """uint8 clips ``[n, 3, 32, 32, 3]`` -> uint8 reconstructions through ``ae`` (frame by
    frame for a ``FrameAE``, (F1), (F2, F3) for a ``JointTemporalAE``)."""
    if isinstance(ae, vae.JointTemporalAE):
        fn = jax.jit(lambda x: vae.decode_joint(ae, vae.encode_joint(
            ae, x.astype(jnp.float32) / 255.0)))
    else:
        fn = jax.jit(lambda x: vae.decode_frames(ae, vae.encode_frames(
            ae, x.astype(jnp.float32) / 255.0)))
    return to_uint8(np.concatenate([np.asarray(fn(clips[i:i + batch]))
                                    for i in range(0, len(clips), batch)]))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Mean per-image PSNR (dB) of uint8 images ``a`` against ``b`` (peak 255)."""
    d = (a.astype(np.float64) - b.astype(np.float64)) / 255.0
    mse = np.maximum(np.mean(d * d, axis=tuple(range(1, d.ndim))), 1e-12)
    return float(np.mean(10.0 * np.log10(1.0 / mse)))


def to_uint8(x) -> np.ndarray:
    return np.clip(np.round(np.asarray(x) * 255.0), 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------- flow training

def make_model(c, num_frames: int, seed: int) -> dit.VideoDiT:
    return dit.VideoDiT(num_frames, d=int(c.d_model), depth=int(c.depth), heads=int(c.heads),
                        vocab=len(traj.VOCAB), max_text=traj.MAX_TOKENS,
                        rngs=nnx.Rngs(seed))


def optimizer(c, steps: int) -> optax.GradientTransformation:
    sched = optax.warmup_cosine_decay_schedule(0.0, float(c.lr), min(int(c.warmup), steps - 1)
                                               if steps > 1 else 0, steps)
    return optim.promotion_safe(optax.adamw(sched, weight_decay=float(c.weight_decay)))


def make_train_step(graphdef, tx, c, frames: tuple[int, ...], data_key):
    """One jitted step ``(params, opt, ema), i -> ..., {'loss'}``. The minibatch indices and
    the noise come from ``fold_in(data_key, i)``: identical for every arm at step i."""
    batch, ema_decay, p_drop = int(c.batch), float(c.ema), float(c.text_dropout)
    sel = jnp.asarray(frames)

    def step(carry, i, latents, text_ids):
        params, opt, ema = carry
        k_idx, k_loss = jax.random.split(jax.random.fold_in(data_key, i))
        idx = jax.random.randint(k_idx, (batch,), 0, latents.shape[0])
        ids = text_ids[idx]
        b = flow.FlowBatch(latents[idx][:, sel], ids, ids != traj.PAD)
        loss, g = jax.value_and_grad(flow.loss, argnums=1)(graphdef, params, b, k_loss, p_drop)
        u, opt = tx.update(g, opt, params)
        params = optax.apply_updates(params, u)
        fi = i.astype(jnp.float32)
        decay = jnp.minimum(ema_decay, (1.0 + fi) / (10.0 + fi))
        ema = jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p, ema, params)
        return (params, opt, ema), {"loss": loss}

    return step


def arm_steps(c, name: str) -> int:
    return int(c.steps) * baselines.arm(name).steps_mult


def arm_setup(c, name: str):
    """A fresh model of arm ``name`` and ``train_arm``'s jitted step
    ``one(carry, i, latents, text_ids)``: returns (graphdef, params, tx, one, steps). The
    latents and captions are arguments (``make_train_step``): closed over, XLA would embed them
    in the program (74 MB of latents at the default pool)."""
    spec = baselines.arm(name)
    graphdef, params = nnx.split(make_model(c, spec.num_frames, int(c.seed)))
    steps = arm_steps(c, name)
    tx = optimizer(c, steps)
    data_key = jax.random.fold_in(jax.random.key(int(c.seed)), 202)  # shared by all arms
    step = make_train_step(graphdef, tx, c, spec.frames, data_key)
    return graphdef, params, tx, jax.jit(step, donate_argnums=(0,)), steps


def train_arm(c, name: str, latents, text_ids, workdir: str):
    """Trains arm ``name``; returns ``(graphdef, ema_params, logs)``."""
    spec = baselines.arm(name)
    graphdef, params, tx, one, steps = arm_setup(c, name)
    logs = {"loss": np.zeros((steps,), np.float32), "step_s": np.zeros((), np.float64)}

    def advance(carry, lg, start, n):
        t0 = time.time()
        carry, losses = checkpoint.steps_loop(one, jax.device_put(carry), start, n, "loss",
                                              (latents, text_ids), convolutional=False)
        lg["loss"][start:start + n] = losses
        lg["step_s"] = np.asarray((time.time() - t0) / n)  # of the latest chunk
        return jax.device_get(carry), f"loss {float(np.mean(lg['loss'][start:start + n])):.4f}"

    fp = checkpoint.config_fingerprint({"stage": name, "frames": spec.frames, "steps": steps,
                                        **_fields(c, *_ARM_FIELDS)})
    state = (params, tx.init(params), jax.tree.map(jnp.copy, params))
    (params, _, ema), logs = checkpoint.run_chunks(
        os.path.join(workdir, "ckpt", name), fingerprint=fp, state=state, logs=logs,
        steps=steps, chunk=int(c.chunk), advance=advance, name=name)
    return graphdef, ema, logs


_ARM_FIELDS = ("seed", "pool", "ae_width", "ae_steps", "ae_lr", "ae_batch", "d_model", "depth",
               "heads", "batch", "lr", "weight_decay", "warmup", "ema", "text_dropout")


def _fields(c, *keys) -> dict:
    return {k: c[k] for k in keys}


def step_cost(c, name: str, latents, text_ids) -> dict:
    """FLOPs of one training step (XLA's cost analysis of the compiled step)."""
    spec = baselines.arm(name)
    graphdef, params = nnx.split(make_model(c, spec.num_frames, 0))
    tx = optimizer(c, 10)
    step = make_train_step(graphdef, tx, c, spec.frames, jax.random.key(0))
    carry = (params, tx.init(params), params)
    compiled = jax.jit(step).lower(carry, jnp.int32(0), latents, text_ids).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return {"flops": float(cost.get("flops", float("nan")))}


# --------------------------------------------------------------------------- sampling

def make_sampler(c, graphdef, num_frames: int, ae, cfg: float, all_frames: bool):
    """jitted ``(params, ids, mask, key) -> uint8-ready images [B, F', 32, 32, 3]`` in [0, 1]:
    the last frame only (``all_frames=False``) or every frame. ``ae`` is the arm's decoder: a
    ``FrameAE`` (one image per latent frame) or a ``JointTemporalAE`` (2 latent frames -> 3
    images)."""
    steps, shift = int(c.sample_steps), float(c.shift)

    def fn(params, ids, mask, key):
        z = flow.sample(graphdef, params, ids, mask, num_frames, steps, cfg, shift, key)
        if isinstance(ae, vae.JointTemporalAE):
            img = vae.decode_joint(ae, z)
            return img if all_frames else img[:, -1:]
        return vae.decode_frames(ae, z if all_frames else z[:, -1:])

    return jax.jit(fn)


def sample_images(c, graphdef, params, ae, rows: list[dict], per_prompt: int, cfg: float,
                  key, num_frames: int, all_frames: bool = False) -> np.ndarray:
    """``uint8 [len(rows) * per_prompt, F', 32, 32, 3]``: sample j of prompt p at row
    ``p * per_prompt + j``. Batch j of ``eval_batch`` rows draws its noise from ``keys[j]``;
    it is padded (with wrapped rows, whose images are dropped) to a multiple of the device
    count and sharded over every device of a ``DATA`` mesh (parameters replicated), and the
    images are gathered from every process."""
    ids, mask = tokenize_all(rows)
    ids, mask = np.repeat(ids, per_prompt, 0), np.repeat(mask, per_prompt, 0)
    n, bs = len(ids), int(c.eval_batch)
    mesh = mesh_lib.data_mesh(bs)
    width = bs  # rows computed per batch: bs padded to a multiple of the device count
    if mesh is not None:
        params = jax.tree.map(lambda a: mesh_lib.replicate(np.asarray(a), mesh), params)
        width = mesh_lib.padded_size(bs, mesh, mesh_lib.DATA)
    fn = make_sampler(c, graphdef, num_frames, ae, cfg, all_frames)
    keys = np.asarray(jax.random.key_data(jax.random.split(key, (n + bs - 1) // bs)))
    outs = []
    for j, s0 in enumerate(range(0, n, bs)):
        idx = np.arange(s0, s0 + width) % n
        k = jax.random.wrap_key_data(jnp.asarray(keys[j]))
        if mesh is None:
            out = fn(params, jnp.asarray(ids[idx]), jnp.asarray(mask[idx]), k)
        else:
            out = fn(params, mesh_lib.shard_leading(ids[idx], mesh, mesh_lib.DATA),
                     mesh_lib.shard_leading(mask[idx], mesh, mesh_lib.DATA), k)
        outs.append(to_uint8(mesh_lib.to_host(out, min(bs, n - s0))))
    return np.concatenate(outs)


# --------------------------------------------------------------------------- scoring

def score(images: np.ndarray, rows: list[dict], per_prompt: int) -> dict:
    """GenEval scores of ``images`` (row p * per_prompt + j belongs to prompt p): all
    prompts, and seen / held-out prompts separately."""
    if len(images) != len(rows) * per_prompt:
        raise ValueError(f"{len(images)} images for {len(rows)} prompts x {per_prompt}")
    ok = np.array([evaluator.evaluate(img, rows[i // per_prompt])[0]
                   for i, img in enumerate(images)])
    tags = [rows[i // per_prompt]["tag"] for i in range(len(images))]
    held = np.array([bool(rows[i // per_prompt].get("heldout", False))
                     for i in range(len(images))])
    out = {"all": evaluator.geneval_summary(zip(tags, ok))}
    for name, sel in (("seen", ~held), ("heldout", held)):
        if sel.any():
            out[name] = evaluator.geneval_summary(
                (t, o) for t, o, s in zip(tags, ok, sel) if s)
    out["correct"] = ok
    return out


def auc(neg: np.ndarray, pos: np.ndarray) -> float:
    """P(score(pos) > score(neg)) + 0.5 P(tie) (the Mann-Whitney AUC)."""
    neg, pos = np.asarray(neg)[:, None], np.asarray(pos)[None, :]
    return float(np.mean((pos > neg) + 0.5 * (pos == neg)))


def validate_evaluator(c, ae: vae.FrameAE, rows: list[dict], joint_ae=None) -> dict:
    """Spec §Claims 1-4 inputs: clean flat / refined renders of the test metadata
    (``renders_per_prompt`` scenes each), their AE reconstructions, CoF drafts, and the
    refinement score's separation of flat vs refined renders. Also the per-frame PSNR of the
    frame AE's reconstructions of these clips and, with ``joint_ae``, of the joint encoder's
    (and the evaluator's accuracy on its F2 / F3 reconstructions)."""
    rng = np.random.default_rng(TEST_SEED + 7)
    k = int(c.renders_per_prompt)
    clips = np.stack([traj.build(md, traj.sample_mode(rng), rng).frames
                      for md in rows for _ in range(k)])  # [n, 3 (draft, flat, refined), ...]
    drafts, flat, refined = clips[:, 0], clips[:, 1], clips[:, 2]
    out = {"renders": {}, "reconstructions": {}}
    rec = reconstruct_clips(ae, clips)
    for f, style in ((1, "flat"), (2, "refined")):
        out["renders"][style] = score(clips[:, f], rows, k)["all"]
        out["reconstructions"][style] = score(rec[:, f], rows, k)["all"]
    out["psnr"] = {"frame": {f"F{f + 1}": psnr(rec[:, f], clips[:, f]) for f in range(3)}}
    if joint_ae is not None:
        jrec = reconstruct_clips(joint_ae, clips)
        out["psnr"]["joint"] = {f"F{f + 1}": psnr(jrec[:, f], clips[:, f]) for f in range(3)}
        out["joint_reconstructions"] = {style: score(jrec[:, f], rows, k)["all"]
                                        for f, style in ((1, "flat"), (2, "refined"))}
    d = score(drafts, rows, k)
    out["drafts_rejected"] = float(1.0 - np.mean(d["correct"]))
    rs_flat = np.array([evaluator.refinement_score(x) for x in flat])
    rs_ref = np.array([evaluator.refinement_score(x) for x in refined])
    out["refinement_auc"] = auc(rs_flat, rs_ref)
    out["refinement_mean"] = {"flat": float(rs_flat.mean()), "refined": float(rs_ref.mean())}
    out["n_per_style"] = int(len(flat))
    out["examples"] = {"flat": flat[:: k], "refined": refined[:: k]}  # one per prompt
    return out


def _clean(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "correct"}


def select_cfg(c, graphdef, params, ae, val_rows, key, num_frames) -> tuple[float, dict]:
    """cfg='auto': the weight in ``configs.CFG_GRID`` with the best validation Overall (one
    sample per validation prompt; ties go to the smaller weight). Test prompts are never
    used."""
    scores = {}
    for w in configs.CFG_GRID:
        imgs = sample_images(c, graphdef, params, ae, val_rows, 1, w, key, num_frames)[:, -1]
        scores[w] = score(imgs, val_rows, 1)["all"]["overall"]
    best = max(configs.CFG_GRID, key=lambda w: (scores[w], -w))
    return best, {str(w): s for w, s in scores.items()}


ALL_FRAME_ARMS = ("cof", "cof_joint_enc")  # arms whose every frame is decoded and scored


def evaluate_arm(c, name, graphdef, params, ae, test_rows, val_rows, key) -> dict:
    spec = baselines.arm(name)
    cfg = configs.cfg_value(c)
    out = {}
    if cfg == "auto":
        cfg, out["cfg_val"] = select_cfg(c, graphdef, params, ae, val_rows,
                                         jax.random.fold_in(key, 1), spec.num_frames)
    out["cfg"] = float(cfg)
    per = int(c.samples_per_prompt)
    all_frames = name in ALL_FRAME_ARMS
    t0 = time.time()
    imgs = sample_images(c, graphdef, params, ae, test_rows, per, cfg, key, spec.num_frames,
                         all_frames)
    out["sample_s_per_image"] = (time.time() - t0) / len(imgs)
    final = imgs[:, -1]
    s = score(final, test_rows, per)
    out["geneval"] = _clean(s)
    out["correct"] = s["correct"]
    out["refinement"] = float(np.mean([evaluator.refinement_score(x) for x in final]))
    if all_frames:
        out["frames"] = {}
        n_img = imgs.shape[1]  # decoded frames (3 for cof_joint_enc's 2 latent frames)
        for f in range(n_img):
            sf = s if f == n_img - 1 else score(imgs[:, f], test_rows, per)
            out["frames"][f"F{f + 1}"] = {
                "geneval": _clean(sf),
                "refinement": float(np.mean([evaluator.refinement_score(x)
                                             for x in imgs[:, f]]))}
    out["images"] = imgs[:: per]  # the first sample of every prompt (figures)
    return out


# --------------------------------------------------------------------------- run

def normalise_config(c) -> None:
    from icml26_jax.core.flags import as_tuple

    c.arms = as_tuple(c.arms, lambda v: str(v).strip(), name="arms")
    c.seeds = as_tuple(c.seeds, int, name="seeds")
    c.cfg = str(c.cfg)


def run(c: ml_collections.ConfigDict, workdir: str) -> dict:
    """Pool -> AE -> arms -> evaluation -> claims, results.json and figures."""
    from icml26_jax.cof_t2i import report
    from icml26_jax.core import distributed

    normalise_config(c)
    configs.validate(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer of the workdir's own files
        os.makedirs(workdir, exist_ok=True)
    stage_s = {}
    test_rows = test_metadata(int(c.prompts_per_tag))
    val_rows = val_metadata(int(c.val_prompts_per_tag), test_rows)
    if distributed.is_primary():
        write_metadata_jsonl(os.path.join(workdir, "evaluation_metadata.jsonl"), test_rows)

    t0 = time.time()
    pool = checkpoint.cached(
        os.path.join(workdir, "ckpt", "pool"),
        fingerprint=checkpoint.config_fingerprint(_fields(c, "seed", "pool")),
        compute=lambda: make_pool(int(c.pool), int(c.seed)), name="pool")
    stage_s["pool"] = time.time() - t0
    _log("pool: %d trajectories in %.1f s", len(pool["frames"]), stage_s["pool"])

    t0 = time.time()
    ae, ae_mse = train_ae(c, pool["frames"], workdir)
    latents = jnp.asarray(encode_pool(ae, pool["frames"]))
    text_ids = jnp.asarray(pool["text_ids"])
    stage_s["ae"] = time.time() - t0
    _log("AE: final mse %.5f, latent scale %.3f (%.1f s)", ae_mse,
         float(ae.latent_scale[...]), stage_s["ae"])

    joint_ae, joint_latents = None, None
    if any(baselines.arm(a).encoder == "joint" for a in c.arms):
        t0 = time.time()
        joint_ae, joint_mse = train_joint_ae(c, pool["frames"], workdir)
        joint_latents = jnp.asarray(encode_pool(joint_ae, pool["frames"]))
        stage_s["joint_ae"] = time.time() - t0
        _log("joint AE: final mse %.5f, latent scales %s (%.1f s)", joint_mse,
             np.round(np.asarray(joint_ae.scales()), 3), stage_s["joint_ae"])

    t0 = time.time()
    val = validate_evaluator(c, ae, test_rows, joint_ae)
    stage_s["evaluator_validation"] = time.time() - t0
    _log("evaluator: renders min %.3f, reconstructions min %.3f, drafts rejected %.3f, "
         "refinement AUC %.3f", _min_tag(val["renders"]), _min_tag(val["reconstructions"]),
         val["drafts_rejected"], val["refinement_auc"])

    arms, train_logs, cost = {}, {}, {}
    for name in c.arms:
        joint = baselines.arm(name).encoder == "joint"
        arm_latents, arm_ae = (joint_latents, joint_ae) if joint else (latents, ae)
        t0 = time.time()
        graphdef, ema, logs = train_arm(c, name, arm_latents, text_ids, workdir)
        stage_s[f"train_{name}"] = time.time() - t0
        train_logs[name] = {"final_loss": float(np.mean(logs["loss"][-100:])),
                            "loss_curve": logs["loss"][:: max(1, len(logs["loss"]) // 50)],
                            "s_per_step": float(logs["step_s"]), "steps": arm_steps(c, name)}
        cost[name] = step_cost(c, name, arm_latents, text_ids)
        t0 = time.time()
        key = jax.random.fold_in(jax.random.key(int(c.seed)), 303)  # same noise for all arms
        arms[name] = evaluate_arm(c, name, graphdef, ema, arm_ae, test_rows, val_rows, key)
        stage_s[f"eval_{name}"] = time.time() - t0
        _log("%s: Overall %.3f (%s) train %.0f s, eval %.0f s", name,
             arms[name]["geneval"]["all"]["overall"],
             ", ".join(f"{t} {arms[name]['geneval']['all'][t]:.2f}" for t in scenes.TAGS),
             stage_s[f"train_{name}"], stage_s[f"eval_{name}"])

    metrics_out = {
        "evaluator": {k: v for k, v in val.items() if k != "examples"},
        "arms": {n: {k: v for k, v in a.items() if k not in ("images", "correct")}
                 for n, a in arms.items()},
        "train": train_logs,
        "flops_per_step": {n: v["flops"] for n, v in cost.items()},
        "train_flops": {n: v["flops"] * arm_steps(c, n) for n, v in cost.items()},
        "ae": {"final_mse": ae_mse, "latent_scale": float(ae.latent_scale[...])},
        **({"joint_ae": {"final_mse": joint_mse,
                         "latent_scales": np.asarray(joint_ae.scales()).tolist()}}
           if joint_ae is not None else {}),
        "stage_s": stage_s,
        "n_test_prompts": len(test_rows),
        "n_heldout_test_prompts": int(sum(m["heldout"] for m in test_rows)),
    }
    cl = report.claims(metrics_out)
    figures = []
    if distributed.is_primary():
        figures = report.figures(workdir, metrics_out, arms, test_rows, val["examples"])
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed, config=c,
                                 metrics=metrics_out, claims=cl, runtime_s=runtime,
                                 figures=figures)
    if distributed.is_primary():
        print(report.arms_table(metrics_out))
        print(results.claims_table(cl))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": metrics_out,
            "claims": [x.to_dict() for x in cl], "runtime_s": runtime, "results_path": path}


def _min_tag(by_style: dict) -> float:
    return float(min(v[t] for v in by_style.values() for t in scenes.TAGS if t in v))
