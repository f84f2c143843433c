"""Baguan-TS pretraining on the synthetic prior and the experiment driver.

``pretrain(config, workdir)`` trains the trunk (context-overfitting off; 25 % of its batches
in the 2D tabular mode), then forks it into the ``co_on`` branch (injection and reliability
bias on: the main model) and the ``co_off`` branch (both off), fed identical batch streams.
Every stage checkpoints with orbax through ``core.checkpoint.run_chunks`` and resumes; the
batch of step t is ``make_batch(fold_in(key, t))`` so a resumed stage sees the same data.

``run(config, workdir)`` pretrains (or restores), evaluates every method on the held-out
synthetic and real tasks (:mod:`evaluate`), writes ``results.json`` with the claims, the
figures, and the reloadable model (``<workdir>/model``).
"""

from __future__ import annotations

import functools
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import nnx

from icml26_jax.baguan_ts import batches, losses, prior
from icml26_jax.baguan_ts import model as model_lib
from icml26_jax.baguan_ts.configs import LOSSES, MODES, RAGS
from icml26_jax.baguan_ts.predict import InferenceConfig
from icml26_jax.core import checkpoint
from icml26_jax.core.flags import as_tuple
from icml26_jax.core.optim import promotion_safe

BRANCHES = ("co_on", "co_off")


# --------------------------------------------------------------------------- config


def normalise_config(c) -> None:
    """Flag strings to their types (``--config.real_tasks=nile,co2``)."""
    c.train.horizons = as_tuple(c.train.horizons, int, name="train.horizons")
    c.real_tasks = as_tuple(c.real_tasks, str, name="real_tasks")
    c.seeds = as_tuple(c.seeds, int, name="seeds")


def validate_config(c) -> None:
    """``ValueError`` naming the field for every bad value."""
    from icml26_jax.baguan_ts import data_real

    model_config(c)  # validates the model fields
    inference_config(c)  # validates M, K, period, mF, rag, mode, context_len
    for k in ("trunk_steps", "batch", "chunk", "warmup"):
        if int(c.train[k]) < (0 if k in ("trunk_steps", "warmup") else 1):
            raise ValueError(f"train.{k} must be >= 1, got {c.train[k]}")
    if int(c.train.branch_steps) < 0:
        raise ValueError(f"train.branch_steps must be >= 0, got {c.train.branch_steps}")
    if not c.train.horizons or any(h < 1 or h >= int(c.M) for h in c.train.horizons):
        raise ValueError(f"train.horizons must be ints in [1, M={c.M}), got {c.train.horizons}")
    for k in ("frac_2d", "p_k0", "drop_p"):
        if not 0.0 <= float(c.train[k]) <= 1.0:
            raise ValueError(f"train.{k} must be in [0, 1], got {c.train[k]}")
    if not 0.0 <= float(c.co_inject_p) <= 1.0:
        raise ValueError(f"co_inject_p must be in [0, 1], got {c.co_inject_p}")
    if c.loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {c.loss!r}")
    if int(c.bank_size) < 1:
        raise ValueError(f"bank_size must be >= 1, got {c.bank_size}")
    bad = [t for t in c.real_tasks if t not in data_real.REAL_TASKS]
    if bad:
        raise ValueError(f"real_tasks must be a subset of {data_real.REAL_TASKS}, got {bad}")
    if int(c.eval_workers) < 0:
        raise ValueError(f"eval_workers must be >= 0, got {c.eval_workers}")
    if int(c.n_synthetic) < 1:
        raise ValueError(f"n_synthetic must be >= 1, got {c.n_synthetic}")
    if int(c.context_len) < int(c.M) + max(c.train.horizons):
        raise ValueError(f"context_len must be >= M + max(train.horizons), got {c.context_len}")


def model_config(c, reliability_bias: bool = False) -> model_lib.ModelConfig:
    """The ``ModelConfig`` of ``config.model`` (validated by ``ModelConfig``)."""
    m = c.model
    return model_lib.ModelConfig(d=int(m.d), heads=int(m.heads), layers=int(m.layers),
                                 ffn=int(m.ffn), patch=int(m.patch),
                                 feat_id_dim=int(m.feat_id_dim), bins=int(m.bins),
                                 head_hidden=int(m.head_hidden),
                                 reliability_bias=bool(reliability_bias))


