"""The IsoFLOP scaling study (spec §Experiment): training at matched FLOPs, validation NELBO,
the speed-quality Pareto table, claims, figures and ``results.json``.

Runs are grouped by (budget, size, family): the replicas of a group (seeds; for the MDLM pair
the NELBO- and the low-var-trained models, which share the backbone and differ only in the
loss weight) are ONE vmapped program sharded over the devices (``core.mesh.map_runs``),
trained in checkpointed chunks (``core.checkpoint.run_chunks``) and resumed after a kill.
Every run of a budget gets C / (3 F_fwd B) steps with F_fwd counted by XLA on the unrolled
forward (``flops.forward_flops``). The Pareto stage samples each family's best size and is
checkpointed as a whole (``core.checkpoint.cached``).
"""

from __future__ import annotations

import functools
import math
import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.flags import as_tuple
from icml26_jax.core.optim import promotion_safe
from icml26_jax.discrete_diffusion import (analysis, configs, data, flops, losses, metrics,
                                           report, samplers)
from icml26_jax.discrete_diffusion import model as model_lib
from icml26_jax.discrete_diffusion.analysis import PAIR
from icml26_jax.lm import hmm as hmm_lib

PAPER = "discrete_diffusion"
VAL_KEY = 10_000
SAMPLE_KEY = 30_000
SAMPLERS = {"ar": samplers.ar_sample, "mdlm": samplers.mdlm_sample,
            "mdlm_lowvar": samplers.mdlm_sample, "duo": samplers.duo_sample,
            "esolm": samplers.esolm_sample}


# --------------------------------------------------------------------------- config


def normalise_config(c) -> None:
    """List fields given as ``a,b`` strings become tuples (in place)."""
    c.budgets = as_tuple(c.budgets, float, name="budgets")
    c.sizes = as_tuple(c.sizes, str, name="sizes")
    c.families = as_tuple(c.families, str, name="families")
    c.sample_steps = as_tuple(c.sample_steps, int, name="sample_steps")
    c.pareto_budgets = as_tuple(c.pareto_budgets, float, name="pareto_budgets")


def validate_config(c) -> None:
    """Raises ``ValueError`` naming the first bad field of config ``c``."""
    if c.variant not in configs.VARIANTS:
        raise ValueError(f"variant must be one of {configs.VARIANTS}, got {c.variant!r}")
    budgets = as_tuple(c.budgets, float, name="budgets")
    if not budgets or min(budgets) <= 0:
        raise ValueError(f"budgets must be a non-empty list of FLOPs > 0, got {c.budgets!r}")
    sizes = as_tuple(c.sizes, str, name="sizes")
    bad = [s for s in sizes if s not in model_lib.SIZES]
    if bad or not sizes or len(set(sizes)) != len(sizes):
        raise ValueError(f"sizes must be distinct entries of {tuple(model_lib.SIZES)}, got "
                         f"sizes={c.sizes!r}")
    fams = as_tuple(c.families, str, name="families")
    bad = [f for f in fams if f not in model_lib.FAMILIES]
    if bad or not fams or len(set(fams)) != len(fams):
        raise ValueError(f"families must be distinct entries of {model_lib.FAMILIES}, got "
                         f"families={c.families!r}")
    steps = as_tuple(c.sample_steps, int, name="sample_steps")
    if not steps or min(steps) < 1:
        raise ValueError(f"sample_steps must be integers >= 1, got {c.sample_steps!r}")
    for name in ("mdlm_seeds", "other_seeds", "pair_seeds", "batch", "val_size", "val_times",
                 "num_samples", "chunk", "floor_seqs"):
        if int(c[name]) < 1:
            raise ValueError(f"{name} must be >= 1, got {name}={c[name]}")
    if int(c.length) < 2:
        raise ValueError(f"length must be >= 2, got length={c.length}")
    if int(c.steps) < 0 or int(c.min_steps) < 1:
        raise ValueError(f"steps must be >= 0 and min_steps >= 1, got steps={c.steps}, "
                         f"min_steps={c.min_steps}")
    for name in ("lr", "clip"):
        if not float(c[name]) > 0:
            raise ValueError(f"{name} must be > 0, got {name}={c[name]}")
    if not 0 < float(c.final_lr_frac) <= 1 or not 0 <= float(c.warmup_frac) < 1:
        raise ValueError(f"need 0 < final_lr_frac <= 1 and 0 <= warmup_frac < 1, got "
                         f"final_lr_frac={c.final_lr_frac}, warmup_frac={c.warmup_frac}")
    if float(c.weight_decay) < 0 or not (0 <= float(c.b1) < 1 and 0 <= float(c.b2) < 1):
        raise ValueError(f"need weight_decay >= 0 and b1, b2 in [0, 1), got "
                         f"weight_decay={c.weight_decay}, b1={c.b1}, b2={c.b2}")
    if c.data.source not in data.SOURCES:
        raise ValueError(f"data.source must be one of {data.SOURCES}, got "
                         f"data.source={c.data.source!r}")
    if c.data.source != "hmm" and not c.data.data_dir:
        raise ValueError(f"data.source={c.data.source!r} needs data.data_dir (a prepared "
                         "TFDS data directory)")


