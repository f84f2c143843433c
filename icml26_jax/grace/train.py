"""The GRACE experiment (spec §Experiment): every arm trained, quantised, exported and
evaluated on DigitGrid-VQA, and the claims computed from what was measured.

Phases (each resumable through ``core.checkpoint``):
  1. the vision tower is pre-trained on digit classification and frozen;
  2. ``teacher_fp``: the larger VLM (projector + LLM) trained with CE;
  3. the FP student for T_s steps (the checkpoint QAT starts from); ``student_fp`` continues
     it for T_q steps with CE under the QAT optimiser, in floating point;
  4. ``ptq_rtn``: ``student_fp`` with MSE-initialised INT4 scales, round to nearest;
  5. ``qat_ce``, ``qat_dkd`` and ``grace`` from the T_s checkpoint, T_q steps each, same data
     order (the batch of step t depends only on (seed, t));
  6. ``grace`` is exported to packed INT4, saved and restored with orbax, and evaluated.
"""

from __future__ import annotations

import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import nnx

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.flags import as_tuple
from icml26_jax.core.optim import promotion_safe
from icml26_jax.grace import baselines, controller, data, export, losses, lsq
from icml26_jax.grace import model as model_lib
from icml26_jax.grace import report
from icml26_jax.grace.configs import ARMS

PAPER = "grace"
QAT_ARMS = ("qat_ce", "qat_dkd", "grace")
MODES = {"qat_ce": "ce", "qat_dkd": "dkd", "grace": "grace"}


# --------------------------------------------------------------------------- config


def normalise_config(c) -> None:
    """Flag strings to their types (``--config.arms=a,b``, ``--config.tau=3``)."""
    c.arms = as_tuple(c.arms, str, name="arms")
    c.seeds = as_tuple(c.seeds, int, name="seeds")


def validate_config(c) -> None:
    """``ValueError`` naming the field for every bad value."""
    bad = [a for a in c.arms if a not in ARMS]
    if bad or not c.arms:
        raise ValueError(f"arms must be a non-empty subset of {', '.join(ARMS)}, got {c.arms}")
    lsq.check_bits(c.bits)
    for name in ("d", "hidden"):
        lsq.check_group(int(c.group), int(c.student[name]))
    for k in ("vision_steps", "teacher_steps", "student_steps", "qat_steps", "batch",
              "n_train", "n_val", "n_test", "chunk", "eval_batch"):
        if int(c[k]) < 1:
            raise ValueError(f"{k} must be >= 1, got {c[k]}")
    for k in ("lr", "scale_lr", "fp_lr", "vision_lr", "dkd_T", "clip"):
        if not float(c[k]) > 0:
            raise ValueError(f"{k} must be > 0, got {c[k]}")
    if float(c.omega) < 0:
        raise ValueError(f"omega must be >= 0, got {c.omega}")
    if not 0.0 <= float(c.rcka_warmup_frac) <= 1.0:
        raise ValueError(f"rcka_warmup_frac must be in [0, 1], got {c.rcka_warmup_frac}")
    ib_config(c)  # validates tau, eta, beta_init / beta_min / beta_max


def _tau(c):
    """``config.tau`` (a string field: ``'auto'`` or a number) as the controller takes it."""
    if str(c.tau) == "auto":
        return "auto"
    try:
        return float(c.tau)
    except ValueError:
        raise ValueError(f"tau must be a positive number or 'auto', got {c.tau!r}") from None


def ib_config(c) -> controller.IBConfig:
    return controller.IBConfig(
        tau=_tau(c),
        eta=None if float(c.eta) < 0 else float(c.eta), beta_init=float(c.beta_init),
        beta_min=float(c.beta_min), beta_max=float(c.beta_max),
        auto_steps=int(c.tau_auto_steps), auto_frac=float(c.tau_auto_frac),
        qat_steps=int(c.qat_steps))


# --------------------------------------------------------------------------- models


def quant_config(c) -> lsq.QuantConfig:
    return lsq.QuantConfig(bits=int(c.bits), group=int(c.group))