def inference_config(c, **overrides) -> InferenceConfig:
    """The ``InferenceConfig`` of the run (``rag``/``mode``/``K``/... overridable)."""
    if c.rag not in RAGS:
        raise ValueError(f"rag must be one of {RAGS}, got {c.rag!r}")
    if c.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {c.mode!r}")
    kw = dict(M=int(c.M), K=int(c.K), period=int(c.period), mF=int(c.mF), rag=str(c.rag),
              mode=str(c.mode), antisymmetric=bool(c.antisymmetric),
              mask_ratio=float(c.mask_ratio), context_len=int(c.context_len))
    kw.update(overrides)
    return InferenceConfig(**kw)


def batch_config(c, co_inject_p: float = 0.0) -> batches.BatchConfig:
    return batches.BatchConfig(batch=int(c.train.batch), M=int(c.M), K=int(c.K),
                               period=int(c.period), context_len=int(c.context_len),
                               drop_p=float(c.train.drop_p), p_k0=float(c.train.p_k0),
                               co_inject_p=float(co_inject_p))


def prior_config(c) -> prior.PriorConfig:
    return prior.PriorConfig(mini=bool(c.mini_prior))


# --------------------------------------------------------------------------- training


def official_lr(n_params: int) -> float:
    """The official LR heuristic: 0.003239 - 0.0001395 ln(#params)."""
    return 0.003239 - 0.0001395 * math.log(n_params)


def make_tx(c, steps: int, n_params: int):
    """AdamW (wd 0.01), clipping at 1.0, 100 warm-up steps then cosine decay."""
    lr = float(c.train.lr) if float(c.train.lr) > 0 else official_lr(n_params)
    warm = min(int(c.train.warmup), max(steps - 1, 0))
    return _tx(lr, warm, max(steps, warm + 1), float(c.train.clip),
               float(c.train.weight_decay))


@functools.lru_cache(maxsize=None)
def _tx(lr, warm, steps, clip, weight_decay):
    # Cached: the transformation is a static argument of the jitted step, so equal settings
    # must give the same object for the compiled step to be reused (resume, repeated runs).
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, warm, steps)
    return promotion_safe(optax.chain(optax.clip_by_global_norm(clip),
                                      optax.adamw(sched, weight_decay=weight_decay)))


def loss_of(kind: str, logits, labels, borders):
    """Mean training loss over the horizon: bar NLL (default), discrete CRPS, or both."""
    if kind == "nll":
        return jnp.mean(losses.bar_nll(logits, labels, borders))
    if kind == "crps":
        return jnp.mean(losses.crps_discrete(logits, labels, borders))
    return jnp.mean(losses.bar_nll(logits, labels, borders)
                    + losses.crps_discrete(logits, labels, borders))


def forward_batch(model, b: batches.Batch, H: int, mode: str):
    """Logits [B, H, bins] of a training batch in 3D or 2D mode."""
    if mode == "3d":
        return model(b.feat, b.targ, b.support_mask, b.sims, H=H, mode="3d",
                     feat_mask=b.feat_mask)
    feat, targ, rows, fm = batches.to_tabular(b, H)
    return model(feat, targ, rows, None, H=H, mode="2d", feat_mask=fm, n_query=H)


@functools.partial(jax.jit, static_argnames=("graphdef", "tx", "bcfg", "H", "mode", "loss"),
                   donate_argnames=("params", "opt_state"))
def train_step(graphdef, params, opt_state, bank, key, *, tx, bcfg, H, mode, loss):
    """One optimizer step on ``make_batch(key)``; returns (params, opt_state, loss)."""
    b = batches.make_batch(key, bank, bcfg, H)

    def loss_fn(p):
        model = nnx.merge(graphdef, p)
        logits = forward_batch(model, b, H, mode)
        return loss_of(loss, logits, b.labels, losses.bar_borders(model.cfg.bins))

    value, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


def step_plan(c, step: int, trunk: bool) -> tuple[int, str]:
    """(H, mode) of a step: H alternates over ``train.horizons``; 2D with probability
    ``train.frac_2d`` in the trunk (a deterministic function of (seed, step))."""
    hs = c.train.horizons
    H = int(hs[step % len(hs)])
    if not trunk:
        return H, "3d"
    u = np.random.default_rng([int(c.seed), 7, step]).random()
    return H, ("2d" if u < float(c.train.frac_2d) else "3d")