def vocab_size(c) -> int:
    return int(c.hmm.vocab_size) if c.data.source == "hmm" else int(c.data.vocab_size)


def language(c):
    h = c.hmm
    return data.make_language(int(h.seed), int(h.num_states), int(h.vocab_size),
                              int(h.successors), int(h.emissions), float(h.concentration))


# --------------------------------------------------------------------------- optimiser


class Hyper(NamedTuple):
    """Hashable training hyper-parameters of one group (a jit static argument)."""

    steps: int
    lr: float
    final_lr_frac: float
    warmup: int
    weight_decay: float
    b1: float
    b2: float
    clip: float
    K: int


def hyper(c, steps: int) -> Hyper:
    """Warm-up max(warmup_frac * steps, warmup_min) steps (at most steps - 1)."""
    warm = max(int(math.ceil(float(c.warmup_frac) * steps)), int(c.warmup_min))
    return Hyper(int(steps), float(c.lr), float(c.final_lr_frac), max(1, min(warm, steps - 1)),
                 float(c.weight_decay), float(c.b1), float(c.b2), float(c.clip), vocab_size(c))


def make_tx(hp: Hyper) -> optax.GradientTransformation:
    """Clip 1.0, then AdamW with linear warm-up and cosine decay lr -> final_lr_frac lr."""
    sched = optax.warmup_cosine_decay_schedule(0.0, hp.lr, hp.warmup, max(hp.steps, hp.warmup + 1),
                                               end_value=hp.lr * hp.final_lr_frac)
    return promotion_safe(optax.chain(
        optax.clip_by_global_norm(hp.clip),
        optax.adamw(sched, b1=hp.b1, b2=hp.b2, weight_decay=hp.weight_decay)))


# --------------------------------------------------------------------------- programs


def _train_chunk(static, params, opt_state, seed, low_var, start, tokens):
    """One replica: ``tokens.shape[0]`` steps from step ``start`` on the given batches
    ``tokens [n, B, L]`` (the real-data path; the HMM path draws them in
    :func:`_train_chunk_hmm`); noise key of step i is fold_in(key(seed), i), so the two MDLM
    objectives of a seed see the same (t, mask)."""
    family, graphdef, hp = static
    tx = make_tx(hp)

    def body(carry, inp):
        p, o = carry
        i, x = inp
        key = jax.random.fold_in(jax.random.key(seed), i)
        loss, g = jax.value_and_grad(lambda q: losses.loss_fn(
            family, q, graphdef, {"tokens": x}, key, train=True, K=hp.K, low_var=low_var))(p)
        upd, o = tx.update(g, o, p)
        return (optax.apply_updates(p, upd), o), loss

    idx = start + jnp.arange(tokens.shape[0], dtype=jnp.int32)
    (params, opt_state), loss = jax.lax.scan(body, (params, opt_state), (idx, tokens))
    return params, opt_state, loss


def _train_chunk_hmm(static, params, opt_state, seed, low_var, start, hmm):
    """One replica: ``n`` steps from step ``start`` on HMM batches drawn here, on the device
    (``data.chunk_batches``: batch i from key ``data.train_key(seed, i)``, independent of the
    family and objective), then trained as :func:`_train_chunk`.

    Args:
      static: ``(family, graphdef, hp, n, batch, length)``.
      hmm: the language as float32 arrays (``lm.hmm.device_hmm``), a jit argument.
    """
    family, graphdef, hp, n, batch, length = static
    tokens = data.chunk_batches(hmm, seed, start, n, batch, length)
    return _train_chunk((family, graphdef, hp), params, opt_state, seed, low_var, start, tokens)