def build(c, which: str, *, quant: bool = False, seed: int | None = None):
    """A fresh ``model.VLM`` (``which`` in {'teacher', 'student'}); ``quant`` gives the
    student LSQ linears."""
    m = c[which]
    return model_lib.VLM(d_v=int(c.d_v), vision_layers=int(c.vision_layers), d=int(m.d),
                         layers=int(m.layers), heads=int(m.heads), hidden=int(m.hidden),
                         quant=quant_config(c) if quant else None,
                         rngs=nnx.Rngs(int(c.seed if seed is None else seed)))


def split_trainable(model):
    """``(graphdef, frozen, trainable)``: the vision tower's parameters are frozen, the
    projector's and the LLM's are trained."""
    return nnx.split(model, nnx.PathContains("vision"), nnx.Param)


def merge(graphdef, frozen, trainable):
    return nnx.merge(graphdef, frozen, trainable)


# --------------------------------------------------------------------------- losses


def masked_ce(logits, labels, mask):
    """Mean cross-entropy over the answer-predicting positions."""
    lp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    nll = -jnp.take_along_axis(lp, labels[..., None], -1)[..., 0]
    m = mask.astype(jnp.float32)
    return jnp.sum(nll * m) / jnp.maximum(jnp.sum(m), 1.0)


def _finite(x):
    return jnp.where(jnp.isfinite(x), x, 0.0)


def make_train_step(mode: str, c, graphdef, tx, teacher=None):
    """The jit-able QAT / FP step ``(trainable, opt_state, ib_state, frozen, batch, step) ->
    (trainable, opt_state, ib_state, logs)``.

    ``mode``: ``'ce'`` (task loss only), ``'dkd'`` (+ ungated DKD at fixed beta_0, no RCKA)
    or ``'grace'`` (+ gated DKD weighted by the controller's beta and omega RCKA).
    ``teacher``: ``(graphdef, frozen, trainable)`` of the frozen teacher (modes dkd, grace).
    Loss: L = CE + beta s_dkd(t) L_GDKD + omega s_rcka(t) L_RCKA, s(t) = min(1, t / warmup);
    non-finite GDKD / RCKA are zeroed for the step.
    """
    if mode not in ("ce", "dkd", "grace"):
        raise ValueError(f"mode must be one of ce, dkd, grace, got {mode!r}")
    if mode != "ce" and teacher is None:
        raise ValueError(f"mode={mode!r} needs the teacher")
    cfg = ib_config(c)
    rcka_warm = max(1.0, float(c.rcka_warmup_frac) * int(c.qat_steps))
    dkd_warm = float(c.dkd_warmup)

    def loss_fn(trainable, frozen, batch, step, beta):
        out = merge(graphdef, frozen, trainable)(batch.images, batch.tokens)
        ce = masked_ce(out.logits, batch.labels, batch.loss_mask)
        zero = jnp.zeros((), jnp.float32)
        logs = {"ce": ce, "gdkd": zero, "rcka": zero, "cka": zero, "gate_mean": zero}
        if mode == "ce":
            return ce, logs
        t_out = jax.lax.stop_gradient(merge(*teacher)(batch.images, batch.tokens))
        g = losses.gated_dkd(out.logits, t_out.logits, batch.labels, batch.loss_mask,
                             gate=mode == "grace", T=float(c.dkd_T),
                             alpha=float(c.dkd_alpha), beta=float(c.dkd_beta))
        gd = _finite(g.loss)
        s = jnp.asarray(step, jnp.float32)
        s_dkd = jnp.minimum(1.0, s / dkd_warm) if dkd_warm > 0 else 1.0
        loss = ce + beta * s_dkd * gd
        logs.update(gdkd=gd, gate_mean=g.gate_mean)
        if mode == "grace":
            r = losses.rcka(out.hidden_penult, t_out.hidden_penult, out.visual_mask)
            rl = _finite(r.loss)
            loss = loss + float(c.omega) * jnp.minimum(1.0, s / rcka_warm) * rl
            logs.update(rcka=rl, cka=r.mean_cka)
        return loss, logs

    def step_fn(trainable, opt_state, ib_state, frozen, batch, step):
        beta = ib_state.beta if mode == "grace" else jnp.asarray(cfg.beta_init, jnp.float32)
        (loss, logs), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            trainable, frozen, batch, step, beta)
        updates, opt_state = tx.update(grads, opt_state, trainable)
        trainable = optax.apply_updates(trainable, updates)
        if mode == "grace":
            ib_state = controller.ib_update(ib_state, logs["gdkd"], step, cfg)
        logs.update(loss=loss, beta=beta, ema=ib_state.ema, tau=ib_state.tau)
        return trainable, opt_state, ib_state, logs

    return step_fn