def stage_fingerprint(c, name: str, steps: int) -> int:
    d = c.to_dict()
    keys = ("seed", "model", "bank_size", "mini_prior", "train", "M", "K", "period",
            "context_len", "loss") + (("co_inject_p", "reliability_bias") if name != "trunk"
                                      else ())
    return checkpoint.config_fingerprint({"stage": name, "steps": steps,
                                          "config": {k: d[k] for k in keys}})


def train_stage(c, name, workdir, bank, params, graphdef, *, steps, trunk, co_inject_p,
                key_base, n_params):
    """Runs one stage in checkpointed chunks; returns (params, loss log [steps])."""
    tx = make_tx(c, steps, n_params)
    bcfg = batch_config(c, co_inject_p)
    params = jax.tree.map(jnp.copy, params)  # the steps donate it; the caller keeps theirs

    def advance(state, logs, s0, n):
        p, o = state
        chunk_losses = []  # on device: the steps dispatch without waiting for the host
        for s in range(s0, s0 + n):
            # H and mode are static (shapes), so a chunk is a sequence of dispatched steps,
            # not one scanned program.
            H, mode = step_plan(c, s, trunk)
            p, o, lv = train_step(graphdef, p, o, bank, jax.random.fold_in(key_base, s),
                                  tx=tx, bcfg=bcfg, H=H, mode=mode, loss=str(c.loss))
            chunk_losses.append(lv)
        # One device -> host transfer per chunk.
        logs["loss"][s0:s0 + n] = np.asarray(jax.device_get(chunk_losses), np.float32)
        return (p, o), f"loss {logs['loss'][s0:s0 + n].mean():.4f}"

    (params, _), logs = checkpoint.run_chunks(
        os.path.join(workdir, "ckpt", name), fingerprint=stage_fingerprint(c, name, steps),
        state=(params, tx.init(params)), logs={"loss": np.zeros((steps,), np.float32)},
        steps=steps, chunk=int(c.train.chunk), advance=advance, name=name)
    return params, logs["loss"]


def build(c, reliability_bias: bool, seed: int):
    """A fresh ``BaguanTS`` split into (graphdef, params)."""
    model = model_lib.BaguanTS(model_config(c, reliability_bias), rngs=nnx.Rngs(seed))
    return nnx.split(model, nnx.Param)


def bank_to_device(bank: prior.Bank) -> prior.Bank:
    return prior.Bank(*(jnp.asarray(x) for x in bank))


def pretrain(c, workdir: str, bank=None) -> dict:
    """Trunk, then the co_on / co_off branches (spec §Method "Context-overfitting").

    Returns ``{"graphdefs": {name: graphdef}, "params": {name: params}, "loss": {name:
    [steps]}, "n_params", "times"}`` with names ``trunk`` and, when ``train.branch_steps >
    0``, ``co_on`` and ``co_off``.
    """
    times = {}
    t0 = time.time()
    if bank is None:
        bank = prior.make_bank(int(c.seed), int(c.bank_size), prior_config(c))
    short = int(np.sum(bank.length < int(c.context_len) + max(c.train.horizons)))
    if short:
        raise ValueError(f"{short} bank tasks are shorter than context_len + H; lower "
                         "context_len")
    bank = bank_to_device(bank)
    times["bank"] = time.time() - t0
    key = jax.random.key(int(c.seed))
    g_trunk, p_trunk = build(c, False, int(c.seed))
    n_params = model_lib.count_params(p_trunk)
    t0 = time.time()
    p_trunk, loss_trunk = train_stage(
        c, "trunk", workdir, bank, p_trunk, g_trunk, steps=int(c.train.trunk_steps),
        trunk=True, co_inject_p=0.0, key_base=jax.random.fold_in(key, 0), n_params=n_params)
    times["trunk"] = time.time() - t0
    out = {"graphdefs": {"trunk": g_trunk}, "params": {"trunk": p_trunk},
           "loss": {"trunk": loss_trunk}, "n_params": n_params, "times": times}
    steps = int(c.train.branch_steps)
    if steps == 0:
        return out
    branch_key = jax.random.fold_in(key, 1)  # identical batch streams for both branches
    for name, co in (("co_on", True), ("co_off", False)):
        g, p = build(c, co and bool(c.reliability_bias), int(c.seed))
        model = nnx.merge(g, p)
        nnx.update(model, p_trunk)  # a new reliability-bias alpha keeps its init (0)
        g, p = nnx.split(model, nnx.Param)
        t0 = time.time()
        p, lv = train_stage(c, name, workdir, bank, p, g, steps=steps, trunk=False,
                            co_inject_p=float(c.co_inject_p) if co else 0.0,
                            key_base=branch_key, n_params=n_params)
        times[name] = time.time() - t0
        out["graphdefs"][name], out["params"][name], out["loss"][name] = g, p, lv
    return out