def _init_opt(static, params):
    return make_tx(static[2]).init(params)


def validation_times(n: int, times: int, eps: float = 1e-3, seed: int = VAL_KEY) -> np.ndarray:
    """Stratified validation times [times, n]: t_j = eps + (1 - eps)(j + u) / times with one
    u per sequence (fixed: every run is scored on the same (x, t) pairs)."""
    u = np.random.default_rng(seed).random(n)
    j = np.arange(times)[:, None]
    return (eps + (1.0 - eps) * (j + u[None]) / times).astype(np.float32)


def _validate(static, params, tokens, t):
    """Validation loss of one replica: the AR NLL, or the NELBO averaged over the stratified
    times t [times, n] (``train=False``: never the low-var loss)."""
    family, graphdef, K = static
    batch = {"tokens": tokens}
    if family == "ar":
        return losses.loss_fn("ar", params, graphdef, batch, jax.random.key(0), train=False, K=K)

    def one(j_t):
        j, tj = j_t
        key = jax.random.fold_in(jax.random.key(VAL_KEY), j)
        return losses.loss_fn(family, params, graphdef, batch, key, train=False, K=K, t=tj)

    return jnp.mean(jax.lax.map(one, (jnp.arange(t.shape[0]), t)))


def gradient_snr(graphdef, params, tokens, K: int, *, low_var: bool, draws: int = 64,
                 seed: int = 0) -> float:
    """Gradient signal-to-noise ratio ||E g||^2 / E||g - E g||^2 of the MDLM training loss
    over ``draws`` draws of (t, mask) on a fixed model and batch (the mechanism of claim 3:
    the low-var weight 1 replaces the NELBO weight 1/t, whose small-t draws dominate the
    variance). Draw i uses key fold_in(key(seed), i) for both objectives."""

    def grad(i):
        key = jax.random.fold_in(jax.random.key(seed), i)
        g = jax.grad(lambda p: losses.loss_fn("mdlm", p, graphdef, {"tokens": tokens}, key,
                                              train=True, K=K, low_var=low_var))(params)
        return jnp.concatenate([x.ravel() for x in jax.tree.leaves(g)])

    gs = jax.jit(lambda: jax.lax.map(grad, jnp.arange(draws)))()
    mean = jnp.mean(gs, 0)
    return float(jnp.sum(mean ** 2) / jnp.mean(jnp.sum((gs - mean) ** 2, 1)))


def _stack(trees):
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


class Group(NamedTuple):
    """Replicas trained as one program: one family and size at one budget."""

    budget: float
    size: str
    family: str  # the model family ("mdlm" for the MDLM pair)
    names: tuple  # per replica: family name ("mdlm" / "mdlm_lowvar" / ...)
    seeds: tuple
    low_var: tuple
    steps: int


def groups(c, f_fwd: dict) -> list[Group]:
    """The groups of the study; sizes with < ``min_steps`` steps at a budget are dropped
    (``config.steps > 0`` fixes the steps of every run instead: smoke and tests)."""
    fams = as_tuple(c.families, str, name="families")
    base = 1000 * int(c.seed)
    out = []
    for C in as_tuple(c.budgets, float, name="budgets"):
        for size in as_tuple(c.sizes, str, name="sizes"):
            steps = int(c.steps) or flops.steps_for_budget(C, f_fwd[size], int(c.batch))
            if not int(c.steps) and steps < int(c.min_steps):
                logging.info("budget %.3g: size %s gets %d < %d steps, dropped", C, size, steps,
                             int(c.min_steps))
                continue
            n_pair = (int(c.pair_seeds) if float(c.pair_seeds_budget) == C
                      else int(c.mdlm_seeds))
            pair = [f for f in PAIR if f in fams]
            if pair:
                names = tuple(f for f in pair for _ in range(n_pair))
                seeds = tuple(base + s for _ in pair for s in range(n_pair))
                out.append(Group(C, size, "mdlm", names, seeds,
                                 tuple(f == "mdlm_lowvar" for f in names), steps))
            for f in fams:
                if f in PAIR:
                    continue
                n = int(c.other_seeds)
                out.append(Group(C, size, f, (f,) * n, tuple(base + s for s in range(n)),
                                 (f == "esolm",) * n, steps))
    if not out:
        raise ValueError(f"no size gets min_steps={c.min_steps} steps at budgets={c.budgets}; "
                         "raise the budgets or add smaller sizes")
    return out


