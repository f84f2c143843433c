"""The Gradient Smoothing experiment: replicas (seed x arm x lr) as one vmapped program.

A *replica* is one LM trained from the initial weights of its seed, on the batches of its
seed (paired design: data order depends on the seed only), by the optimiser of its arm at
its learning rate. The arm enters as data: a ``[L, L]`` depth operator (identity for
``base``, ``S_a`` for ``smoothed``, ``P^T S_a P`` for ``permuted``), and the learning rate as
a scalar array, so every replica of a stage is ONE compiled program (``vmap`` over
replicas, ``lax.scan`` over ``config.log_every`` steps), checkpointed after every chunk.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import nnx

from icml26_jax.core import checkpoint, distributed
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.grad_smoothing import baselines, metrics, model, transform
from icml26_jax.lm import hmm as hmm_lib
from icml26_jax.lm import train as lm_train

PAPER = "grad_smoothing"
ARMS = ("base", "smoothed", "permuted")
VAL_SEED = 10_000
PROBE_SEED = 10_001
PERMUTATION_SEED = 0


# --------------------------------------------------------------------------- config


def validate_config(c) -> None:
    """ValueError naming the bad field and the allowed values."""
    if c.base not in transform.BASES:
        raise ValueError(f"config.base={c.base!r}; allowed: {', '.join(transform.BASES)}")
    if c.mode not in transform.MODES:
        raise ValueError(f"config.mode={c.mode!r}; allowed: {', '.join(transform.MODES)}")
    if not 0.0 <= float(c.alpha) <= 1.0:
        raise ValueError(f"config.alpha must be in [0, 1], got {c.alpha}")
    for name in ("depth", "steps", "log_every", "batch_size", "seq_len", "val_size",
                 "probe_size", "radius", "timing_steps"):
        v = c[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"config.{name} must be a positive integer, got {v!r}")
    if c.depth < 4:
        raise ValueError(f"config.depth must be >= 4 (smoothing over 2-3 blocks averages "
                         f"everything), got {c.depth}")
    if c.steps % c.log_every:
        raise ValueError(f"config.steps={c.steps} must be a multiple of "
                         f"config.log_every={c.log_every}")
    if not list(c.lrs) or any(not float(x) > 0 for x in c.lrs):
        raise ValueError(f"config.lrs must be positive learning rates, got {list(c.lrs)}")
    if not list(c.eval_seeds):
        raise ValueError("config.eval_seeds must name at least one seed")


def language(c) -> hmm_lib.HMM:
    h = c.hmm
    return hmm_lib.make_hmm(h.num_states, h.vocab_size, seed=h.seed,
                            trans_concentration=h.concentration,
                            emit_concentration=h.concentration,
                            num_successors=h.num_successors, num_emissions=h.num_emissions)


def lm_config(c):
    m = c.model
    return model.lm_config(c.hmm.vocab_size, c.depth, m.d_model, m.num_heads, m.mlp_ratio)


def arm_matrix(c, arm: str) -> np.ndarray:
    """The depth operator of an arm, ``[L, L]``."""
    if arm == "base":
        return np.eye(c.depth)
    if arm == "smoothed":
        return transform.smoothing_matrix(c.depth, c.alpha, c.radius)
    if arm == "permuted":
        return transform.smoothing_matrix(c.depth, c.alpha, c.radius,
                                          baselines.permuted_control(c.depth, PERMUTATION_SEED))
    raise ValueError(f"arm={arm!r}; allowed: {', '.join(ARMS)}")


def schedule(c, lr, steps: int):
    """5% linear warm-up, then cosine to ``final_lr_frac`` of the peak; ``lr`` may be traced."""
    o = c.opt
    warm = max(1, int(round(o.warmup_frac * steps)))
    shape = optax.warmup_cosine_decay_schedule(0.0, 1.0, warm, max(steps, warm + 1),
                                               end_value=o.final_lr_frac)
    return lambda count: lr * shape(count)


def make_tx(c, lr, matrix, steps: int) -> optax.GradientTransformation:
    """Global-norm clip of the raw gradients, then the (smoothed) base optimiser."""
    o = c.opt
    tx = transform.smoothed_optimizer(
        c.base, schedule(c, lr, steps), mode=c.mode, matrix=matrix,
        weight_decay=o.weight_decay, b1=o.b1, b2=o.b2, eps=o.eps, momentum=o.momentum,
        muon_beta=o.muon_beta, adam_lr=schedule(c, o.adam_lr, steps))
    return optax.chain(optax.clip_by_global_norm(o.clip), tx)


# --------------------------------------------------------------------------- replicas


def build(c, seeds: list[int]):
    """Stacked LMs, replica n initialised from ``seeds[n]``: ``(graphdef, params, rest)``."""
    cfg = lm_config(c)
    graphdef, ps, rs = None, [], []
    for s in seeds:
        g, p, r = nnx.split(model.make_lm(cfg, nnx.Rngs(s)), nnx.Param, ...)
        graphdef = graphdef or g
        ps.append(p)
        rs.append(r)
    stack = lambda *xs: jnp.stack(xs)  # noqa: E731
    return graphdef, jax.tree.map(stack, *ps), jax.tree.map(stack, *rs)


def batches(c, lang, seeds: list[int], start: int, n: int) -> dict:
    """Next-token batches ``[n, R, B, T]`` for replicas of ``seeds``: a pure function of
    (seed, step), never of the arm or the learning rate."""
    uniq = sorted(set(seeds))
    per = {}
    for s in uniq:
        rows = [hmm_lib.sample(lang, c.batch_size, c.seq_len + 1,
                               seed=int(np.random.default_rng((s, t)).integers(2**31)))
                for t in range(start, start + n)]
        per[s] = lm_train.next_token_batch(np.concatenate(rows))
    out = {}
    for k in per[uniq[0]]:
        stacked = np.stack([per[s][k].reshape(n, c.batch_size, -1) for s in seeds], axis=1)
        out[k] = stacked
    return out


def _program(c, graphdef, steps: int):
    """jit(replicas, chunk of batches) -> replicas after the chunk, losses, block norms."""

    def one(params, rest, opt_state, lr, matrix, chunk):
        step = lm_train.make_train_step(graphdef, make_tx(c, lr, matrix, steps))

        def body(carry, batch):
            p, o = carry
            p2, o, m = step(p, rest, o, batch)
            norms = metrics.block_update_norms(jax.tree.map(jnp.subtract, p2, p))
            return (p2, o), (m["loss"], norms)

        (params, opt_state), (loss, norms) = jax.lax.scan(body, (params, opt_state), chunk)
        return params, opt_state, loss, norms

    return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, 0, 0, 1)), donate_argnums=(0, 2))


def _eval_program(graphdef):
    """jit(replicas, val batch, probe batch) -> (val nll sum, count, adjacent CKA [R, L-1])."""

    def one(params, rest, val, probe):
        r = lm_train.eval_step(graphdef, params, rest, val)
        _, inter = lm_train.forward(graphdef, params, rest, probe, return_intermediates=True)
        return r["nll"], r["count"], metrics.adjacent_cka(inter["hidden"])

    return jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)))


def _shard(tree, mesh, dim: int = 0):
    return jax.tree.map(lambda x: mesh_lib.shard_leading(np.asarray(x), mesh, mesh_lib.RUNS,
                                                         dim), tree)


def train_replicas(c, lang, seeds: list[int], lrs: list[float], arms: list[str], *,
                   ckpt_dir: str, name: str) -> dict:
    """Trains replicas ``n = (seeds[n], arms[n], lrs[n])``; resumable per chunk.

    Returns:
      ``{"steps": [K], "train_loss": [steps, R], "val_loss": [K, R], "cka": [K, R, L-1],
      "dw_cosine": [K, R, L-1], "update_norms": [K, R, L]}`` (host arrays; K logged points).
    """
    R = len(seeds)
    graphdef, params, rest = build(c, seeds)
    init = jax.tree.map(np.asarray, params)
    mats = np.stack([arm_matrix(c, a) for a in arms]).astype(np.float32)
    lr = np.asarray(lrs, np.float32)
    val = lm_train.next_token_batch(hmm_lib.sample(lang, c.val_size, c.seq_len + 1,
                                                   seed=VAL_SEED))
    probe = lm_train.next_token_batch(hmm_lib.sample(lang, c.probe_size, c.seq_len + 1,
                                                     seed=PROBE_SEED))
    K = c.steps // c.log_every
    logs = {"steps": np.arange(1, K + 1) * c.log_every,
            "train_loss": np.zeros((c.steps, R), np.float32),
            "val_loss": np.zeros((K, R), np.float32),
            "cka": np.zeros((K, R, c.depth - 1), np.float32),
            "dw_cosine": np.zeros((K, R, c.depth - 1), np.float32),
            "update_norms": np.zeros((K, R, c.depth), np.float32)}
    mesh = mesh_lib.runs_mesh(R)
    fp = checkpoint.config_fingerprint({"c": c.to_dict(), "seeds": seeds, "lrs": lrs,
                                        "arms": arms})
    with jax.set_mesh(mesh):
        params, rest = _shard(params, mesh), _shard(rest, mesh)
        tx0 = make_tx(c, 1.0, np.eye(c.depth, dtype=np.float32), c.steps)
        opt_state = _shard(jax.jit(jax.vmap(lm_train.promotion_safe(tx0).init))(params), mesh)
        mats_s, lr_s = _shard(mats, mesh), _shard(lr, mesh)
        treedef = jax.tree.structure((params, opt_state))
        program, evaluate = _program(c, graphdef, c.steps), _eval_program(graphdef)
        cos = jax.jit(jax.vmap(metrics.adjacent_update_cosine))
        start = 0
        with checkpoint.Checkpointer(ckpt_dir, max_to_keep=1) as ckpt:
            if ckpt.latest_step() is not None:
                saved = ckpt.restore()
                if int(saved["fingerprint"]) != fp:
                    raise ValueError(f"{ckpt_dir} holds a run with a different config; pass "
                                     "a new --workdir or delete that one")
                params, opt_state = _shard(jax.tree.unflatten(treedef, saved["leaves"]), mesh)
                start = int(saved["step"])
                logs = {k: np.asarray(v) for k, v in saved["logs"].items()}
                logging.info("%s: resuming at step %d", name, start)
            t0 = time.time()
            for s0 in range(start, c.steps, c.log_every):
                chunk = _shard(batches(c, lang, seeds, s0, c.log_every), mesh, dim=1)
                params, opt_state, loss, norms = program(params, rest, opt_state, lr_s,
                                                         mats_s, chunk)
                k = s0 // c.log_every
                logs["train_loss"][s0:s0 + c.log_every] = np.asarray(loss).T
                logs["update_norms"][k] = np.asarray(norms).mean(1)
                nll, cnt, cka = map(np.asarray, evaluate(params, rest, val, probe))
                logs["val_loss"][k] = nll / cnt
                logs["cka"][k] = cka
                logs["dw_cosine"][k] = np.asarray(cos(params, _shard(init, mesh)))
                done = s0 + c.log_every
                logging.info("%s step %d/%d: val loss %s (%.2f s/step)", name, done, c.steps,
                             np.round(logs["val_loss"][k], 4),
                             (time.time() - t0) / (done - start))
                ckpt.save(done, {"fingerprint": fp, "step": done, "logs": logs,
                                 "leaves": jax.tree.leaves((params, opt_state))}, force=True)
    return logs


# --------------------------------------------------------------------------- run


def time_steps(c, lang, arm: str, n: int) -> float:
    """Median wall time of one compiled train step of a single replica of ``arm``."""
    g, p, r = build(c, [0])
    p, r = jax.tree.map(lambda x: x[0], p), jax.tree.map(lambda x: x[0], r)
    tx = make_tx(c, np.float32(max(c.lrs)), arm_matrix(c, arm).astype(np.float32), c.steps)
    step = jax.jit(lm_train.make_train_step(g, tx))
    state = lm_train.promotion_safe(tx).init(p)
    b = batches(c, lang, [0], 0, 1)
    b = {k: v[0, 0] for k, v in b.items()}
    p, state, _ = step(p, r, state, b)
    jax.block_until_ready(p)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        p, state, _ = step(p, r, state, b)
        jax.block_until_ready(p)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def run(config, workdir: str) -> dict:
    """Stage 1 (LR selection on ``selection_seed``), stage 2 (evaluation seeds, paired:
    base@lr_base, smoothed@lr_smoothed, permuted@lr_smoothed), timing, claims, figures,
    results.json."""
    import os

    from icml26_jax.core import results
    from icml26_jax.grad_smoothing import report

    c = config
    validate_config(c)
    t_start = time.time()
    lang = language(c)
    ck = os.path.join(workdir, "checkpoints")
    lrs = [float(x) for x in c.lrs]
    # Stage 1: base and smoothed x every lr on the selection seed.
    sel_arms = [a for a in ("base", "smoothed") for _ in lrs]
    sel_lrs = lrs * 2
    logging.info("stage 1: %d replicas (base, smoothed x lr %s), %d steps", len(sel_arms),
                 lrs, c.steps)
    s1 = train_replicas(c, lang, [c.selection_seed] * len(sel_arms), sel_lrs, sel_arms,
                        ckpt_dir=os.path.join(ck, "stage1"), name="stage 1")
    final = s1["val_loss"][-1]
    best = {}
    for arm in ("base", "smoothed"):
        idx = [i for i, a in enumerate(sel_arms) if a == arm]
        best[arm] = sel_lrs[min(idx, key=lambda i: final[i])]
    logging.info("selected lr: base %g, smoothed %g", best["base"], best["smoothed"])
    # Stage 2: evaluation seeds, paired.
    seeds = [int(s) for s in c.eval_seeds]
    arms2 = [a for a in ARMS for _ in seeds]
    lrs2 = [best["base"] if a == "base" else best["smoothed"] for a in arms2]
    logging.info("stage 2: %d replicas (%s x seeds %s), %d steps", len(arms2), ARMS, seeds,
                 c.steps)
    s2 = train_replicas(c, lang, seeds * len(ARMS), lrs2, arms2,
                        ckpt_dir=os.path.join(ck, "stage2"), name="stage 2")
    timing = {arm: time_steps(c, lang, arm, c.timing_steps) for arm in ("base", "smoothed")}
    entropy = hmm_lib.entropy_rate(lang, num_seqs=c.val_size, length=c.seq_len + 1)
    m, claims = report.evaluate(c, s1, s2, sel_arms, sel_lrs, best, timing, entropy)
    m["devices"] = jax.device_count()
    if distributed.is_primary():
        report.plots(c, m, workdir)
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed,
                                 config=c, metrics=m, claims=claims, runtime_s=runtime)
    if distributed.is_primary():
        print(report.summary(c, m, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": m,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}
