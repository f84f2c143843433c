"""The Gradient Smoothing experiment: replicas (seed x arm x lr) as one vmapped program.

A *replica* is one LM trained from the initial weights of its seed, on the batches of its
seed (paired design: data order depends on the seed only), by the optimiser of its arm at
its learning rate. The arm enters as data: a ``[L, L]`` depth operator (identity for
``base``, ``S_a`` for ``smoothed``, ``P^T S_a P`` for ``permuted``), and the learning rate as
a scalar array, so every replica of a stage is ONE compiled program (``vmap`` over
replicas, ``lax.scan`` over ``config.log_every`` steps), checkpointed after every chunk.

Training batches are drawn inside that program (:func:`icml26_jax.lm.hmm.sample_jax`, the
HMM a jit argument) from :func:`data_key` ``(seed, step)``: no host work per step, and the
same batch for every replica of a seed whatever its arm or learning rate. :func:`batches`
returns the same batches on the host (tests, timing, the preloaded benchmark program).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import nnx

from icml26_jax.core import checkpoint, distributed
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.optim import promotion_safe
from icml26_jax.grad_smoothing import baselines, metrics, model, transform
from icml26_jax.lm import hmm as hmm_lib
from icml26_jax.lm import train as lm_train

PAPER = "grad_smoothing"
ARMS = ("base", "smoothed", "permuted")
VAL_SEED = 10_000
PROBE_SEED = 10_001
PERMUTATION_SEED = 0
# Folded into a replica seed's key before the step: the data stream is separate from the
# stream ``nnx.Rngs(seed)`` initialises the model from.
DATA_STREAM = 0xDA7A
# In the checkpoint fingerprint, so a run directory written with the previous (host NumPy)
# data stream is refused instead of resumed with a different stream.
DATA_PROTOCOL = "hmm.sample_jax(fold_in(fold_in(key(seed), DATA_STREAM), step))"


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
    if c.variant == "full":
        f = c.full
        if not list(c.selection_seeds):
            raise ValueError("config.selection_seeds must name at least one seed")
        if not list(f.alphas) or any(not 0.0 < float(a) <= 1.0 for a in f.alphas):
            raise ValueError(f"config.full.alphas must be in (0, 1], got {list(f.alphas)}")
        bad = [m for m in f.modes if m not in transform.MODES]
        if not list(f.modes) or bad:
            raise ValueError(f"config.full.modes={list(f.modes)}; allowed: "
                             f"{', '.join(transform.MODES)}")
        if not list(f.muon_lrs) or any(not float(x) > 0 for x in f.muon_lrs):
            raise ValueError(f"config.full.muon_lrs must be positive, got {list(f.muon_lrs)}")
        if not 4 <= int(f.compare_depth) < c.depth:
            raise ValueError(f"config.full.compare_depth must be in [4, config.depth="
                             f"{c.depth}), got {f.compare_depth}")
        v = f.vit
        for name in ("depth", "d_model", "num_heads", "patch", "epochs", "batch_size",
                     "log_every_epochs"):
            if isinstance(v[name], bool) or not isinstance(v[name], int) or v[name] < 1:
                raise ValueError(f"config.full.vit.{name} must be a positive integer, got "
                                 f"{v[name]!r}")
        if v.depth < 4:
            raise ValueError(f"config.full.vit.depth must be >= 4, got {v.depth}")
        if not 2 <= v.folds <= 10:
            raise ValueError(f"config.full.vit.folds must be in [2, 10], got {v.folds}")
        if v.mode not in transform.MODES or not 0.0 <= float(v.alpha) <= 1.0:
            raise ValueError(f"config.full.vit.alpha/mode must be in [0, 1] / "
                             f"{', '.join(transform.MODES)}, got {v.alpha}/{v.mode!r}")


def language(c) -> hmm_lib.HMM:
    h = c.hmm
    return hmm_lib.make_hmm(h.num_states, h.vocab_size, seed=h.seed,
                            trans_concentration=h.concentration,
                            emit_concentration=h.concentration,
                            num_successors=h.num_successors, num_emissions=h.num_emissions)


def lm_config(c, *, unroll_layers: bool = False):
    """The LM of ``config``; ``unroll_layers`` unrolls the layer scan (same numbers), which
    XLA's cost analysis needs to count every block's FLOPs (``core.timing.step_flops``)."""
    m = c.model
    cfg = model.lm_config(c.hmm.vocab_size, c.depth, m.d_model, m.num_heads, m.mlp_ratio)
    return dataclasses.replace(cfg, unroll_layers=unroll_layers)


def arm_matrix(c, arm: str, alpha: float | None = None) -> np.ndarray:
    """The depth operator of an arm, ``[L, L]`` (``alpha`` default ``config.alpha``)."""
    alpha = c.alpha if alpha is None else alpha
    if arm == "base":
        return np.eye(c.depth)
    if arm == "smoothed":
        return transform.smoothing_matrix(c.depth, alpha, c.radius)
    if arm == "permuted":
        return transform.smoothing_matrix(c.depth, alpha, c.radius,
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


def build(c, seeds: list[int], *, unroll_layers: bool = False):
    """Stacked LMs, replica n initialised from ``seeds[n]``: ``(graphdef, params, rest)``."""
    cfg = lm_config(c, unroll_layers=unroll_layers)
    graphdef, ps, rs = None, [], []
    for s in seeds:
        g, p, r = nnx.split(model.make_lm(cfg, nnx.Rngs(s)), nnx.Param, ...)
        graphdef = graphdef or g
        ps.append(p)
        rs.append(r)
    stack = lambda *xs: jnp.stack(xs)  # noqa: E731
    return graphdef, jax.tree.map(stack, *ps), jax.tree.map(stack, *rs)


def data_key(seed, step):
    """The key of the training batch of replica seed ``seed`` at ``step``: a pure function of
    (seed, step), never of the arm or the learning rate (both may be traced ints)."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), DATA_STREAM), step)