def train_group(c, g: Group, batches, val_tokens, ckpt_dir: str) -> dict:
    """Trains one group (resumable per chunk) and validates it.

    Args:
      batches: the HMM language (an ``lm.hmm.HMM``): every chunk draws its batches on the
        device (:func:`_train_chunk_hmm`); or a host callable ``batches(seed, start, n) ->
        int32 [n, B, L]`` (real data), whose batches are passed to :func:`_train_chunk`.

    Returns:
      ``{"params": stacked host params, "train_loss": [steps, R], "val": [R],
      "step_time": s per step per group (compile excluded)}``.
    """
    K = vocab_size(c)
    R = len(g.seeds)
    graphdef = None
    ps = []
    for s in g.seeds:
        graphdef, p = model_lib.init(g.size, g.family, K, s)
        ps.append(p)
    params = _stack(ps)
    hp = hyper(c, g.steps)
    static = (g.family, graphdef, hp)
    mesh = mesh_lib.runs_mesh(R)  # replicas padded to the mesh, dropped by to_host(., R)
    seeds = np.asarray(g.seeds, np.int32)
    low_var = np.asarray(g.low_var, bool)
    opt_state = mesh_lib.map_runs(mesh, _init_opt, static, params)
    logs = {"train_loss": np.zeros((g.steps, R), np.float32),
            "chunk_time": np.zeros((math.ceil(g.steps / int(c.chunk)),), np.float64)}
    on_device = isinstance(batches, hmm_lib.HMM)
    # The training stream is part of what a checkpoint holds: one saved under the NumPy
    # sampler's batches (before issue 43) is refused, not resumed with other data.
    fp = checkpoint.config_fingerprint({"group": g._asdict(), "hp": hp._asdict(),
                                        "data": c.data.to_dict(), "hmm": c.hmm.to_dict(),
                                        **({"stream": "sample_jax"} if on_device else {})})
    if on_device:  # placed once per group; one float32 copy of the language per replica
        lang_dev = mesh_lib.shard_replicas(jax.tree.map(
            lambda a: np.broadcast_to(np.asarray(a), (R,) + a.shape),
            hmm_lib.device_hmm(batches)), mesh, R)
    B, L = int(c.batch), int(c.length)

    def advance(state, logs, s0, n):
        p, o = state
        start = np.full((R,), s0, np.int32)
        t0 = time.perf_counter()
        if on_device:
            p, o, loss = mesh_lib.map_runs(mesh, _train_chunk_hmm, static + (n, B, L), p, o,
                                           seeds, low_var, start, lang_dev)
        else:
            uniq = {s: batches(s, s0, n) for s in set(g.seeds)}
            tok = np.stack([uniq[s] for s in g.seeds])  # [R, n, B, L]
            t0 = time.perf_counter()
            p, o, loss = mesh_lib.map_runs(mesh, _train_chunk, static, p, o, seeds, low_var,
                                           start, tok)
        loss = mesh_lib.to_host(loss, R)  # [R, n]; blocks
        logs["chunk_time"][s0 // int(c.chunk)] = (time.perf_counter() - t0) / n
        logs["train_loss"][s0:s0 + n] = loss.T
        return (p, o), f"train loss {np.round(loss[:, -10:].mean(1), 3)}"

    name = f"C={g.budget:.2g} {g.size} {g.family}"
    # A restored state holds the padded replicas of the run that saved it (maybe on another
    # device count): keep the R real ones, map_runs pads them again.
    (params, _), logs = checkpoint.run_chunks(
        ckpt_dir, fingerprint=fp, state=(params, opt_state), logs=logs, steps=g.steps,
        chunk=int(c.chunk), advance=advance, place=lambda t: mesh_lib.to_host(t, R),
        name=name)
    T = int(c.val_times)
    t = np.broadcast_to(validation_times(len(val_tokens), T), (R, T, len(val_tokens)))
    tok = np.broadcast_to(val_tokens, (R,) + val_tokens.shape)
    val = mesh_lib.to_host(mesh_lib.map_runs(mesh, _validate, (g.family, graphdef, K), params,
                                             tok, t), R).astype(np.float64)
    times = logs["chunk_time"]
    warm = times[1:] if np.count_nonzero(times) > 1 else times
    return {"params": mesh_lib.to_host(params, R), "graphdef": graphdef,
            "train_loss": logs["train_loss"], "val": val,
            "step_time": float(np.median(warm[warm > 0])) if np.any(warm > 0) else float("nan")}


# --------------------------------------------------------------------------- sampling


@functools.partial(jax.jit, static_argnames=("family", "graphdef", "n", "length", "T"))
def _sample(family, graphdef, p, k, *, n, length, T):
    # Module-level and static-keyed: repeated runs (resume, determinism checks, several
    # budgets) reuse the compiled sampler instead of recompiling a fresh lambda per call.
    return SAMPLERS[family](graphdef, p, k, n, length, T)


def sample_family(graphdef, params, family: str, n: int, length: int, T: int, seed: int):
    """``(samples [n, L], seconds)`` of one compiled sampler call (compile excluded: the
    program is compiled and run once before the timed call)."""
    fn = functools.partial(_sample, family, graphdef, n=n, length=length, T=T)
    key = jax.random.fold_in(jax.random.key(SAMPLE_KEY + seed), T)
    jax.block_until_ready(fn(params, jax.random.fold_in(key, 1)))
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(params, key))
    return np.asarray(out), time.perf_counter() - t0


