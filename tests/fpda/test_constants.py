"""Issue 43: no jitted training or evaluation step of the FPDA run embeds a large constant.

An array a step closes over instead of taking as an argument is baked into its program: the
program grows with the data and recompiles for new data. Each step ``train.run`` uses is built
with ``train``'s own builders on the smoke config's data and only lowered (nothing runs).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.core.testing import assert_no_large_constant as _check
from icml26_jax.fpda import baselines, configs, train
from icml26_jax.fpda import data as data_lib


@pytest.fixture(scope="module")
def smoke():
    c = configs.get_config("smoke")
    train.normalise_config(c)
    return c, train.load_data(c, None)


# fixed_prompt trains with no_prompt's step (supernet=False) on another network.
@pytest.mark.parametrize("name", ("supernet", "no_prompt"))
def test_supervised_step_takes_its_data_as_arguments(smoke, name):
    c, splits = smoke
    _, params, _, tx, one = train.sup_setup(c, name)
    _check(f"supervised step ({name})", one, (params, tx.init(params)), jnp.int32(0),
           *train.sup_args(c, name, splits["train"]))


def _supernet(c):
    graphdef, params, rest, _, _ = train.sup_setup(c, "supernet")
    return train.Detector(c, "supernet", graphdef, params, rest)


def _state_dim(det, images) -> int:
    """The policy state's width (train_dapo measures its statistics with a forward pass)."""
    s = jax.eval_shape(lambda p, x: train.policy_state_raw(det.model(p), det.model(p).encode(x)),
                       det.params, images[:1])
    return s.shape[1]


def test_dapo_step_takes_its_data_as_arguments(smoke):
    c, splits = smoke
    det = _supernet(c)
    dim = _state_dim(det, splits["train"].images)
    mu, sd = np.zeros((dim,), np.float32), np.ones((dim,), np.float32)
    _, pparams, tx, one = train.dapo_setup(c, det, dim)
    _check("DAPO step", one, (pparams, tx.init(pparams)), jnp.int32(0),
           *train.dapo_args(c, det, splits["train"], mu, sd))


def test_evaluation_steps_take_their_data_as_arguments(smoke):
    c, splits = smoke
    det = _supernet(c)
    b = int(c.eval_batch)
    split = splits["test_id"].take(np.arange(b) % len(splits["test_id"]))  # one eval batch
    route, r = baselines.all_routes(b)
    ids, _ = data_lib.with_text(split, 0.7, 1)
    _check("eval forward", det.fwd, det.params, split.images, route, r, None, None)
    _check("eval forward (text)", det.fwd, det.params, split.images, route, r, ids,
           np.ones((b,), np.float32))
    _check("all actions (B4)", train.make_all_actions_fn(det.graphdef, det.rest, c),
           det.params, split.images, split.masks, split.labels)
    _check("noise variance map", baselines.noise_variance_map, split.images)
    dim = _state_dim(det, split.images)
    pgraph, pparams, _, _ = train.dapo_setup(c, det, dim)
    _check("greedy policy", train.make_greedy(pgraph), pparams, np.zeros((b, dim), np.float32))