def qat_tx(c, steps: int):
    """AdamW on weights (base LR, weight decay) and Adam on ``log_scale`` (scale LR, no decay),
    3 % warmup + cosine, global-norm clip (``optax.multi_transform``)."""
    warm = max(1, int(float(c.warmup_frac) * steps))

    def sched(lr):
        return optax.warmup_cosine_decay_schedule(0.0, lr, warm, max(steps, warm + 1))

    def labels(tree):
        return jax.tree_util.tree_map_with_path(
            lambda p, _: "scale" if any(getattr(k, "key", None) == "log_scale" for k in p)
            else "weight", tree)

    return promotion_safe(optax.chain(
        optax.clip_by_global_norm(float(c.clip)),
        optax.multi_transform({"weight": optax.adamw(sched(float(c.lr)),
                                                     weight_decay=float(c.weight_decay)),
                               "scale": optax.adam(sched(float(c.scale_lr)))}, labels)))


def fp_tx(c, steps: int, lr: float | None = None):
    sched = optax.warmup_cosine_decay_schedule(0.0, float(lr or c.fp_lr), int(c.fp_warmup),
                                               max(steps, int(c.fp_warmup) + 1))
    return promotion_safe(optax.chain(optax.clip_by_global_norm(float(c.clip)),
                                      optax.adamw(sched, weight_decay=float(c.fp_weight_decay))))


# --------------------------------------------------------------------------- phases


def _stack(batches):
    return data.VQAData(*(np.stack(x) for x in zip(*batches)))


_DATA_KEYS = ("seed", "split_seed", "n_train", "batch", "chunk")
_VISION_KEYS = ("d_v", "vision_layers", "vision_steps", "vision_lr", "clip", "fp_warmup",
                "fp_weight_decay")
_FP_KEYS = ("fp_lr", "fp_warmup", "fp_weight_decay", "clip")
_QAT_KEYS = ("bits", "group", "lr", "scale_lr", "weight_decay", "warmup_frac", "clip",
             "qat_steps", "student_steps")
_DISTILL_KEYS = ("dkd_T", "dkd_alpha", "dkd_beta", "dkd_warmup", "omega", "rcka_warmup_frac",
                 "tau", "eta", "beta_init", "beta_min", "beta_max", "tau_auto_steps",
                 "tau_auto_frac", "teacher", "teacher_steps")


def phase_fingerprint(c, name: str, **extra) -> int:
    """The fingerprint of one phase: only the config fields that phase depends on, so that
    changing e.g. ``teacher_steps`` retrains the teacher and the distillation arms but restores
    the vision tower and the FP student."""
    keys = _DATA_KEYS + _VISION_KEYS
    if name == "teacher_fp":
        keys += _FP_KEYS + ("teacher", "teacher_steps")
    elif name != "vision":
        keys += _FP_KEYS + ("student", "student_steps")
        if name != "student_Ts":
            keys += _QAT_KEYS
        if name in ("qat_dkd", "grace"):
            keys += _DISTILL_KEYS
    d = c.to_dict()
    return checkpoint.config_fingerprint({"name": name, "extra": extra,
                                          "config": {k: d[k] for k in keys}})


LOG_KEYS = ("loss", "ce", "gdkd", "rcka", "cka", "gate_mean", "beta", "ema", "tau")


