"""The partitioned optimiser: PE params Adam at 10x lr without decay; matrices decay."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.adarope import optim, rope, train
from icml26_jax.adarope.configs import get_config


def _params():
    c = get_config("smoke")
    g, p, r = train.build(c, [train.rope_config(c, "adarope")], [0])
    return c, jax.tree.map(lambda x: x[0], p)


def _by_label(tree, labels, label):
    return [x for x, lab in zip(jax.tree.leaves(tree), jax.tree.leaves(labels)) if lab == label]


def test_labels():
    _, p = _params()
    labels = optim.pe_param_labels(p)
    names = {optim.param_name(path): lab
             for path, lab in jax.tree_util.tree_leaves_with_path(labels)}
    assert names["log_freq"] == names["log_temp"] == names["log_interp"] == "pe"
    assert names["kernel"] == names["embedding"] == "decay"
    assert names["scale"] == "no_decay"


def test_zero_gradient_step_decays_matrices_only():
    c, p = _params()
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=100))
    state = opt.init(p)
    zeros = jax.tree.map(jnp.zeros_like, p)
    for _ in range(10):  # past the 5-step warm-up, so the lr is positive
        upd, state = opt.update(zeros, state, p)
    labels = optim.pe_param_labels(p)
    for u in _by_label(upd, labels, "pe") + _by_label(upd, labels, "no_decay"):
        assert float(jnp.abs(u).max()) == 0.0
    dec = _by_label(upd, labels, "decay")
    par = _by_label(p, labels, "decay")
    with jax.numpy_dtype_promotion("standard"):  # optax schedules mix floats and int counts
        lr = float(optim.schedule(c.opt.lr, 100)(9))
    for u, x in zip(dec, par):
        np.testing.assert_allclose(u, -lr * c.opt.weight_decay * x, rtol=1e-5, atol=1e-9)


def test_pe_lr_is_ten_times():
    c, p = _params()
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=100))
    state = opt.init(p)
    # The first Adam step moves every coordinate by lr * sign(g) (bias-corrected, eps aside).
    g = jax.tree.map(lambda x: jnp.full_like(x, 1e-3), p)
    for _ in range(3):
        upd, state = opt.update(g, state, p)
    labels = optim.pe_param_labels(p)
    pe = np.abs(np.asarray(_by_label(upd, labels, "pe")[0])).max()
    ns = np.abs(np.asarray(_by_label(upd, labels, "no_decay")[0])).max()
    np.testing.assert_allclose(pe / ns, 10.0, rtol=1e-3)


def test_frozen_backbone():
    c, p = _params()
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=100), train="pe")
    state = opt.init(p)
    g = jax.tree.map(lambda x: jnp.full_like(x, 1.0), p)
    for _ in range(3):
        upd, state = opt.update(g, state, p)
    labels = optim.pe_param_labels(p)
    assert all(float(jnp.abs(u).max()) == 0 for u in _by_label(upd, labels, "decay"))
    assert all(float(jnp.abs(u).max()) > 0 for u in _by_label(upd, labels, "pe"))
    with pytest.raises(ValueError, match="train='some'"):
        optim.make_optimizer(train.dict_config(c.opt, steps=10), train="some")


def test_pe_module_labels_in_plain_module():
    m = rope.RotaryPositional(rope.RopeConfig(kind="adarope"))
    _, p, _ = nnx.split(m, nnx.Param, ...)
    assert set(jax.tree.leaves(optim.pe_param_labels(p))) == {"pe"}