def seed_batches(hmm, seed, steps, batch_size: int, seq_len: int) -> dict:
    """Next-token batches ``[n, B, T]`` of seed ``seed`` at ``steps`` (``[n]`` ints), drawn by
    :func:`~icml26_jax.lm.hmm.sample_jax`; traceable (``hmm`` from ``hmm.device_hmm``)."""
    def one(t):
        return lm_train.next_token_batch(
            hmm_lib.sample_jax(data_key(seed, t), hmm, batch_size, seq_len + 1))

    return jax.vmap(one)(steps)


def replica_batches(hmm, seeds, steps, batch_size: int, seq_len: int) -> dict:
    """Batches ``[R, n, B, T]`` of replicas ``seeds [R]`` at ``steps [n]``; traceable.

    Inside a program over replicas sharded on ``RUNS`` the sampler runs through
    ``core.mesh.auto_over_runs`` (auto sharding mode, output sharded like the replicas).
    """
    def draw(seeds_, hmm_, steps_):
        return jax.vmap(lambda s: seed_batches(hmm_, s, steps_, batch_size, seq_len))(seeds_)

    return mesh_lib.auto_over_runs(draw, seeds, hmm, steps)


def step_indices(start: int, n: int) -> np.ndarray:
    """``[n]`` int32 global step indices of the chunk that starts at ``start``."""
    return np.arange(start, start + n, dtype=np.int32)


@functools.lru_cache(maxsize=8)
def _sampler(batch_size: int, seq_len: int):
    """jit(seeds [R], hmm, steps [n]) -> batches ``[n, R, B, T]`` (what the program draws)."""
    return jax.jit(lambda s, h, t: jax.tree.map(
        lambda x: jnp.moveaxis(x, 0, 1), replica_batches(h, s, t, batch_size, seq_len)))


