"""The ``gpu`` variant (issue 43): it validates, its planned H100 time from the measured FLOPs
of its real training steps is <= 20 minutes, and its step runs at its model size on CPU.

FLOPs come from XLA's cost analysis of ``train.train_step`` lowered at the gpu sizes (nothing
compiles), one program per (H, mode) the stages run, with the layer scan unrolled so that
every layer is counted (a scan body is counted once); the model is built abstractly
(``nnx.eval_shape``) and the bank is a small one (batches gather from it: its size does not
change a step's FLOPs).
"""

import collections
import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from icml26_jax.baguan_ts import configs, prior, train
from icml26_jax.baguan_ts import model as model_lib
from icml26_jax.core import timing

BUDGET_S = 20 * 60


@pytest.fixture(scope="module")
def gpu():
    c = configs.get_config("gpu")
    train.normalise_config(c)
    train.validate_config(c)
    return c


def test_gpu_config_validates_and_scales_the_default(gpu):
    d = configs.get_config("default")
    for k in ("d", "layers", "ffn"):
        assert gpu.model[k] > d.model[k], k
    assert gpu.train.batch > d.train.batch
    assert gpu.train.trunk_steps > d.train.trunk_steps
    assert gpu.train.branch_steps > d.train.branch_steps
    # Inference and evaluation are the default's: the claims compare like with like.
    for k in ("M", "K", "mF", "period", "context_len", "rag", "mode", "real_tasks",
              "n_synthetic", "loss"):
        assert gpu[k] == d[k], k
    assert train.model_config(gpu).bins == train.model_config(d).bins


def test_gpu_config_plans_at_most_20_minutes_on_one_h100(gpu):
    c = gpu
    bank = train.bank_to_device(prior.make_bank(int(c.seed), 8, train.prior_config(c)))
    trunk = [train.step_plan(c, s, True) for s in range(int(c.train.trunk_steps))]
    branch = [train.step_plan(c, s, False) for s in range(int(c.train.branch_steps))]
    stages = [("trunk", False, 0.0, trunk), ("co_on", bool(c.reliability_bias),
                                             float(c.co_inject_p), branch),
              ("co_off", False, 0.0, branch)]
    flops = {}  # (reliability bias, H, mode) -> FLOPs of one step

    def step_flops(rb, H, mode, co):
        if (rb, H, mode) not in flops:
            cfg = dataclasses.replace(train.model_config(c, rb), unroll_layers=True)
            graphdef, params = nnx.split(nnx.eval_shape(
                lambda: model_lib.BaguanTS(cfg, rngs=nnx.Rngs(0))), nnx.Param)
            tx = train.make_tx(c, 1000, model_lib.count_params(params))
            flops[rb, H, mode] = timing.step_flops(
                train.train_step, graphdef, params, jax.eval_shape(tx.init, params), bank,
                jax.random.key(0), tx=tx, bcfg=train.batch_config(c, co), H=H, mode=mode,
                loss=str(c.loss))
        return flops[rb, H, mode]

    planned = 0.0
    for _, rb, co, plans in stages:
        counts = collections.Counter(plans)
        total = sum(n * step_flops(rb, H, mode, co) for (H, mode), n in counts.items())
        planned += timing.h100_seconds(total / len(plans), len(plans))
    # Evaluation (the model on every task and ablation, the statsmodels fits on the host),
    # the bank and the compiles: 8 minutes allowed (README).
    assert planned + 8 * 60 <= BUDGET_S, f"{planned:.0f} s of training planned"
    assert planned > 60  # the variant is sized to use the accelerator, not to idle on it


def test_two_gpu_sized_steps_run_on_cpu(gpu):
    """The trunk's 3D step at the gpu model size (d 192, 12 layers), batch 1 (gpu: 32), on a
    small bank of the full prior: two steps through ``train.train_step``, finite losses,
    every parameter array moves but the reliability bias (off in the trunk)."""
    c = gpu.copy_and_resolve_references()
    c.train.batch = 1
    bank = train.bank_to_device(prior.make_bank(int(c.seed), 8, train.prior_config(c)))
    graphdef, params = train.build(c, False, int(c.seed))
    before = jax.tree_util.tree_flatten_with_path(jax.tree.map(np.array, params))[0]
    tx = train.make_tx(c, int(c.train.trunk_steps), model_lib.count_params(params))
    opt = tx.init(params)
    H, mode = next(p for p in (train.step_plan(c, s, True) for s in range(100)) if p[1] == "3d")
    key = jax.random.key(0)
    for s in range(2):  # the schedule's step-0 learning rate is 0: step 1 moves the weights
        params, opt, loss = train.train_step(graphdef, params, opt, bank,
                                             jax.random.fold_in(key, s), tx=tx,
                                             bcfg=train.batch_config(c), H=H, mode=mode,
                                             loss=str(c.loss))
        assert np.isfinite(float(loss))
    still = [jax.tree_util.keystr(path) for (path, b), a in
             zip(before, jax.tree.leaves(params)) if np.allclose(np.asarray(a), b)]
    assert all("alpha" in name for name in still), still