def main_model(pre: dict) -> str:
    """The stage the experiment evaluates as Baguan-TS: co_on when branches ran."""
    return "co_on" if "co_on" in pre["params"] else "trunk"



# --------------------------------------------------------------------------- run


def save_model(workdir: str, graphdef, params, c) -> str:
    """Saves the pretrained forecaster with orbax (``<workdir>/model``) so the benchmark,
    the colab and users reload it instead of retraining."""
    path = os.path.join(workdir, "model")
    pure = jax.tree.map(np.asarray, nnx.to_pure_dict(params))
    checkpoint.save(path, 0, {"params": pure, "model": c.model.to_dict(),
                              "reliability_bias": int(bool(c.reliability_bias))})
    return path


def load_model(workdir_or_path: str):
    """Reloads a forecaster saved by :func:`run` -> ``(graphdef, params, ModelConfig)``.

    A user then forecasts a new series without retraining:
    ``predict.forecast(graphdef, params, X_train, y_train, X_test, InferenceConfig(), key)``.
    """
    path = workdir_or_path
    if os.path.isdir(os.path.join(path, "model")):
        path = os.path.join(path, "model")
    saved = checkpoint.restore_latest(path)
    if saved is None:
        raise ValueError(f"no saved Baguan-TS model under {workdir_or_path}")
    state = saved[1]
    cfg = model_lib.ModelConfig(**{k: int(v) for k, v in state["model"].items()},
                                reliability_bias=bool(int(state["reliability_bias"])))
    graphdef, params = nnx.split(model_lib.BaguanTS(cfg, rngs=nnx.Rngs(0)), nnx.Param)
    nnx.replace_by_pure_dict(params, jax.tree.map(jnp.asarray, state["params"]))
    return graphdef, params, cfg


def run(config, workdir: str) -> dict:
    """Pretraining, evaluation, claims, figures and the saved model; returns results."""
    from icml26_jax.baguan_ts import evaluate, report
    from icml26_jax.core import distributed, results

    c = config
    normalise_config(c)
    validate_config(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    pre = pretrain(c, workdir)
    main = main_model(pre)
    save_model(workdir, pre["graphdefs"][main], pre["params"][main], c)
    icfg = inference_config(c)
    key = jax.random.key(int(c.seed) + 17)
    t0 = time.time()
    m = evaluate.evaluate(c, pre, main, icfg, key)
    times = dict(pre["times"])
    times["evaluate"] = time.time() - t0
    cl, extra = evaluate.claims(c, m, jax.random.fold_in(key, 1))
    m.update(extra)
    m["mean_wql"] = {split: {meth: float(np.mean([t["wql"] for t in per.values()]))
                             for meth, per in m[split].items()}
                     for split in ("synthetic", "real")}
    m["n_params"] = int(pre["n_params"])
    m["main_model"] = main
    m["loss"] = {k: v.tolist() for k, v in pre["loss"].items()}
    m["stage_s"] = times
    logging.info("\n%s", report.tables(m))
    logging.info("\n%s", results.claims_table(cl))
    figs = report.figures(m, workdir)
    path = results.write_results(workdir, paper="baguan_ts", variant=c.variant,
                                 seed=int(c.seed), config=c.to_dict(), metrics=m, claims=cl,
                                 runtime_s=time.time() - t_start, figures=figs)
    logging.info("results: %s (%.0f s; stages %s)", path, time.time() - t_start,
                 {k: round(v) for k, v in times.items()})
    distributed.barrier("baguan_ts_results")  # process 0 wrote results.json
    return results.load_results(workdir)