def make_chunk(mode: str, c, graphdef, tx, teacher=None):
    """The jitted chunk of :func:`train_phase`: ``(trainable, opt_state, ib_state, frozen,
    batches [n, ...], steps [n]) -> (trainable, opt_state, ib_state, logs {k: [n]})``, a
    ``lax.scan`` of ``make_train_step(mode)``; the batches are arguments (never closed over:
    a closed-over array is baked into the program as a constant)."""
    step_fn = make_train_step(mode, c, graphdef, tx, teacher)

    def chunk(trainable, opt_state, ib_state, frozen, batches, steps_):
        def body(carry, xs):
            b, s = xs
            p, o, ib = carry
            p, o, ib, lg = step_fn(p, o, ib, frozen, b, s)
            return (p, o, ib), {k: lg[k] for k in LOG_KEYS}
        (p, o, ib), lg = jax.lax.scan(body, (trainable, opt_state, ib_state), (batches, steps_))
        return p, o, ib, lg

    return jax.jit(chunk, donate_argnums=(0, 1))


def train_phase(c, name, ckpt_dir, graphdef, frozen, trainable, tx, mode, train_data, steps,
                *, teacher=None, step_offset: int = 0, ib_state=None):
    """Runs ``steps`` steps of ``make_train_step(mode)`` in checkpointed chunks (a ``lax.scan``
    per chunk); returns ``(trainable, ib_state, logs)``. ``step_offset`` shifts the data
    order (the batch of global step t is ``data.batch_at(..., t)``)."""
    program = make_chunk(mode, c, graphdef, tx, teacher)
    trainable = jax.tree.map(jnp.copy, trainable)  # the chunks donate it; callers keep theirs
    ib_state = ib_state if ib_state is not None else controller.ib_init(ib_config(c))
    keys = LOG_KEYS
    logs = {k: np.zeros((steps,), np.float32) for k in keys}

    def advance(state, logs, s0, n):
        p, o, ib = state
        bs = _stack([data.batch_at(train_data, int(c.batch), int(c.seed), step_offset + s)
                     for s in range(s0, s0 + n)])
        p, o, ib, lg = program(p, o, ib, frozen, bs, jnp.arange(s0, s0 + n))
        for k in keys:
            logs[k][s0:s0 + n] = np.asarray(lg[k])
        msg = f"loss {logs['loss'][s0:s0 + n].mean():.4f}"
        if mode == "grace":
            msg += f" beta {logs['beta'][s0 + n - 1]:.3f} cka {logs['cka'][s0:s0 + n].mean():.3f}"
        # Host arrays: every process trains the same model on its own device, and orbax
        # checkpoints host arrays (not one process's device arrays) in a multi-process job.
        return mesh_lib.to_host((p, o, ib)), msg

    fp = phase_fingerprint(c, name, mode=mode, steps=steps, step_offset=step_offset)
    (trainable, _, ib_state), logs = checkpoint.run_chunks(
        ckpt_dir, fingerprint=fp, state=(trainable, tx.init(trainable), ib_state), logs=logs,
        steps=steps, chunk=int(c.chunk), advance=advance, name=name)
    return trainable, ib_state, logs


def vision_tower(c) -> model_lib.VisionTower:
    """The fresh vision tower that :func:`pretrain_vision` trains."""
    return model_lib.VisionTower(int(c.d_v), int(c.vision_layers),
                                 rngs=nnx.Rngs(int(c.seed) + 1000))


def make_vision_chunk(graphdef, tx):
    """The jitted chunk of :func:`pretrain_vision`: ``(params, opt_state, images [n, B, ...],
    digits [n, B, 4]) -> (params, opt_state, loss [n])``, the batches as arguments."""
    def chunk(p, o, images, digits):
        def body(carry, xs):
            p, o = carry

            def loss_fn(p):
                lp = jax.nn.log_softmax(nnx.merge(graphdef, p).classify(xs[0]), -1)
                return -jnp.mean(jnp.take_along_axis(lp, xs[1][..., None], -1))
            loss, g = jax.value_and_grad(loss_fn)(p)
            u, o = tx.update(g, o, p)
            return (optax.apply_updates(p, u), o), loss
        (p, o), loss = jax.lax.scan(body, (p, o), (images, digits))
        return p, o, loss

    return jax.jit(chunk, donate_argnums=(0, 1))