def batches(c, lang, seeds: list[int], start: int, n: int) -> dict:
    """Next-token batches ``[n, R, B, T]`` (host arrays) for replicas of ``seeds``, steps
    ``[start, start + n)``: exactly what the training program draws for them, a pure function
    of (seed, step), never of the arm or the learning rate."""
    out = _sampler(int(c.batch_size), int(c.seq_len))(
        np.asarray(seeds, np.int32), hmm_lib.device_hmm(lang), step_indices(start, n))
    return {k: np.asarray(v) for k, v in out.items()}


def _tx_key(c, graphdef, steps: int) -> tuple:
    """Everything a replica program depends on besides its inputs: the model (``graphdef``),
    the optimiser fields :func:`make_tx` reads, and the schedule length."""
    opt = tuple(sorted((k, repr(v)) for k, v in c.opt.to_dict().items()))
    return graphdef, str(c.base), str(c.mode), opt, int(steps)


# Compiled programs, reused across ``train_replicas`` calls with the same model, optimiser
# and schedule (stages of a protocol, resumed runs): jit caches per function object, so a
# fresh closure per call would recompile the identical program every time.
_PROGRAMS: dict = {}
_MAX_PROGRAMS = 32


def _memo(key, make):
    if key not in _PROGRAMS:
        if len(_PROGRAMS) >= _MAX_PROGRAMS:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
        _PROGRAMS[key] = make()
    return _PROGRAMS[key]


def _program(c, graphdef, steps: int, *, preloaded: bool = False):
    """The training program of one chunk, vmapped over replicas (donates params and
    optimiser state).

    ``preloaded=False`` (training): ``jit(params, rest, opt_state, lr [R], matrix [R, L, L],
    seeds [R], hmm, steps [n]) -> (params, opt_state, loss [R, n], norms [R, n, L])``, the
    chunk's batches drawn inside from (seed, step) (:func:`replica_batches`; ``hmm`` from
    ``hmm.device_hmm``, replicated). ``preloaded=True``: the same program with the batches
    ``[n, R, B, T]`` an argument in place of (seeds, hmm, steps) (tests, benchmark).
    """
    shape = () if preloaded else (int(c.batch_size), int(c.seq_len))
    return _memo(("train", preloaded) + shape + _tx_key(c, graphdef, steps),
                 lambda: _make_program(copy.deepcopy(c), graphdef, steps, preloaded))


def _make_program(c, graphdef, steps: int, preloaded: bool):
    def train_chunk(params, rest, opt_state, lr, matrix, chunk):
        step = lm_train.make_train_step(graphdef, make_tx(c, lr, matrix, steps))

        def body(carry, batch):
            p, o = carry
            p2, o, m = step(p, rest, o, batch)
            norms = metrics.block_update_norms(jax.tree.map(jnp.subtract, p2, p))
            return (p2, o), (m["loss"], norms)

        (params, opt_state), (loss, norms) = jax.lax.scan(body, (params, opt_state), chunk)
        return params, opt_state, loss, norms

    if preloaded:
        return jax.jit(jax.vmap(train_chunk, in_axes=(0, 0, 0, 0, 0, 1)),
                       donate_argnums=(0, 2))
    batch_size, seq_len = int(c.batch_size), int(c.seq_len)

    def program(params, rest, opt_state, lr, matrix, seeds, hmm, steps_):
        # The whole chunk's batches at once: one HMM scan over positions per chunk.
        chunk = replica_batches(hmm, seeds, steps_, batch_size, seq_len)  # [R, n, B, T]
        return jax.vmap(train_chunk)(params, rest, opt_state, lr, matrix, chunk)

    return jax.jit(program, donate_argnums=(0, 2))


def _init_program(c, graphdef, steps: int, mesh):
    """jit(replicas) -> their optimiser states (the state does not depend on lr or arm),
    sharded over ``RUNS`` of ``mesh`` like the replicas."""
    def make():
        tx0 = make_tx(copy.deepcopy(c), 1.0, np.eye(c.depth, dtype=np.float32), steps)
        return jax.jit(jax.vmap(promotion_safe(tx0).init),
                       out_shardings=jax.NamedSharding(mesh, jax.P(mesh_lib.RUNS)))
    return _memo(("init", int(c.depth), mesh) + _tx_key(c, graphdef, steps), make)


