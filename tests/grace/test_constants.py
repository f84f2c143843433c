"""No compiled training chunk or evaluation step of the smoke run embeds a large constant.

An array a step closes over instead of taking as an argument is baked into its program: the
program grows with the data and recompiles for new data. Each step is lowered (not run) with
the arguments ``train.run`` gives it at the ``smoke`` config, built by the same functions.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.testing import assert_no_large_constant as _check
from icml26_jax.grace import configs, controller, data, export, train


@pytest.fixture(scope="module")
def smoke():
    """The smoke config, its data and the untrained models of every phase (as ``run``)."""
    c = configs.get_config("smoke")
    train.normalise_config(c)
    train.validate_config(c)
    seed = int(c.seed)
    splits = data.load_digit_splits(int(c.split_seed))
    rng = np.random.default_rng((seed, 0))
    d = {s: data.make_vqa(splits, s, int(c[f"n_{s}"]), rng) for s in ("train", "val", "test")}
    vision = nnx.state(train.vision_tower(c), nnx.Param)
    teacher = train.split_trainable(train.with_vision(train.build(c, "teacher", seed=seed + 1),
                                                      vision))
    student = train.split_trainable(train.with_vision(train.build(c, "student", seed=seed + 2),
                                                      vision))
    sg, sfz, s_tr = student
    quant = train.split_trainable(train.quantised_from(
        c, nnx.state(nnx.merge(sg, sfz, s_tr), nnx.Param), seed + 2))
    return c, d, {"teacher": teacher, "student": student, "quantised": quant}


def test_train_chunks_embed_no_large_constant(smoke):
    c, d, models = smoke
    n = int(c.chunk)
    bs = [data.batch_at(d["train"], int(c.batch), int(c.seed) + 7, s) for s in range(n)]
    g, p = nnx.split(train.vision_tower(c), nnx.Param)
    tx = train.fp_tx(c, int(c.vision_steps), float(c.vision_lr))
    _check("vision chunk", train.make_vision_chunk(g, tx), p, tx.init(p),
           np.stack([b.images for b in bs]), np.stack([b.digits for b in bs]))
    batches = train._stack([data.batch_at(d["train"], int(c.batch), int(c.seed), s)
                            for s in range(n)])
    Tq = int(c.qat_steps)
    phases = [("teacher_fp", "teacher", "ce", train.fp_tx(c, int(c.teacher_steps))),
              ("student_Ts", "student", "ce", train.fp_tx(c, int(c.student_steps))),
              ("student_fp", "student", "ce", train.qat_tx(c, Tq))]
    phases += [(arm, "quantised", train.MODES[arm], train.qat_tx(c, Tq))
               for arm in train.QAT_ARMS]
    for name, which, mode, tx in phases:
        g, frozen, trainable = models[which]
        program = train.make_chunk(mode, c, g, tx, models["teacher"])
        _check(f"{name} chunk", program, trainable, tx.init(trainable),
               controller.ib_init(train.ib_config(c)), frozen, batches, jnp.arange(n))


def test_evaluation_embeds_no_large_constant(smoke):
    c, d, models = smoke
    mesh = mesh_lib.data_mesh()
    eb = int(c.eval_batch)
    # One evaluation batch as ``core.mesh.batched`` shards it (rounded up to the mesh).
    idx = np.arange(mesh_lib.padded_size(eb, mesh, mesh_lib.DATA) if mesh else eb) % eb
    prompt, start = data.prompt_of(d["test"])
    for which, (g, frozen, trainable) in models.items():
        frozen, trainable = export.on_mesh(mesh, (frozen, trainable))
        _check(f"_greedy({which})", train._greedy, g, frozen, trainable,
               d["test"].images[idx], prompt[idx], start[idx])
    g, frozen, trainable = models["teacher"]
    frozen, trainable = export.on_mesh(mesh, (frozen, trainable))
    _check("_logits(teacher)", train._logits, g, frozen, trainable, d["val"].images[idx],
           d["val"].tokens[idx])
