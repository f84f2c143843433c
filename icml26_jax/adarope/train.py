"""The AdaRoPE experiment: pretraining arms, context extension, evaluation, claims.

``run(config, workdir)``:

* Stage A (pretraining on T1 at L0): every arm x seed is one model; all of them are stacked
  on a leading axis and trained by ONE jitted program (``vmap`` over models, ``lax.scan``
  over ``config.chunk`` steps). The arms of a seed share the initial network weights and
  every training batch, so they differ only in the position encoding.
* Stage B (extension to L' = s L0): the frozen RoPE backbone of each seed with every
  extension arm; YaRN-learned-uniform and AdaRoPE-ext train only {ρ, ψ, c} on
  ``num_train`` fixed sequences of length L'.
* Evaluation: accuracy at every ``eval_lens`` and per distance bucket (T1-distance), the
  head-role analysis and the learned log-frequencies; then claims, figures, results.json.

Each stage checkpoints after every chunk (``core.checkpoint``), so a killed run resumes and
ends with the same numbers (batches are pure functions of (seed, step)). T1's MQAR batches are
built on the host (NumPy, ``np.random.default_rng((seed, step))``); T3's fresh HMM batches are
drawn inside the training program (:class:`LMStream`: ``lm.hmm.sample_jax`` from
``fold_in(fold_in(key(seed), salt), step)``, the HMM a jit argument).
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx

from icml26_jax.adarope import analysis, baselines, configs, optim, report, rope, tasks
from icml26_jax.adarope.lm_stream import (  # noqa: F401  (re-exported: train's T3 API)
    LM_CONTINUE_SALT, LM_DATA_PROTOCOL, LM_PRETRAIN_SALT, LMStream, _lm_batches, lm_batches,
    lm_language, step_indices)
from icml26_jax.adarope.optim import dict_config  # noqa: F401  (re-exported)
from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.lm import hmm as hmm_lib
from icml26_jax.lm import train as lm_train
from icml26_jax.lm.transformer import Transformer, TransformerConfig

PAPER = "adarope"
EVAL_SEED = 10_000
DISTANCE_SEED = 20_000


# --------------------------------------------------------------------------- config


def validate_config(c) -> None:
    """ValueError naming the bad field and the allowed values."""
    arms = list(c.arms)
    bad = [a for a in arms if a not in baselines.PRETRAIN_ARMS]
    if bad or not arms:
        raise ValueError(f"config.arms={arms}: unknown {bad}; allowed: "
                         f"{', '.join(baselines.PRETRAIN_ARMS)}")
    ext = list(c.extension.arms)
    bad = [a for a in ext if a not in baselines.EXTENSION_ARMS]
    if bad:
        raise ValueError(f"config.extension.arms={ext}: unknown {bad}; allowed: "
                         f"{', '.join(baselines.EXTENSION_ARMS)}")
    if ext and c.extension.backbone not in arms:
        raise ValueError(f"config.extension.backbone={c.extension.backbone!r} must be one of "
                         f"config.arms={arms}")
    if c.extension.backbone not in ("rope",) and ext:
        raise ValueError("config.extension.backbone must be 'rope' (the extension tables "
                         "start from the RoPE schedule)")
    bad = [t for t in c.tasks if t not in configs.TASKS]
    if bad:
        raise ValueError(f"config.tasks={list(c.tasks)}: unknown {bad}; allowed: "
                         f"{', '.join(configs.TASKS)}")
    for name in ("steps", "batch_size", "chunk", "num_seeds", "eval_size", "eval_batch"):
        v = c[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"config.{name} must be a positive integer, got {v!r}")
    if c.steps % c.chunk:
        raise ValueError(f"config.steps={c.steps} must be a multiple of config.chunk={c.chunk}")
    if c.extension.steps % c.extension.chunk:
        raise ValueError(f"config.extension.steps={c.extension.steps} must be a multiple of "
                         f"config.extension.chunk={c.extension.chunk}")
    if c.eval_size % c.eval_batch:
        raise ValueError(f"config.eval_size={c.eval_size} must be a multiple of "
                         f"config.eval_batch={c.eval_batch}")
    if not c.base > 1:
        raise ValueError(f"config.base must be > 1, got {c.base}")
    lens = list(c.eval_lens)
    if not lens or c.train_len not in lens:
        raise ValueError(f"config.eval_lens={lens} must include config.train_len="
                         f"{c.train_len}")
    if ext and c.extension.length != int(round(c.extension.factor * c.train_len)):
        raise ValueError(f"config.extension.length={c.extension.length} must equal "
                         f"factor x train_len = {c.extension.factor} x {c.train_len}")
    if "t1_distance" in c.tasks:
        if c.distance_len < 4 or c.distance_len % 4:
            raise ValueError(f"config.distance_len={c.distance_len} must be a positive multiple "
                             "of 4 (buckets [0, D/4), [D/4, D/2), [D/2, D))")
        for bucket in tasks.distance_buckets(c.distance_len):
            _mqar(c, np.random.default_rng(0), 1, c.distance_len, bucket)
    for T in lens + [c.extension.length]:
        _mqar(c, np.random.default_rng(0), 1, T)  # raises a ValueError naming the length
    if "t3" in c.tasks:
        bad = [a for a in c.lm.arms if a not in baselines.PRETRAIN_ARMS]
        if bad or not list(c.lm.arms):
            raise ValueError(f"config.lm.arms={list(c.lm.arms)}: unknown {bad}; allowed: "
                             f"{', '.join(baselines.PRETRAIN_ARMS)}")
        if c.lm.steps % c.chunk or c.lm.continue_steps % c.extension.chunk:
            raise ValueError(f"config.lm.steps={c.lm.steps} must be a multiple of config.chunk"
                             f"={c.chunk} and config.lm.continue_steps={c.lm.continue_steps} "
                             f"of config.extension.chunk={c.extension.chunk}")


def model_config(c) -> TransformerConfig:
    m = c.model
    return TransformerConfig(
        vocab_size=tasks.mqar_vocab_size(c.mqar.num_keys, c.mqar.num_values),
        d_model=m.d_model, num_layers=m.num_layers, num_heads=m.num_heads,
        mlp_ratio=m.mlp_ratio, rope_base=c.base)


def rope_config(c, arm: str, ext_arm: str = "none") -> rope.RopeConfig:
    m = c.model
    kw = dict(baselines.PRETRAIN_ARMS[arm], **baselines.EXTENSION_ARMS[ext_arm])
    e = c.extension
    return rope.RopeConfig(head_dim=m.d_model // m.num_heads, num_heads=m.num_heads,
                           base=c.base, train_len=c.train_len,
                           ext_factor=e.factor if ext_arm != "none" else 1.0,
                           yarn_alpha=e.yarn_alpha, yarn_beta=e.yarn_beta, **kw)


def _mqar(c, rng, batch, length, bucket=None):
    q = c.mqar
    return tasks.mqar_batch(rng, batch, length, q.num_keys, q.num_values, q.num_queries,
                            distance_bucket=bucket,
                            repeat_distractors=q.repeat_distractors)


# --------------------------------------------------------------------------- models


def build(c, rope_cfgs: list[rope.RopeConfig], seeds: list[int], *,
          vocab_size: int | None = None, unroll_layers: bool = False):
    """Models ``n`` = (rope_cfgs[n], seeds[n]) stacked: ``(graphdef, params, rest)``.

    Models of one seed get identical network weights (the position encoders have no random
    initialisation), whatever their rotary kind. ``unroll_layers`` unrolls the layer scan
    (same numbers), which XLA's cost analysis needs to count every layer's FLOPs.
    """
    mcfg = dataclasses.replace(model_config(c), unroll_layers=unroll_layers)
    if vocab_size is not None:
        mcfg = dataclasses.replace(mcfg, vocab_size=vocab_size)
    graphdef, ps, rs = None, [], []
    for rc, seed in zip(rope_cfgs, seeds):
        model = Transformer(mcfg, rngs=nnx.Rngs(seed),
                            position_encoder_factory=rope.make_factory(rc))
        g, p, r = nnx.split(model, nnx.Param, ...)
        if graphdef is None:
            graphdef = g
        elif g != graphdef:
            raise AssertionError("arms must share one graph definition")
        ps.append(p)
        rs.append(r)
    stack = lambda *xs: jnp.stack(xs)  # noqa: E731
    return graphdef, jax.tree.map(stack, *ps), jax.tree.map(stack, *rs)


def with_backbone(ext_params, backbone, index):
    """Extension models: position-encoding params from ``ext_params`` (their extension init),
    every other weight from the trained ``backbone`` of seed ``index[n]`` for model n."""
    return jax.tree_util.tree_map_with_path(
        lambda path, new, old: new if optim.param_name(path) in optim.PE_PARAMS
        else old[index], ext_params, backbone)


def _tie_layers(rest):
    """``grads -> grads``: PE gradients of layer-tied models (YaRN-learned-uniform) summed over
    the layer axis, so their per-layer copies stay equal (one λ vector and one temperature
    for the whole network)."""
    def fn(grads):
        def tie(path, g, flag):
            name = optim.param_name(path)
            if name not in optim.PE_PARAMS:
                return g
            return flag * jnp.broadcast_to(jnp.sum(g, 0, keepdims=True), g.shape) + (
                1 - flag) * g

        flag = _layer_tie_flag(rest)
        return jax.tree_util.tree_map_with_path(lambda p, g: tie(p, g, flag), grads)

    return fn


def _layer_tie_flag(rest):
    v = rest["blocks"]["layers"]["attn"]["pos"]["share_layers"][...]
    return v[0]


def models_mesh(num_models: int):
    """``core.mesh.runs_mesh``: the stacked models are independent, so they are sharded over
    its devices on every process (``core.mesh.shard_replicas`` pads them to a multiple of
    the mesh size) with no communication."""
    return mesh_lib.runs_mesh(num_models)


def _num_models(tree) -> int:
    return jax.tree.leaves(tree)[0].shape[0]


def _train_program(graphdef, optimizer, tie_layers: bool, stream: tuple | None = None):
    """jit(models, chunk) -> models after the chunk; vmap over models.

    ``stream=None``: the chunk is the batches ``[n, N, B, T]`` (host-built, an argument).
    ``stream=(salt, batch_size, length)``: the program takes ``(seeds [N], hmm, steps [n])``
    in their place and draws the batches inside (:func:`lm_batches`).
    """

    def one(params, rest, opt_state, batches):
        step = lm_train.make_train_step(
            graphdef, optimizer, grad_transform=_tie_layers(rest) if tie_layers else None)

        def body(carry, batch):
            p, o = carry
            p, o, m = step(p, rest, o, batch)
            return (p, o), (m["loss"], m["accuracy"])

        (params, opt_state), (loss, acc) = jax.lax.scan(body, (params, opt_state), batches)
        return params, opt_state, loss, acc

    if stream is None:
        return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, 1)), donate_argnums=(0, 2))
    salt, batch_size, length = stream

    def program(params, rest, opt_state, seeds, hmm, steps):
        # The whole chunk's batches at once: one HMM scan over positions per chunk.
        batches = lm_batches(hmm, seeds, steps, salt, batch_size, length)  # [N, n, B, T]
        return jax.vmap(one)(params, rest, opt_state, batches)

    return jax.jit(program, donate_argnums=(0, 2))


def _train(c, graphdef, params, rest, optimizer, batch_fn, *, steps, chunk, ckpt_dir,
           fingerprint, name, tie_layers=False):
    """Trains all stacked models for ``steps``; resumable.

    ``batch_fn``: ``(start, n) -> batches [n, N, B, T]`` built on the host, or an
    :class:`LMStream`, whose batches the training program draws itself.

    Returns:
      ``(params, loss [steps, N])`` with params as host (NumPy) arrays.
    """
    mesh = models_mesh(_num_models(params))
    with jax.set_mesh(mesh):
        return _train_on_mesh(c, graphdef, params, rest, optimizer, batch_fn, mesh,
                              steps=steps, chunk=chunk, ckpt_dir=ckpt_dir,
                              fingerprint=fingerprint, name=name, tie_layers=tie_layers)


def _train_on_mesh(c, graphdef, params, rest, optimizer, batch_fn, mesh, *, steps, chunk,
                   ckpt_dir, fingerprint, name, tie_layers):
    N = _num_models(params)
    shard = lambda t, dim=0: mesh_lib.shard_replicas(t, mesh, N, dim)  # noqa: E731
    params, rest = shard(params), shard(rest)
    # The optimiser state of the padded models, sharded like them (no host round trip).
    opt_state = jax.jit(jax.vmap(optimizer.init),
                        out_shardings=jax.NamedSharding(mesh, jax.P(mesh_lib.RUNS)))(params)
    logs = {"losses": np.zeros((steps, N), np.float32)}
    if isinstance(batch_fn, LMStream):  # drawn in the program from (seed, step)
        s = batch_fn
        program = _train_program(graphdef, optimizer, tie_layers,
                                 (s.salt, s.batch_size, s.length))
        seeds_s = shard(np.asarray(s.seeds, np.int32))
        hmm = jax.tree.map(lambda x: mesh_lib.replicate(np.asarray(x), mesh),
                           hmm_lib.device_hmm(s.hmm))
        chunk_args = lambda s0, n: (seeds_s, hmm,  # noqa: E731
                                    mesh_lib.replicate(step_indices(s0, n), mesh))
    else:
        program = _train_program(graphdef, optimizer, tie_layers)
        chunk_args = lambda s0, n: (shard(batch_fn(s0, n), 1),)  # noqa: E731  [n, N_pad, B, T]

    def advance(state, logs, s0, n):
        p, o = state
        p, o, loss, acc = program(p, rest, o, *chunk_args(s0, n))
        loss, acc = mesh_lib.to_host((loss, acc), N)  # [N, n]
        logs["losses"][s0:s0 + n] = loss.T
        return (p, o), f"loss {np.round(loss[:, -1], 3)} acc {np.round(acc[:, -1], 3)}"

    (params, _), logs = checkpoint.run_chunks(
        ckpt_dir, fingerprint=fingerprint, state=(params, opt_state), logs=logs, steps=steps,
        chunk=chunk, advance=advance, place=shard, name=name)
    return mesh_lib.to_host(params, N), logs["losses"]


def _expand(batch: dict, index: np.ndarray, axis: int) -> dict:
    """Per-seed batches ``[..., S, ...]`` -> per-model ``[..., N, ...]`` (model n uses seed
    ``index[n]``)."""
    return {k: np.take(v, index, axis=axis) for k, v in batch.items()}


def _pretrain_batches(c, seeds, index):
    keys = ("tokens", "targets", "mask")

    def fn(start, n):
        per_step = []
        for t in range(start, start + n):
            per_seed = [_mqar(c, np.random.default_rng((s, t)), c.batch_size, c.train_len)
                        for s in seeds]
            per_step.append({k: np.stack([b[k] for b in per_seed]) for k in keys})
        stacked = {k: np.stack([b[k] for b in per_step]) for k in keys}  # [n, S, B, T]
        return _expand(stacked, index, 1)

    return fn


def _extension_batches(c, seeds, index):
    e = c.extension
    keys = ("tokens", "targets", "mask")
    pools = [_mqar(c, np.random.default_rng((s, 1)), e.num_train, e.length) for s in seeds]

    def fn(start, n):
        out = {k: [] for k in keys}
        for t in range(start, start + n):
            rows = [np.random.default_rng((s, 2, t)).choice(e.num_train, e.batch_size,
                                                             replace=False) for s in seeds]
            for k in keys:
                out[k].append(np.stack([p[k][r] for p, r in zip(pools, rows)]))
        return _expand({k: np.stack(v) for k, v in out.items()}, index, 1)

    return fn


# --------------------------------------------------------------------------- evaluation


def _eval_program(graphdef):
    def one(params, rest, batch):
        return lm_train.eval_step(graphdef, params, rest, batch)

    return jax.jit(jax.vmap(one, in_axes=(0, 0, None)))


def evaluate(c, graphdef, params, rest, eval_sets: dict) -> dict:
    """Accuracy and mean NLL ``[N]`` of every model on every named set of MQAR sequences."""
    program = _eval_program(graphdef)
    N = _num_models(params)
    mesh = models_mesh(N)
    out = {}
    with jax.set_mesh(mesh):
        params, rest = (mesh_lib.shard_replicas(t, mesh, N) for t in (params, rest))
        for name, data in eval_sets.items():
            tot = None
            for i in range(0, data["tokens"].shape[0], c.eval_batch):
                b = {k: mesh_lib.replicate(data[k][i:i + c.eval_batch], mesh)
                     for k in ("tokens", "targets", "mask")}
                r = mesh_lib.to_host(program(params, rest, b), N)
                tot = r if tot is None else jax.tree.map(np.add, tot, r)
            out[name] = {"accuracy": tot["correct"] / tot["count"],
                         "nll": tot["nll"] / tot["count"],
                         "nll_by_pos": tot["nll_by_pos"] / np.maximum(tot["count_by_pos"], 1)}
    return out


def eval_sets(c, lengths) -> dict:
    sets = {f"len_{T}": _mqar(c, np.random.default_rng(EVAL_SEED + T), c.eval_size, T)
            for T in lengths}
    if "t1_distance" in c.tasks:
        for i, bucket in enumerate(tasks.distance_buckets(c.distance_len)):
            sets[f"dist_{bucket[0]}_{bucket[1]}"] = _mqar(
                c, np.random.default_rng(DISTANCE_SEED + i), c.eval_size, c.distance_len,
                bucket)
    return sets


def _map_models(fn, params, rest, *shared):
    """``fn(params_n, rest_n, *shared)`` for every stacked model n, the models sharded over
    every device (``shared``: host arrays replicated to every model); host NumPy ``[N, ...]``."""
    N = _num_models(params)
    mesh = models_mesh(N)
    with jax.set_mesh(mesh):
        params, rest = (mesh_lib.shard_replicas(t, mesh, N) for t in (params, rest))
        shared = tuple(mesh_lib.replicate(x, mesh) for x in shared)
        in_axes = (0, 0) + (None,) * len(shared)
        return mesh_lib.to_host(jax.jit(jax.vmap(fn, in_axes=in_axes))(params, rest, *shared),
                                N)


def learned_log_freqs(graphdef, params, rest) -> np.ndarray:
    """Effective log-frequencies ``[N, L, H, P]`` of stacked models (-inf where no rotation)."""
    def one(p, r):
        layers = nnx.merge(graphdef, p, r).blocks.layers
        g, st = nnx.split(layers)
        return jax.vmap(lambda s: _logf(nnx.merge(g, s).attn.pos))(st)

    return _map_models(one, params, rest)


def _logf(pos):
    return jnp.where(pos.rotate[...] > 0, pos.log_frequencies(), -jnp.inf)


def head_analysis(c, graphdef, params, rest) -> dict:
    """Head scores ``[N, L, H]`` on ``analysis_size`` sequences at L0."""
    batch = _mqar(c, np.random.default_rng(EVAL_SEED - 1), c.analysis_size, c.train_len)

    def one(p, r, tokens):
        _, inter = lm_train.forward(graphdef, p, r, {"tokens": tokens},
                                    return_intermediates=True)
        return inter["attention"]

    attn = _map_models(one, params, rest, batch["tokens"])
    scores = [analysis.head_scores(a, batch) for a in attn]
    return {k: np.stack([s[k] for s in scores]) for k in scores[0]}


# --------------------------------------------------------------------------- run


def run(config, workdir: str) -> dict:
    """Runs the experiment; returns the results dict (also written to ``workdir``)."""
    c = config
    t_start = time.time()
    validate_config(c)
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    ckroot = os.path.join(os.path.abspath(workdir), "checkpoints")
    fp = checkpoint.config_fingerprint(c)
    seeds = [c.seed + i for i in range(c.num_seeds)]
    S, arms = len(seeds), list(c.arms)

    # Stage A: pretraining.
    cfgs = [rope_config(c, a) for a in arms for _ in seeds]
    index = np.array([i % S for i in range(len(cfgs))])
    graphdef, params0, rest = build(c, cfgs, [seeds[i] for i in index])
    logf0 = learned_log_freqs(graphdef, params0, rest)  # before training donates params0
    optimizer = optim.make_optimizer(dict_config(c.opt, steps=c.steps), train="all")
    logging.info("stage A: %d arms x %d seeds, %d steps at L0=%d", len(arms), S, c.steps,
                 c.train_len)
    t0 = time.time()
    params, losses = _train(c, graphdef, params0, rest, optimizer,
                            _pretrain_batches(c, seeds, index), steps=c.steps, chunk=c.chunk,
                            ckpt_dir=os.path.join(ckroot, "pretrain"), fingerprint=fp,
                            name="pretrain")
    time_a = time.time() - t0
    sets = eval_sets(c, list(c.eval_lens))
    ev = evaluate(c, graphdef, params, rest, sets)
    logf = learned_log_freqs(graphdef, params, rest)
    heads = head_analysis(c, graphdef, params, rest)
    stage_a = {"arms": arms, "seeds": seeds, "eval": ev, "log_freq": logf,
               "log_freq_init": logf0, "heads": heads, "loss": losses}

    # Stage B: extension of the frozen RoPE backbone.
    stage_b = None
    e = c.extension
    if list(e.arms):
        ext_arms = list(e.arms)
        b = arms.index(e.backbone)
        backbone = jax.tree.map(lambda x: x[b * S:(b + 1) * S], params)
        ecfgs = [rope_config(c, e.backbone, a) for a in ext_arms for _ in seeds]
        eindex = np.array([i % S for i in range(len(ecfgs))])
        egraph, eparams, erest = build(c, ecfgs, [seeds[i] for i in eindex])
        if egraph != graphdef:
            raise AssertionError("extension models must share the backbone's graph")
        eparams = with_backbone(eparams, backbone, eindex)
        trained = [i for i, a in enumerate(ext_arms) if a in baselines.TRAINED_EXTENSIONS]
        t0 = time.time()
        losses_b = None
        if trained:
            sel = np.array([i * S + s for i in trained for s in range(S)])
            take = lambda t: jax.tree.map(lambda x: x[sel], t)  # noqa: E731
            eopt = optim.make_optimizer(dict_config(c.opt, steps=e.steps), train="pe")
            tparams, losses_b = _train(
                c, egraph, take(eparams), take(erest), eopt,
                _extension_batches(c, seeds, eindex[sel]), steps=e.steps, chunk=e.chunk,
                ckpt_dir=os.path.join(ckroot, "extension"), fingerprint=fp, name="extension",
                tie_layers=True)
            eparams = _set_rows(eparams, sel, tparams)
        time_b = time.time() - t0
        lens_b = sorted(set(list(c.eval_lens) + [e.length]))
        ev_b = evaluate(c, egraph, eparams, erest, eval_sets(c, lens_b))
        stage_b = {"arms": ext_arms, "eval": ev_b, "loss": losses_b,
                   "log_freq": learned_log_freqs(egraph, eparams, erest), "time_s": time_b}

    stage_c = lm_stage(c, seeds, ckroot, fp) if "t3" in c.tasks else None

    step_time = time_a / max(c.steps, 1)
    metrics, claims = report.evaluate(c, stage_a, stage_b, stage_c)
    metrics["time_stage_a_s"] = time_a
    metrics["step_time_s_all_models"] = step_time
    metrics["devices"] = jax.device_count()
    if distributed.is_primary():
        report.plot_all(c, stage_a, stage_b, workdir)
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed,
                                 config=c, metrics=metrics, claims=claims, runtime_s=runtime)
    if distributed.is_primary():
        print(report.summary(c, metrics, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": metrics,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}


# --------------------------------------------------------------------------- T3 (LM)


def _lm_eval_sets(c, hmm_lang, lengths) -> dict:
    """Fixed T3 evaluation sets (NumPy ``hmm.sample``, drawn once per length)."""
    return {f"len_{T}": lm_train.next_token_batch(
        hmm_lib.sample(hmm_lang, c.lm.eval_size, T + 1, seed=EVAL_SEED + T)) for T in lengths}


def _lm_pool_batches(seeds, index, batch_size, *, salt: int, pool):
    """Host batches ``[n, N, B, T]`` of rows of a fixed ``pool`` per seed (``{seed: tokens
    [M, T+1]}``), the rows a pure function of (seed, salt, step)."""
    def fn(start, n):
        steps = []
        for t in range(start, start + n):
            per_seed = []
            for s in seeds:
                rows = np.random.default_rng((s, salt, t)).choice(
                    len(pool[s]), batch_size, replace=False)
                per_seed.append(lm_train.next_token_batch(pool[s][rows]))
            steps.append({k: np.stack([b[k] for b in per_seed]) for k in per_seed[0]})
        stacked = {k: np.stack([b[k] for b in steps]) for k in steps[0]}
        return _expand(stacked, index, 1)

    return fn


def lm_stage(c, seeds, ckroot: str, fp: int) -> dict:
    """T3: pretraining arms on the HMM language at L0, NLL at longer lengths; extension of the
    RoPE backbone (frozen: YaRN vs AdaRoPE-ext), and continued pretraining of all weights."""
    L = c.lm
    lang = lm_language(c)
    fp = checkpoint.config_fingerprint({"fp": int(fp), "data": LM_DATA_PROTOCOL})
    S, arms = len(seeds), list(L.arms)
    cfgs = [rope_config(c, a) for a in arms for _ in seeds]
    index = np.array([i % S for i in range(len(cfgs))])
    g, p, r = build(c, cfgs, [seeds[i] for i in index], vocab_size=L.vocab_size)
    opt = optim.make_optimizer(dict_config(c.opt, steps=L.steps))
    logging.info("T3: %d arms x %d seeds, %d LM steps at L0=%d", len(arms), S, L.steps,
                 c.train_len)
    p, loss = _train(c, g, p, r, opt,
                     _lm_batches(lang, seeds, index, c.train_len, c.batch_size,
                                 salt=LM_PRETRAIN_SALT),
                     steps=L.steps, chunk=c.chunk, ckpt_dir=os.path.join(ckroot, "lm"),
                     fingerprint=fp, name="lm")
    lens = sorted(set(list(L.eval_lens) + [c.extension.length]))
    sets = _lm_eval_sets(c, lang, lens)
    out = {"arms": arms, "seeds": seeds, "eval": evaluate(c, g, p, r, sets), "loss": loss,
           "entropy_rate": hmm_lib.entropy_rate(lang)}
    e = c.extension
    if "rope" not in arms:
        return out
    b = arms.index("rope")
    backbone = jax.tree.map(lambda x: x[b * S:(b + 1) * S], p)
    pool = {s: hmm_lib.sample(lang, e.num_train, e.length + 1, seed=EVAL_SEED * 7 + s)
            for s in seeds}
    for mode, train_what, steps in (("ext", "pe", e.steps), ("cont", "all", L.continue_steps)):
        ext_arms = ["yarn", "adarope-ext"]
        ecfgs = [rope_config(c, "rope", a) for a in ext_arms for _ in seeds]
        eindex = np.array([i % S for i in range(len(ecfgs))])
        eg, ep, er = build(c, ecfgs, [seeds[i] for i in eindex], vocab_size=L.vocab_size)
        ep = with_backbone(ep, backbone, eindex)
        eopt = optim.make_optimizer(dict_config(c.opt, steps=steps), train=train_what)
        # Frozen extension trains only AdaRoPE-ext (YaRN has nothing to learn); continued
        # pretraining trains both, all weights, on fresh samples at L'.
        sel = np.arange(len(ecfgs)) if mode == "cont" else np.arange(S, 2 * S)
        take = lambda t, sel=sel: jax.tree.map(lambda x: x[sel], t)  # noqa: E731
        bf = (_lm_pool_batches(seeds, eindex[sel], e.batch_size, salt=4, pool=pool)
              if mode == "ext" else
              _lm_batches(lang, seeds, eindex[sel], e.length, e.batch_size,
                          salt=LM_CONTINUE_SALT))
        tp, _ = _train(c, eg, take(ep), take(er), eopt, bf, steps=steps, chunk=e.chunk,
                       ckpt_dir=os.path.join(ckroot, f"lm_{mode}"), fingerprint=fp,
                       name=f"lm_{mode}")
        ep = _set_rows(ep, sel, tp)
        out[mode] = {"arms": ext_arms, "eval": evaluate(c, eg, ep, er, sets)}
    return out


def _set_rows(full, rows, part):
    """``full`` (pytree, leading model axis) with rows ``rows`` replaced by ``part``."""
    def one(f, p):
        f = np.array(f)
        f[rows] = np.asarray(p)
        return f

    return jax.tree.map(one, full, part)