def pretrain_vision(c, train_data, ckpt_dir):
    """The vision tower pre-trained to classify the 4 digits of a grid; returns its params."""
    graphdef, params = nnx.split(vision_tower(c), nnx.Param)
    tx = fp_tx(c, int(c.vision_steps), float(c.vision_lr))
    program = make_vision_chunk(graphdef, tx)

    def advance(state, logs, s0, n):
        bs = [data.batch_at(train_data, int(c.batch), int(c.seed) + 7, s)
              for s in range(s0, s0 + n)]
        p, o, loss = program(*state, np.stack([b.images for b in bs]),
                             np.stack([b.digits for b in bs]))
        logs["loss"][s0:s0 + n] = np.asarray(loss)
        return mesh_lib.to_host((p, o)), f"loss {np.asarray(loss).mean():.4f}"

    steps = int(c.vision_steps)
    fp = phase_fingerprint(c, "vision")
    (params, _), logs = checkpoint.run_chunks(
        ckpt_dir, fingerprint=fp, state=(params, tx.init(params)),
        logs={"loss": np.zeros((steps,), np.float32)}, steps=steps, chunk=int(c.chunk),
        advance=advance, name="vision")
    return params, logs


def with_vision(model, vision_params):
    """Loads the (shared, pre-trained) vision tower weights into ``model``."""
    nnx.update(model.vision, vision_params)
    return model


def quantised_from(c, fp_model_state, seed):
    """The INT4 student initialised from an FP student state: same weights, MSE-initialised
    group scales (spec: QAT starts from the converged FP student)."""
    q = build(c, "student", quant=True, seed=seed)
    nnx.update(q, fp_model_state)
    for _, m in nnx.iter_modules(q):
        if isinstance(m, lsq.QDense) and m.quant is not None:
            m.init_scales()
    return q


# --------------------------------------------------------------------------- evaluation


@functools.partial(jax.jit, static_argnums=0)
def _greedy(graphdef, frozen, trainable, images, prompt, start):
    return model_lib.greedy_answer(graphdef, (frozen, trainable), images, prompt, start)


@functools.partial(jax.jit, static_argnums=0)
def _logits(graphdef, frozen, trainable, images, tokens):
    return merge(graphdef, frozen, trainable)(images, tokens).logits


def evaluate(graphdef, frozen, trainable, d: data.VQAData, eval_batch: int) -> dict:
    """Exact-match accuracy (%) of greedy answers, overall and per template; the evaluation
    batches are sharded over every device (``core.mesh.batched``)."""
    prompt, start = data.prompt_of(d)
    mesh = mesh_lib.data_mesh()
    frozen, trainable = export.on_mesh(mesh, (frozen, trainable))
    pred = mesh_lib.batched(
        lambda im, pr, st: _greedy(graphdef, frozen, trainable, im, pr, st), len(start),
        eval_batch, d.images, prompt, start, mesh=mesh)
    per = {name: data.exact_match(pred[d.template == i], data.take(d, d.template == i))
           for i, name in enumerate(data.TEMPLATES)}
    return {"acc": data.exact_match(pred, d), "per_template": per}


def entropy_error(graphdef, frozen, trainable, d: data.VQAData, eval_batch: int) -> dict:
    """Teacher token entropy (T = 1) against teacher-forced token error on the answer
    positions; Pearson r and a 10-bin table (the paper's premise). The teacher's logits are
    computed in batches sharded over every device."""
    mesh = mesh_lib.data_mesh()
    frozen, trainable = export.on_mesh(mesh, (frozen, trainable))
    logits_all = mesh_lib.batched(
        lambda im, tok: _logits(graphdef, frozen, trainable, im, tok), len(d.tokens),
        eval_batch, d.images, d.tokens, mesh=mesh)
    H, err = [], []
    for s in range(0, len(d.tokens), eval_batch):
        logits = np.asarray(logits_all[s:s + eval_batch], np.float64)
        m = d.loss_mask[s:s + eval_batch]
        z = logits[m]
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        H.append(-(p * np.log(np.maximum(p, 1e-30))).sum(-1))
        err.append((z.argmax(-1) != d.labels[s:s + eval_batch][m]).astype(np.float64))
    H, err = np.concatenate(H), np.concatenate(err)
    r = float(np.corrcoef(H, err)[0, 1]) if H.std() > 0 and err.std() > 0 else float("nan")
    edges = np.quantile(H, np.linspace(0, 1, 11))
    idx = np.clip(np.searchsorted(edges, H, side="right") - 1, 0, 9)
    bins = [[float(H[idx == b].mean()), float(err[idx == b].mean()), int(np.sum(idx == b))]
            for b in range(10) if np.any(idx == b)]
    return {"pearson_r": r, "bins": bins, "n_tokens": int(len(H)),
            "token_error": float(err.mean())}