def nfe(family: str, T: int, length: int) -> int:
    """Network calls of a sampler: L for AR, T for Eso-LM (KV cache), T + 1 for MDLM/Duo."""
    return length if family == "ar" else T if family == "esolm" else T + 1


def pareto_points(c, lang, best: dict, seed: int) -> dict:
    """Samples of each family's best model: ``{family: {"T": [..], "nfe", "gen_ppl",
    "unigram", "bigram", "tokens_per_s", "invalid"}}`` (AR: one point, L KV-cached calls)."""
    n, L, K = int(c.num_samples), int(c.length), vocab_size(c)
    out = {}
    for fam, (graphdef, params) in best.items():
        Ts = (L,) if fam == "ar" else as_tuple(c.sample_steps, int, name="sample_steps")
        rows = []
        for T in Ts:
            x, sec = sample_family(graphdef, params, fam, n, L, T, seed)
            q = (metrics.sample_quality(lang, x) if lang is not None else dict(
                gen_ppl=float("nan"), invalid=float("nan"), unigram=metrics.unigram_entropy(
                    x, K), bigram=metrics.bigram_entropy(x, K)))
            rows.append((T, nfe(fam, T, L), q["gen_ppl"], q["unigram"], q["bigram"],
                         n * L / sec, q["invalid"]))
            logging.info("pareto %s T=%d: NFE %d, oracle Gen-PPL %.3f, unigram H %.3f, "
                         "%.0f tok/s", fam, T, rows[-1][1], q["gen_ppl"], q["unigram"],
                         rows[-1][5])
        cols = np.asarray(rows, np.float64).T
        out[fam] = dict(zip(("T", "nfe", "gen_ppl", "unigram", "bigram", "tokens_per_s",
                             "invalid"), cols))
    return out


# --------------------------------------------------------------------------- run


@functools.lru_cache(maxsize=None)
def _forward_flops(size: str, K: int, L: int) -> float:
    """F_fwd per sequence of ``size`` (a pure function of the shapes; compiled once)."""
    g, p = model_lib.init(size, "mdlm", K, 0, unroll=True)
    return flops.forward_flops(g, p, 2, L, model_lib.model_config(size, "mdlm", K, unroll=True))


