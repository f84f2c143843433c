"""The ``gpu`` variant (issue 43): a valid config, planned at <= 20 min on one H100 from the
FLOPs of its real training programs, and its models train for 2 steps on CPU.

The FLOPs come from ``core.timing.step_flops`` on ``train._train_program`` (the chunk
program ``train._train`` runs) over one step of every model of a stage together, lowered (not
compiled) with the layer scan unrolled (XLA's cost analysis counts a scanned body once).
Stages, as ``train.run`` builds them: A (T1 pretraining, every arm x seed), B (the trained
extension arms on the frozen RoPE backbones), and T3: LM pretraining (batches drawn in the
program), its extension (AdaRoPE-ext) and continued pretraining (YaRN and AdaRoPE-ext).
"""

import jax
import numpy as np
import pytest

from icml26_jax.adarope import baselines, configs, optim, train
from icml26_jax.core import timing
from icml26_jax.lm import hmm as hmm_lib

# Compiling ~6 programs, evaluating 15 + 18 + 15 models on 512 sequences per length and
# bucket, the head analysis, and an orbax checkpoint per chunk: all fixed costs next to
# launch-bound steps of ~2 ms.
EVAL_ALLOWANCE_S = 180.0


def test_gpu_config_is_valid_and_scales_the_default():
    c = configs.get_config("gpu")
    train.validate_config(c)
    d = configs.get_config("default")
    assert c.variant == "gpu" and c.steps == 3000 > d.steps and "t3" in c.tasks
    # The default's task, model, arms and seeds: only compute and evaluation size change.
    for k in ("arms", "base", "model", "mqar", "train_len", "batch_size", "opt", "eval_lens",
              "num_seeds", "extension", "lm"):
        assert c[k] == d[k], k


def _stages(c):
    """(name, rope configs, model seeds, optimiser, batch, length, vocab, tie, salt, steps)
    of every training stage ``train.run`` runs for ``c``."""
    seeds = [c.seed + i for i in range(c.num_seeds)]
    S, e, L = len(seeds), c.extension, c.lm
    per_seed = lambda arms, ext=False: (  # noqa: E731
        [train.rope_config(c, "rope", a) if ext else train.rope_config(c, a)
         for a in arms for _ in seeds], seeds * len(arms))
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=c.steps))
    pe = optim.make_optimizer(train.dict_config(c.opt, steps=e.steps), train="pe")
    lm_opt = optim.make_optimizer(train.dict_config(c.opt, steps=L.steps))
    cont = optim.make_optimizer(train.dict_config(c.opt, steps=L.continue_steps))
    trained = [a for a in e.arms if a in baselines.TRAINED_EXTENSIONS]
    v = L.vocab_size
    out = [("A", *per_seed(c.arms), opt, c.batch_size, c.train_len, None, False, None,
            c.steps),
           ("B", *per_seed(trained, True), pe, e.batch_size, e.length, None, True, None,
            e.steps)]
    if "t3" in c.tasks:
        out += [("T3", *per_seed(L.arms), lm_opt, c.batch_size, c.train_len, v, False,
                 train.LM_PRETRAIN_SALT, L.steps),
                ("T3 ext", *per_seed(["adarope-ext"], True), pe, e.batch_size, e.length, v,
                 False, None, e.steps),
                ("T3 cont", *per_seed(["yarn", "adarope-ext"], True), cont, e.batch_size,
                 e.length, v, False, train.LM_CONTINUE_SALT, L.continue_steps)]
    return out


def _program_args(c, stage, n_steps, *, shapes_only: bool, unroll: bool = False):
    _, cfgs, seeds, opt, B, T, vocab, tie, salt, _ = stage
    build = lambda: train.build(c, cfgs, seeds, vocab_size=vocab,  # noqa: E731
                                unroll_layers=unroll)
    g, p, r = jax.eval_shape(build) if shapes_only else build()
    o = jax.eval_shape(jax.vmap(opt.init), p) if shapes_only else jax.vmap(opt.init)(p)
    if salt is None:  # host batches, preloaded as arguments
        rng = np.random.default_rng(0)
        toks = rng.integers(0, vocab or train.model_config(c).vocab_size,
                            (n_steps, len(seeds), B, T)).astype(np.int32)
        batches = {"tokens": toks, "targets": toks, "mask": np.ones(toks.shape, np.float32)}
        return train._train_program(g, opt, tie), (p, r, o, batches)
    lang = train.lm_language(c)
    return (train._train_program(g, opt, tie, (salt, B, T)),
            (p, r, o, np.asarray(seeds, np.int32), hmm_lib.device_hmm(lang),
             train.step_indices(0, n_steps)))


def test_gpu_run_is_planned_within_20_minutes_on_one_h100():
    c = configs.get_config("gpu")
    stages = _stages(c)
    assert [s[0] for s in stages] == ["A", "B", "T3", "T3 ext", "T3 cont"]
    flops = {}
    total = EVAL_ALLOWANCE_S
    for stage in stages:
        fn, args = _program_args(c, stage, 1, shapes_only=True, unroll=True)
        flops[stage[0]] = timing.step_flops(fn, *args)
        total += timing.h100_seconds(flops[stage[0]], stage[-1])
    assert flops["A"] > 1e9, flops  # the 15 models' step, every layer counted
    assert total <= 20 * 60, (flops, total)


@pytest.mark.parametrize("name", ["A", "T3"])
def test_gpu_models_train_two_steps_on_cpu(name):
    """Two steps at batch 2 (model sizes and length kept) of every model of stage A (MQAR
    batches from the host) and of T3 (HMM batches drawn in the program): finite losses and
    moved parameters."""
    c = configs.get_config("gpu")
    c.batch_size = 2
    stage = {s[0]: s for s in _stages(c)}[name]
    if name == "A":  # the real MQAR batches of the run
        index = np.arange(len(stage[2])) % c.num_seeds
        fn, (p, r, o, _) = _program_args(c, stage, 2, shapes_only=False)
        args = (p, r, o, train._pretrain_batches(c, [c.seed + i for i in range(c.num_seeds)],
                                                 index)(0, 2))
    else:
        fn, args = _program_args(c, stage, 2, shapes_only=False)
    before = jax.tree.map(np.array, args[0])
    params, _, loss, _ = fn(*args)
    assert loss.shape == (len(stage[2]), 2) and np.all(np.isfinite(np.asarray(loss)))
    assert any(not np.array_equal(a, np.asarray(b))
               for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(params)))