def _ckpt(workdir, *parts):
    return os.path.join(workdir, "ckpt", *parts)


# --------------------------------------------------------------------------- run


def run(config, workdir: str) -> dict:
    """Every arm, the export, the metrics, figures and claims; returns the results dict."""
    c = config
    normalise_config(c)
    validate_config(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    seed = int(c.seed)
    splits = data.load_digit_splits(int(c.split_seed))
    rng = np.random.default_rng((seed, 0))
    train_d = data.make_vqa(splits, "train", int(c.n_train), rng)
    val_d = data.make_vqa(splits, "val", int(c.n_val), rng)
    test_d = data.make_vqa(splits, "test", int(c.n_test), rng)
    times, m, arms = {}, {"arms": {}}, set(c.arms)
    eb = int(c.eval_batch)

    t0 = time.time()
    vision, vlogs = pretrain_vision(c, train_d, _ckpt(workdir, "vision"))
    times["vision"] = time.time() - t0

    # Teacher (always trained when a distillation arm runs).
    t0 = time.time()
    teacher_model = with_vision(build(c, "teacher", seed=seed + 1), vision)
    tg, tfz, ttr = split_trainable(teacher_model)
    ttr, _, tlogs = train_phase(c, "teacher_fp", _ckpt(workdir, "teacher"), tg, tfz, ttr,
                                fp_tx(c, int(c.teacher_steps)), "ce", train_d,
                                int(c.teacher_steps))
    teacher = (tg, tfz, ttr)
    times["teacher_fp"] = time.time() - t0
    m["arms"]["teacher_fp"] = evaluate(tg, tfz, ttr, test_d, eb)
    m["entropy_error"] = entropy_error(tg, tfz, ttr, val_d, eb)

    # FP student: T_s steps, then T_q more under the QAT optimiser (student_fp).
    t0 = time.time()
    student = with_vision(build(c, "student", seed=seed + 2), vision)
    sg, sfz, s_tr = split_trainable(student)
    s_tr, _, slogs = train_phase(c, "student_Ts", _ckpt(workdir, "student_Ts"), sg, sfz, s_tr,
                                 fp_tx(c, int(c.student_steps)), "ce", train_d,
                                 int(c.student_steps))
    Tq, Ts = int(c.qat_steps), int(c.student_steps)
    fp_tr, _, _ = train_phase(c, "student_fp", _ckpt(workdir, "student_fp"), sg, sfz, s_tr,
                              qat_tx(c, Tq), "ce", train_d, Tq, step_offset=Ts)
    times["student_fp"] = time.time() - t0
    m["arms"]["student_fp"] = evaluate(sg, sfz, fp_tr, test_d, eb)
    m["arms"]["student_Ts"] = evaluate(sg, sfz, s_tr, test_d, eb)

    def quantised(fp_trainable):
        return split_trainable(quantised_from(
            c, nnx.state(nnx.merge(sg, sfz, fp_trainable), nnx.Param), seed + 2))

    if "ptq_rtn" in arms:
        qg, qfz, q_tr = quantised(fp_tr)
        q_tr = baselines.ptq_rtn(q_tr, int(c.bits), int(c.group))
        m["arms"]["ptq_rtn"] = evaluate(qg, qfz, q_tr, test_d, eb)

    traces, final = {}, {}
    for arm in QAT_ARMS:
        if arm not in arms:
            continue
        t0 = time.time()
        qg, qfz, q_tr = quantised(s_tr)
        q_tr, ib, lg = train_phase(c, arm, _ckpt(workdir, arm), qg, qfz, q_tr, qat_tx(c, Tq),
                                   MODES[arm], train_d, Tq, teacher=teacher, step_offset=Ts)
        times[arm] = time.time() - t0
        m["arms"][arm] = evaluate(qg, qfz, q_tr, test_d, eb)
        traces[arm], final[arm] = lg, (qg, qfz, q_tr)
        logging.info("%s: acc %.2f (%.0f s)", arm, m["arms"][arm]["acc"], times[arm])

    # INT4 export of the GRACE student (or the last QAT arm run): pack, orbax round trip,
    # evaluate the packed model against fake-quant with the same baked scales.
    exp_arm = "grace" if "grace" in final else (list(final)[-1] if final else None)
    if exp_arm is not None:
        m["export"] = export.export_and_check(c, *final[exp_arm], sg, sfz, fp_tr, test_d, eb,
                                              _ckpt(workdir, "int4"))
        m["export"]["arm"] = exp_arm
    m["traces"] = {a: {k: v.tolist() for k, v in lg.items()} for a, lg in traces.items()}
    m["phase_s"] = times
    m["train_loss_end"] = {"vision": float(vlogs["loss"][-20:].mean()),
                           "teacher": float(tlogs["loss"][-20:].mean()),
                           "student_Ts": float(slogs["loss"][-20:].mean())}
    cl = claims(m, c)
    figs = report.figures(m, workdir)
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=seed, config=c,
                                 metrics=m, claims=cl, runtime_s=time.time() - t_start,
                                 figures=figs)
    logging.info("\n%s", report.tables(m))
    logging.info("\n%s", results.claims_table(cl))
    logging.info("results: %s (%.0f s)", path, time.time() - t_start)
    return results.load_results(workdir) if path else {"metrics": m, "claims": cl}