def _eval_program(graphdef):
    """jit(replicas, val batch, probe batch) -> (val nll sum, count, adjacent CKA [R, L-1])."""

    def make():
        def one(params, rest, val, probe):
            r = lm_train.eval_step(graphdef, params, rest, val)
            _, inter = lm_train.forward(graphdef, params, rest, probe,
                                        return_intermediates=True)
            return r["nll"], r["count"], metrics.adjacent_cka(inter["hidden"])

        return jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)))

    return _memo(("eval", graphdef), make)


_update_cosine = jax.jit(jax.vmap(metrics.adjacent_update_cosine))


def train_replicas(c, lang, seeds: list[int], lrs: list[float], arms: list[str], *,
                   ckpt_dir: str, name: str, alphas: list[float] | None = None) -> dict:
    """Trains replicas ``n = (seeds[n], arms[n], lrs[n], alphas[n])`` (``alphas`` default
    ``config.alpha``; the mode is ``config.mode`` for all); resumable per chunk.

    Returns:
      ``{"steps": [K], "train_loss": [steps, R], "val_loss": [K, R], "cka": [K, R, L-1],
      "dw_cosine": [K, R, L-1], "update_norms": [K, R, L]}`` (host arrays; K logged points).
    """
    R = len(seeds)
    alphas = [float(c.alpha)] * R if alphas is None else [float(a) for a in alphas]
    if not len(lrs) == len(arms) == len(alphas) == R:
        raise ValueError(f"seeds, lrs, arms and alphas must have one entry per replica, got "
                         f"{R}, {len(lrs)}, {len(arms)}, {len(alphas)}")
    graphdef, params, rest = build(c, seeds)
    init = jax.tree.map(np.asarray, params)
    mats = np.stack([arm_matrix(c, a, al) for a, al in zip(arms, alphas)]).astype(np.float32)
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
    # Replicas sharded over core.mesh.runs_mesh(R) (ceil(R / devices) per device, on every
    # process; padded to a multiple of the mesh, the padding dropped by to_host(., R)).
    mesh = mesh_lib.runs_mesh(R)
    shard = lambda t, dim=0: mesh_lib.shard_replicas(t, mesh, R, dim)  # noqa: E731
    fp = checkpoint.config_fingerprint({"c": c.to_dict(), "seeds": seeds, "lrs": lrs,
                                        "arms": arms, "alphas": alphas,
                                        "data": DATA_PROTOCOL})
    with jax.set_mesh(mesh):
        params, rest = shard(params), shard(rest)
        opt_state = _init_program(c, graphdef, c.steps, mesh)(params)
        mats_s, lr_s, init_s = shard(mats), shard(lr), shard(init)
        seeds_s = shard(np.asarray(seeds, np.int32))
        val, probe, hmm = jax.tree.map(lambda x: mesh_lib.replicate(np.asarray(x), mesh),
                                       (val, probe, hmm_lib.device_hmm(lang)))
        program, evaluate = _program(c, graphdef, c.steps), _eval_program(graphdef)
        cos = _update_cosine

        def advance(state, logs, s0, n):
            params, opt_state = state
            steps = mesh_lib.replicate(step_indices(s0, n), mesh)
            params, opt_state, loss, norms = program(params, rest, opt_state, lr_s, mats_s,
                                                     seeds_s, hmm, steps)
            nll, cnt, cka = evaluate(params, rest, val, probe)
            loss, norms, nll, cnt, cka, dw = mesh_lib.to_host(
                (loss, norms, nll, cnt, cka, cos(params, init_s)), R)
            k = s0 // c.log_every
            logs["train_loss"][s0:s0 + n] = loss.T
            logs["update_norms"][k] = norms.mean(1)
            logs["val_loss"][k] = nll / cnt
            logs["cka"][k] = cka
            logs["dw_cosine"][k] = dw
            return (params, opt_state), f"val loss {np.round(logs['val_loss'][k], 4)}"

        _, logs = checkpoint.run_chunks(
            ckpt_dir, fingerprint=fp, state=(params, opt_state), logs=logs, steps=c.steps,
            chunk=c.log_every, advance=advance, place=shard, name=name)
    return logs