def run(config, workdir: str) -> dict:
    """Runs the study of ``config`` in ``workdir``; returns the results dict."""
    c = config
    normalise_config(c)
    validate_config(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    K, L, B = vocab_size(c), int(c.length), int(c.batch)
    if c.data.source == "hmm":
        lang = language(c)
        batches = lang  # drawn on the device inside every training chunk
        val_tokens = data.validation_set(lang, int(c.val_size), L)
        fp_floor = checkpoint.config_fingerprint({"hmm": c.hmm.to_dict(), "L": L,
                                                  "n": int(c.floor_seqs)})
        fl = checkpoint.cached(os.path.join(workdir, "ckpt", "floor"), fingerprint=fp_floor,
                               compute=lambda: np.asarray(data.sequence_entropy(
                                   lang, L, int(c.floor_seqs))), name="floor")
        floor = (float(fl[0]), float(fl[1]))
        data_unigram = data.data_unigram_entropy(lang)
    else:
        lang = None
        d = c.data
        windows = data.real_windows(d.source, d.data_dir, "train", L,
                                    num_windows=int(d.train_windows),
                                    source_dir=d.source_dir or None)
        batches = lambda s, s0, n: np.stack(  # noqa: E731
            [data.real_batch(windows, s, s0 + i, B) for i in range(n)])
        val_tokens = data.real_windows(d.source, d.data_dir, "validation", L,
                                       num_windows=int(c.val_size),
                                       source_dir=d.source_dir or None)
        floor, data_unigram = (float("nan"), float("nan")), metrics.unigram_entropy(val_tokens, K)
    logging.info("floor H = %.4f +- %.4f nats/token; data unigram entropy %.4f", *floor,
                 data_unigram)

    f_fwd = {s: _forward_flops(s, K, L) for s in as_tuple(c.sizes, str, name="sizes")}
    gs = groups(c, f_fwd)
    logging.info("%d groups, %d runs", len(gs), sum(len(g.seeds) for g in gs))
    runs, trained = [], {}
    for gi, g in enumerate(gs):
        ck = os.path.join(workdir, "ckpt", f"C{g.budget:.3g}_{g.size}_{g.family}")
        out = train_group(c, g, batches, val_tokens, ck)
        trained[(g.budget, g.size, g.family)] = (g, out)
        for r, (name, seed) in enumerate(zip(g.names, g.seeds)):
            runs.append({"budget": g.budget, "size": g.size, "family": name, "seed": seed,
                         "replica": r, "N": model_lib.non_embedding_params(g.size),
                         "f_fwd": f_fwd[g.size], "steps": g.steps, "val": float(out["val"][r]),
                         "train_loss_end": float(np.mean(out["train_loss"][-20:, r])),
                         "group_flops_per_s": 3 * f_fwd[g.size] * B * len(g.seeds)
                         / out["step_time"]})
        logging.info("group %d/%d %s %s C=%.3g (%d steps): val %s", gi + 1, len(gs), g.size,
                     g.family, g.budget, g.steps, np.round(out["val"], 4))

    iso = analysis.isoflop_table(runs, as_tuple(c.sizes, str, name="sizes"),
                                 as_tuple(c.families, str, name="families"))
    pareto = {}
    pb = as_tuple(c.pareto_budgets, float, name="pareto_budgets") or tuple(sorted(iso))
    for C in pb:
        if C not in iso:
            continue
        best = {}
        for f, e in iso[C].items():
            size = analysis.best_size(e)
            fam = "mdlm" if f in PAIR else f
            g, out = trained[(C, size, fam)]
            r = g.names.index(f)  # the first seed of the family in its group
            best[f] = (out["graphdef"], jax.tree.map(lambda x, r=r: x[r], out["params"]))
        fp = checkpoint.config_fingerprint({"c": c.to_dict(), "C": C,
                                            "best": {f: iso[C][f] for f in iso[C]}})
        pareto[C] = checkpoint.cached(
            os.path.join(workdir, "ckpt", f"pareto_C{C:.3g}"), fingerprint=fp,
            compute=lambda best=best: pareto_points(c, lang, best, int(c.seed)),
            name=f"pareto C={C:.3g}")

    m = analysis.summarise(c, runs, pareto, floor)
    m["data_unigram"] = data_unigram
    if lang is not None:  # where model samples sit between the language and its n-grams
        m["reference"] = {k: metrics.sample_quality(lang, x) for k, x in
                          metrics.reference_samples(lang, int(c.num_samples), L,
                                                    SAMPLE_KEY + int(c.seed)).items()}
    m["runs"] = runs
    m["f_fwd"] = f_fwd
    cl = analysis.claims(m, c)
    figs = report.figures(m, workdir)
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=int(c.seed),
                                 config=c, metrics=m, claims=cl,
                                 runtime_s=time.time() - t_start, figures=figs)
    logging.info("\n%s", report.tables(m))
    logging.info("\n%s", results.claims_table(cl))
    logging.info("results: %s (%.0f s)", path, time.time() - t_start)
    return results.load_results(workdir) if path else {"metrics": m, "claims": cl}