# --------------------------------------------------------------------------- claims


def claims(m: dict, c) -> list[results.Claim]:
    acc = lambda a: m["arms"].get(a, {}).get("acc", float("nan"))  # noqa: E731
    out = [
        results.at_least("teacher_gap", acc("teacher_fp") - acc("student_fp"), 5),
        results.at_least("int4_ptq_hurts", acc("student_fp") - acc("ptq_rtn"), 3),
        results.at_least("entropy_predicts_error", m["entropy_error"]["pearson_r"], 0.2),
        results.at_least("int4_grace_matches_fp", acc("grace") - acc("student_fp"), 0),
        results.at_least("grace_beats_qat_ce", acc("grace") - acc("qat_ce"), 2),
        results.at_least("grace_beats_ptq", acc("grace") - acc("ptq_rtn"), 5),
        results.at_most("grace_near_teacher", acc("teacher_fp") - acc("grace"), 4),
    ]
    ex = m.get("export", {})
    out.append(results.at_least("int4_packed_memory", ex.get("ratio_bf16_over_packed",
                                                            float("nan")), 3.5))
    out.append(results.at_most("packed_matches_fake_quant",
                               ex.get("max_abs_logit_diff", float("nan")), 1e-4))
    tr = m["traces"].get("grace")
    if tr is not None:
        beta, tau = np.asarray(tr["beta"]), np.asarray(tr["tau"])
        after = tau > 0
        inside = (beta > float(c.beta_min)) & (beta < float(c.beta_max))
        frac = float(np.mean(inside[after])) if after.any() else float("nan")
        one_minus = 1.0 - np.asarray(tr["cka"])
        k = max(1, int(0.05 * len(one_minus)))
        first, last = one_minus[:k].mean(), one_minus[-k:].mean()
        drop = float((first - last) / first) if first > 0 else float("nan")
    else:
        frac = drop = float("nan")
    out.append(results.at_least("beta_not_saturated", frac, 0.5))
    out.append(results.at_least("rcka_decreases", drop, 0.2))
    return out


__all__ = ["run", "make_train_step", "build", "evaluate", "claims"]