# --------------------------------------------------------------------------- run


def time_steps(c, lang, arms, n: int) -> dict:
    """Median wall time of one compiled train step of a single replica of each arm, timed
    round robin (every repeat times each arm once, so machine noise hits all arms alike)."""
    g, p, r = build(c, [0])
    p, r = jax.tree.map(lambda x: x[0], p), jax.tree.map(lambda x: x[0], r)
    b = batches(c, lang, [0], 0, 1)
    b = {k: v[0, 0] for k, v in b.items()}
    live = {}
    for arm in arms:
        tx = make_tx(c, np.float32(max(c.lrs)), arm_matrix(c, arm).astype(np.float32), c.steps)
        step = jax.jit(lm_train.make_train_step(g, tx))
        q, st, _ = step(p, r, promotion_safe(tx).init(p), b)  # compile
        jax.block_until_ready(q)
        live[arm] = [step, q, st, []]
    for _ in range(n):
        for v in live.values():
            t = time.perf_counter()
            v[1], v[2], _ = v[0](v[1], r, v[2], b)
            jax.block_until_ready(v[1])
            v[3].append(time.perf_counter() - t)
    return {arm: float(np.median(v[3])) for arm, v in live.items()}


def _with(c, **fields):
    """A copy of config ``c`` with ``fields`` replaced."""
    c2 = copy.deepcopy(c)
    for k, v in fields.items():
        c2[k] = v
    return c2


def protocol(c, lang, ckpt_root: str, *, alpha_modes=None, tag: str = "") -> dict:
    """The pre-registered LM protocol of spec §Experiment for ``config.base`` at
    ``config.depth``.

    Stage 1: base and smoothed (``config.alpha``, ``config.mode``) x every lr of
    ``config.lrs`` on ``selection_seed``; each arm keeps its best final validation loss.
    Stage 1b (only if ``alpha_modes``, the ``full`` protocol): every ``(alpha, mode)`` of
    ``alpha_modes`` at the smoothed arm's lr on every seed of ``selection_seeds``; the pair
    with the lowest mean final validation loss is kept. Stage 2: evaluation seeds, paired:
    base@lr_base, smoothed@lr_smoothed, permuted@lr_smoothed (both with the kept alpha and
    mode).

    Returns:
      ``{"config": the stage-2 config, "s1", "s2", "sel_arms", "sel_lrs", "best",
      "alpha_sweep": {"alpha/mode": mean final val loss} | None}``.
    """
    import os

    pre = f"{tag} " if tag else ""
    lrs = [float(x) for x in c.lrs]
    sel_arms = [a for a in ("base", "smoothed") for _ in lrs]
    sel_lrs = lrs * 2
    logging.info("%sstage 1: %d replicas (base, smoothed x lr %s), %d steps", pre,
                 len(sel_arms), lrs, c.steps)
    s1 = train_replicas(c, lang, [c.selection_seed] * len(sel_arms), sel_lrs, sel_arms,
                        ckpt_dir=os.path.join(ckpt_root, "stage1"), name=f"{pre}stage 1")
    final = s1["val_loss"][-1]
    best = {}
    for arm in ("base", "smoothed"):
        idx = [i for i, a in enumerate(sel_arms) if a == arm]
        best[arm] = sel_lrs[min(idx, key=lambda i: final[i])]
    logging.info("%sselected lr: base %g, smoothed %g", pre, best["base"], best["smoothed"])
    sweep = None
    if alpha_modes:
        sweep = {}
        seeds = [int(s) for s in c.selection_seeds]
        for mode in dict.fromkeys(m for _, m in alpha_modes):
            alphas = [float(a) for a, m in alpha_modes if m == mode]
            cm = _with(c, mode=mode)
            reps = [(a, s) for a in alphas for s in seeds]
            logs = train_replicas(cm, lang, [s for _, s in reps], [best["smoothed"]] * len(reps),
                                  ["smoothed"] * len(reps), alphas=[a for a, _ in reps],
                                  ckpt_dir=os.path.join(ckpt_root, f"stage1b_{mode}"),
                                  name=f"{pre}stage 1b ({mode})")
            for a in alphas:
                idx = [i for i, r in enumerate(reps) if r[0] == a]
                sweep[f"{a:g}/{mode}"] = float(np.mean(logs["val_loss"][-1][idx]))
        key = min(sweep, key=sweep.get)
        alpha, mode = key.split("/")
        c = _with(c, alpha=float(alpha), mode=mode)
        logging.info("%sselected alpha %s, mode %s (%s)", pre, alpha, mode,
                     {k: round(v, 4) for k, v in sweep.items()})
    seeds = [int(s) for s in c.eval_seeds]
    arms2 = [a for a in ARMS for _ in seeds]
    lrs2 = [best["base"] if a == "base" else best["smoothed"] for a in arms2]
    logging.info("%sstage 2: %d replicas (%s x seeds %s), %d steps", pre, len(arms2), ARMS,
                 seeds, c.steps)
    s2 = train_replicas(c, lang, seeds * len(ARMS), lrs2, arms2,
                        ckpt_dir=os.path.join(ckpt_root, "stage2"), name=f"{pre}stage 2")
    return {"config": c, "s1": s1, "s2": s2, "sel_arms": sel_arms, "sel_lrs": sel_lrs,
            "best": best, "alpha_sweep": sweep}


