"""The ``gpu`` variant (issue 43): a valid config, planned at <= 20 min on one H100 from the
FLOPs of its real training programs, and its models train for 2 steps on CPU.

The FLOPs come from ``core.timing.step_flops`` on ``train._program`` (the chunk program
``train.train_replicas`` runs, batches drawn inside) over one step of every replica of a stage
together, lowered (not compiled) with the layer scan unrolled: XLA's cost analysis counts a
scanned body once, which would count one block of the 16.
"""

import jax
import numpy as np
import pytest

from icml26_jax.core import timing
from icml26_jax.core.optim import promotion_safe
from icml26_jax.grad_smoothing import configs, train
from icml26_jax.lm import hmm as hmm_lib
from tests.compile_passes import module_fixture

# The 2-step run checks finiteness and movement, which hold unoptimised; lowering, hence the
# FLOP counts, is unaffected by the compiler passes.
_few_passes = module_fixture()

# Compiling the stage programs, an evaluation (256 validation + 64 probe sequences, every
# replica) and an orbax checkpoint every `log_every` steps, the timing of claim 5: the
# evaluations are ~3 % of the training FLOPs, the rest fixed costs.
EVAL_ALLOWANCE_S = 180.0


@pytest.fixture(scope="module")
def gpu():
    c = configs.get_config("gpu")
    return c, train.language(c)


def test_gpu_config_is_valid_and_scales_the_default():
    c = configs.get_config("gpu")
    train.validate_config(c)
    d = configs.get_config("default")
    assert c.variant == "gpu"
    assert c.steps > d.steps and c.depth > d.depth and c.model.d_model > d.model.d_model
    # The protocol is the default's: the same language, batch, grids, seeds and arms.
    for k in ("hmm", "seq_len", "batch_size", "lrs", "eval_seeds", "selection_seed", "alpha",
              "mode", "base", "opt", "val_size", "probe_size"):
        assert c[k] == d[k], k


def _program_args(c, lang, seeds, n_steps, *, shapes_only: bool, unroll: bool = False):
    build = lambda: train.build(c, seeds, unroll_layers=unroll)  # noqa: E731
    g, p, r = jax.eval_shape(build) if shapes_only else build()
    tx = promotion_safe(train.make_tx(c, 1.0, np.eye(c.depth, dtype=np.float32), c.steps))
    o = (jax.eval_shape if shapes_only else lambda f, x: f(x))(jax.vmap(tx.init), p)
    R = len(seeds)
    mats = np.stack([train.arm_matrix(c, "smoothed")] * R).astype(np.float32)
    return g, (p, r, o, np.full(R, max(c.lrs), np.float32), mats,
               np.asarray(seeds, np.int32), hmm_lib.device_hmm(lang),
               train.step_indices(0, n_steps))


def test_gpu_run_is_planned_within_20_minutes_on_one_h100(gpu):
    c, lang = gpu
    stages = {"stage 1": 2 * len(c.lrs), "stage 2": len(train.ARMS) * len(c.eval_seeds)}
    flops = {}
    for name, R in stages.items():
        g, args = _program_args(c, lang, list(range(R)), 1, shapes_only=True, unroll=True)
        flops[name] = timing.step_flops(train._program(c, g, c.steps), *args)
    # A step of 15 replicas is 2.5x one of 6 (vmapped replicas, FLOPs linear in them).
    np.testing.assert_allclose(flops["stage 2"] / flops["stage 1"], 15 / 6, rtol=0.01)
    total = sum(timing.h100_seconds(f, c.steps) for f in flops.values()) + EVAL_ALLOWANCE_S
    assert total <= 20 * 60, (flops, total)


def test_gpu_models_train_two_steps_on_cpu(gpu):
    """Two steps at batch 2 and length 16 (model sizes kept) of one smoothed replica through
    the training program (batches drawn inside): finite losses, moved parameters (step 0 has
    learning rate 0 under the warm-up, step 1 moves them)."""
    c, lang = gpu
    c = train._with(c, batch_size=2, seq_len=16)
    g, args = _program_args(c, lang, [0], 2, shapes_only=False)
    before = jax.tree.map(np.array, args[0])
    params, _, loss, norms = train._program(c, g, c.steps)(*args)
    assert loss.shape == (1, 2) and np.all(np.isfinite(np.asarray(loss)))
    assert np.all(np.isfinite(np.asarray(norms)))
    assert any(not np.array_equal(a, np.asarray(b))
               for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(params)))
