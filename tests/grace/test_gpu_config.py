"""The ``gpu`` variant (issue 43): a valid config, planned at <= 20 min on one H100 from the
FLOPs of its real training chunks, and its models train for 2 steps on CPU.

The FLOPs come from ``core.timing.step_flops`` on ``train.make_chunk`` /
``train.make_vision_chunk`` over one step at the gpu batch (lowered, not compiled). The
phases that share a program up to the optimiser are bounded by the larger one: the FP
student's T_s and ``student_fp`` steps by ``qat_ce``'s (the same CE step plus fake-quant),
``qat_dkd``'s by ``grace``'s (the same DKD step plus RCKA and the controller).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.core import timing
from icml26_jax.grace import configs, controller, data, train
from tests.compile_passes import module_fixture

# The 2-step run checks finiteness and movement, which hold unoptimised; few XLA passes
# compile the gpu-size steps ~5x faster (lowering, hence the FLOP counts, is unaffected).
_few_passes = module_fixture()

# Per seed: compiling the 7 programs, the 3,000-question greedy evaluation of 7 arms, the
# export (their FLOPs are < 1 % of training's), a checkpoint every `chunk` steps and the
# batches assembled on the host (0.25 ms per step at batch 256, measured on CPU: 7 s).
EVAL_ALLOWANCE_S = 120.0


@pytest.fixture(scope="module")
def gpu():
    """The gpu config and its untrained models of every phase, built as ``train.run`` does."""
    c = configs.get_config("gpu")
    train.normalise_config(c)
    seed = int(c.seed)
    vision = nnx.state(train.vision_tower(c), nnx.Param)
    teacher = train.split_trainable(train.with_vision(train.build(c, "teacher", seed=seed + 1),
                                                      vision))
    sg, sfz, s_tr = train.split_trainable(train.with_vision(
        train.build(c, "student", seed=seed + 2), vision))
    quant = train.split_trainable(train.quantised_from(
        c, nnx.state(nnx.merge(sg, sfz, s_tr), nnx.Param), seed + 2))
    d = data.make_vqa(data.load_digit_splits(int(c.split_seed)), "train", int(c.batch),
                      np.random.default_rng((seed, 0)))
    return c, d, teacher, quant


def test_gpu_config_is_valid_and_scales_the_default():
    c = configs.get_config("gpu")
    train.normalise_config(c)
    train.validate_config(c)
    default = configs.get_config("default")
    assert c.variant == "gpu" and c.seeds == (0, 1, 2)
    assert c.teacher_steps == c.student_steps + c.qat_steps  # equally long (amendment)
    assert c.teacher.d > default.teacher.d and c.student.d > default.student.d
    assert c.qat_steps > default.qat_steps
    # The evaluation sets are the benchmark's, never scaled.
    assert (c.n_val, c.n_test, c.split_seed) == (default.n_val, default.n_test,
                                                 default.split_seed)


def _vision(c, d, steps):
    g, p = nnx.split(train.vision_tower(c), nnx.Param)
    tx = train.fp_tx(c, int(c.vision_steps), float(c.vision_lr))
    bs = [data.batch_at(d, len(d.tokens), int(c.seed) + 7, s) for s in range(steps)]
    return (train.make_vision_chunk(g, tx), p, tx.init(p), np.stack([b.images for b in bs]),
            np.stack([b.digits for b in bs]))


def _chunk(c, d, mode, model, teacher, tx, steps):
    g, frozen, trainable = model
    bs = train._stack([data.batch_at(d, len(d.tokens), int(c.seed), s) for s in range(steps)])
    return (train.make_chunk(mode, c, g, tx, teacher), trainable, tx.init(trainable),
            controller.ib_init(train.ib_config(c)), frozen, bs, jnp.arange(steps))


def test_gpu_run_is_planned_within_20_minutes_on_one_h100(gpu):
    c, d, teacher, quant = gpu
    fn, *args = _vision(c, d, 1)
    f_vision = timing.step_flops(fn, *args)
    Tq = int(c.qat_steps)
    flops = {}
    for name, model, mode, tx in (
            ("teacher_fp", teacher, "ce", train.fp_tx(c, int(c.teacher_steps))),
            ("qat_ce", quant, "ce", train.qat_tx(c, Tq)),
            ("grace", quant, "grace", train.qat_tx(c, Tq))):
        fn, *args = _chunk(c, d, mode, model, teacher, tx, 1)
        flops[name] = timing.step_flops(fn, *args)
    # The teacher is the larger model: > 2x the student's FLOPs per step.
    assert flops["teacher_fp"] > 2 * flops["qat_ce"] and flops["grace"] > flops["qat_ce"]
    per_seed = (timing.h100_seconds(f_vision, int(c.vision_steps))
                + timing.h100_seconds(flops["teacher_fp"], int(c.teacher_steps))
                + timing.h100_seconds(flops["qat_ce"], int(c.student_steps) + 2 * Tq)
                + timing.h100_seconds(flops["grace"], 2 * Tq))
    total = len(c.seeds) * (per_seed + EVAL_ALLOWANCE_S)
    assert total <= 20 * 60, (flops, per_seed, total)


def _moved(before, after):
    return any(not np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)))


def test_gpu_models_train_two_steps_on_cpu(gpu):
    """Two steps at batch 4 (model sizes kept) of the vision tower, the teacher (the FP CE step
    of the teacher and the student phases) and the GRACE student (fake-quant student, teacher
    forward, DKD, RCKA, the controller): finite losses and moved parameters (step 0 has
    learning rate 0 under the warmup, step 1 moves them)."""
    c, d, teacher, quant = gpu
    d = data.take(d, np.arange(4))
    fn, p, o, images, digits = _vision(c, d, 2)
    new_p, _, loss = fn(jax.tree.map(jnp.copy, p), o, images, digits)
    assert np.all(np.isfinite(np.asarray(loss))) and _moved(p, new_p)
    for model, mode, tx in ((teacher, "ce", train.fp_tx(c, int(c.teacher_steps))),
                            (quant, "grace", train.qat_tx(c, int(c.qat_steps)))):
        fn, tr, *args = _chunk(c, d, mode, model, teacher, tx, 2)
        new_tr, _, ib, logs = fn(jax.tree.map(jnp.copy, tr), *args)
        for k in ("loss", "ce", "gdkd", "rcka"):
            assert np.all(np.isfinite(np.asarray(logs[k]))), (mode, k)
        assert _moved(tr, new_tr), mode
        if mode == "grace":
            assert np.all(np.asarray(logs["gdkd"]) > 0) and int(ib.count) == 2