def run(config, workdir: str) -> dict:
    """Runs the variant's protocol(s), claims, figures, results.json.

    ``default``/``smoke``: :func:`protocol` for ``config.base`` at ``config.depth``, then
    timing (claims 1-5). ``full``: that protocol with the alpha x mode selection, the same
    with Muon as the base (claim 6), the AdamW protocol at depth ``full.compare_depth``
    (claim 8) and the ViT on digits (claim 7, :mod:`icml26_jax.grad_smoothing.vit`).
    """
    import os

    from icml26_jax.core import results
    from icml26_jax.grad_smoothing import report

    c = config
    validate_config(c)
    t_start = time.time()
    lang = language(c)
    ck = os.path.join(workdir, "checkpoints")
    full = c.variant == "full"
    am = [(float(a), m) for a in c.full.alphas for m in c.full.modes] if full else None
    main = protocol(c, lang, os.path.join(ck, c.base) if full else ck, alpha_modes=am,
                    tag=c.base if full else "")
    cm = main["config"]
    timing = time_steps(cm, lang, ("base", "smoothed"), c.timing_steps)
    entropy = hmm_lib.entropy_rate(lang, num_seqs=c.val_size, length=c.seq_len + 1)
    m, claims = report.evaluate(cm, main["s1"], main["s2"], main["sel_arms"], main["sel_lrs"],
                                main["best"], timing, entropy)
    m["alpha_sweep"] = main["alpha_sweep"]
    m["selected_alpha_mode"] = [float(cm.alpha), cm.mode]
    if full:
        from icml26_jax.grad_smoothing import vit

        muon = protocol(_with(c, base="muon", lrs=tuple(c.full.muon_lrs)), lang,
                        os.path.join(ck, "muon"), alpha_modes=am, tag="muon")
        shallow = protocol(_with(cm, depth=int(c.full.compare_depth)), lang,
                           os.path.join(ck, f"depth{c.full.compare_depth}"),
                           tag=f"depth {c.full.compare_depth}")
        v = vit.run_vit(c, os.path.join(ck, "vit"))
        m_full, claims_full = report.evaluate_full(c, main, muon, shallow, v)
        m.update(m_full)
        claims += claims_full
    m["devices"] = jax.device_count()
    if distributed.is_primary():
        report.plots(cm, m, workdir)
        if full:
            report.plots_full(c, m, workdir)
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed,
                                 config=c, metrics=m, claims=claims, runtime_s=runtime)
    if distributed.is_primary():
        print(report.summary(cm, m, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": m,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}
