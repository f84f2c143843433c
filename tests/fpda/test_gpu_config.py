"""The ``gpu`` variant (issue 43): a valid config, planned at <= 20 min on one H100 from the
FLOPs of its real training steps, and its networks train for 2 steps on CPU.

The FLOPs come from ``core.timing.step_flops`` on ``train.sup_setup``'s step of each of the
three networks and ``train.dapo_setup``'s step, at the gpu batch (lowered, not compiled; the
data's row count does not change a step's FLOPs: the steps draw their batch from it). The
DAPO step's two PPO epochs run in a ``lax.scan`` that XLA counts once; its body is the
45 -> 64 -> 64 policy MLP, a negligible part of the step (the detector's encode and 8
decodes per image run outside the scan). The package's conftest compiles with few XLA
passes: the 2-step run checks finiteness and movement, which hold unoptimised.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.core import timing
from icml26_jax.fpda import configs, train

# Host work per seed beside the training steps: ForgeBench-S is generated in NumPy / OpenCV
# (2.1 ms per image, measured on CPU; 24,600 images), and compiling, B4's search, the
# evaluation of 7 methods on 3 splits and their host metrics (scikit-learn / SciPy) are given
# 3 minutes (106-120 s per seed on 2 CPU cores in the default run, device work included).
DATA_S_PER_IMAGE = 2.1e-3
EVAL_ALLOWANCE_S = 180.0


def _gpu():
    c = configs.get_config("gpu")
    train.normalise_config(c)
    return c


@pytest.fixture(scope="module")
def small_data():
    """Every split at the gpu image size, 16 images each (the steps' shapes do not depend on
    the split's size)."""
    c = _gpu()
    c.n_train, c.n_val, c.n_test = 16, 16, 16
    return train.load_data(c, None)


def test_gpu_config_is_valid_and_scales_the_default():
    c = _gpu()
    configs.validate(c)
    d = configs.get_config("default")
    assert c.variant == "gpu" and tuple(c.methods) == tuple(d.methods)
    assert c.steps_sup > d.steps_sup and c.width > d.width and c.n_train > d.n_train
    assert tuple(c.seeds) == (0, 1, 2)
    # The task, the test splits and the reward are the default's.
    for k in ("img_size", "n_val", "n_test", "refine_cost", "max_refine", "text_reliability",
              "group_samples"):
        assert c[k] == d[k], k


def _dapo(c, det, train_split):
    dim = jax.eval_shape(
        lambda p, x: train.policy_state_raw(det.model(p), det.model(p).encode(x)),
        det.params, train_split.images[:1]).shape[1]
    mu, sd = np.zeros((dim,), np.float32), np.ones((dim,), np.float32)
    _, pparams, tx, one = train.dapo_setup(c, det, dim)
    return one, (pparams, tx.init(pparams)), train.dapo_args(c, det, train_split, mu, sd)


def test_gpu_run_is_planned_within_20_minutes_on_one_h100(small_data):
    c = _gpu()
    seconds = 0.0
    flops = {}
    for name in train.NETS:
        graphdef, params, rest, tx, one = train.sup_setup(c, name)
        if name == "supernet":
            det = train.Detector(c, name, graphdef, params, rest)  # DAPO's frozen detector
        flops[name] = timing.step_flops(one, (params, tx.init(params)), jnp.int32(0),
                                        *train.sup_args(c, name, small_data["train"]))
        seconds += timing.h100_seconds(flops[name], int(c.steps_sup))
    # The prompt machinery costs the supernet more than the prompt-free network.
    assert flops["supernet"] > flops["no_prompt"]
    one, carry, args = _dapo(c, det, small_data["train"])
    flops["dapo"] = timing.step_flops(one, carry, jnp.int32(0), *args)
    seconds += timing.h100_seconds(flops["dapo"], int(c.steps_dapo))
    images = int(c.n_train) + int(c.n_val) + 3 * int(c.n_test)
    per_seed = seconds + DATA_S_PER_IMAGE * images + EVAL_ALLOWANCE_S
    total = len(c.seeds) * per_seed
    assert total <= 20 * 60, (flops, seconds, total)


def _moved(before, after):
    return any(not np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)))


def test_gpu_networks_train_two_steps_on_cpu(small_data):
    """Two supervised steps of the supernet (random routes, depths and text) and two DAPO
    updates on it, at batch 4 (network width kept): finite losses and rewards, moved
    parameters."""
    c = _gpu()
    c.batch, c.dapo_batch = 4, 4
    graphdef, params, rest, tx, one = train.sup_setup(c, "supernet")
    before = jax.tree.map(np.array, params)
    carry = (jax.tree.map(jnp.copy, params), tx.init(params))
    args = train.sup_args(c, "supernet", small_data["train"])
    for i in range(2):
        carry, logs = one(carry, jnp.int32(i), *args)
        assert np.isfinite(float(logs["loss"]))
    assert _moved(before, carry[0])
    det = train.Detector(c, "supernet", graphdef, carry[0], rest)
    one, pcarry, args = _dapo(c, det, small_data["train"])
    before = jax.tree.map(np.array, pcarry[0])
    for i in range(2):
        pcarry, logs = one(pcarry, jnp.int32(i), *args)
        assert np.isfinite(float(logs["reward"])) and np.isfinite(float(logs["entropy"]))
    assert _moved(before, pcarry[0])
