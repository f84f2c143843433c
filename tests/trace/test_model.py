"""TRACE networks: the K-expert flow prior (jvp log-det, per-dimension structure, routing, no
shared parameters) and the ELBO (finite, decreasing, deterministic)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from icml26_jax.core.optim import promotion_safe
from icml26_jax.trace import model

K, D, L, H = 3, 4, 2, 16


@pytest.fixture(scope="module")
def prior():
    return model.ExpertPrior(K, D, L, H, rngs=nnx.Rngs(0))


def _zs(key, lead):
    k1, k2 = jax.random.split(key)
    return (jax.random.normal(k1, lead + (L * D,)), jax.random.normal(k2, lead + (D,)))


def test_jvp_logdet_equals_the_diagonal_of_the_full_jacobian(prior):
    z_hist, z_t = _zs(jax.random.key(1), (K, 2))
    eps, logdet = prior.routed(z_hist, z_t)
    jac = np.asarray(jax.jacfwd(lambda zt: prior.routed(z_hist, zt)[0])(z_t))  # [K,m,d,K,m,d]
    for k in range(K):
        for j in range(2):
            np.testing.assert_allclose(np.asarray(logdet[k, j]),
                                       np.log(np.abs(np.diagonal(jac[k, j, :, k, j, :]))),
                                       rtol=1e-5, atol=1e-6)


def test_each_flow_sees_only_its_own_coordinate_of_z_t(prior):
    """d eps_{k,i} / d z_{t,j} = 0 for j != i (the Jacobian is diagonal, so the log-det is
    the sum of its diagonal's logs), and every diagonal entry is non-zero."""
    z_hist, z_t = _zs(jax.random.key(2), (K, 3))
    jac = np.array(jax.jacfwd(lambda zt: prior.routed(z_hist, zt)[0])(z_t))
    for k in range(K):
        for j in range(3):
            block = jac[k, j, :, k, j, :]
            off = block - np.diag(np.diag(block))
            assert np.all(off == 0.0)
            assert np.all(np.diag(block) != 0.0)
    # and no cross-sample or cross-expert coupling
    jac[np.arange(K)[:, None], np.arange(3)[None, :], :, np.arange(K)[:, None],
        np.arange(3)[None, :], :] = 0.0
    assert np.all(jac == 0.0)


def test_routed_equals_a_loop_over_experts_and_all_experts(prior):
    z_hist, z_t = _zs(jax.random.key(3), (K, 6))
    eps, logdet = prior.routed(z_hist, z_t)
    for k in range(K):
        e_all, ld_all = prior.all_experts(z_hist[k], z_t[k])  # [K, 6, d]
        np.testing.assert_allclose(np.asarray(e_all[k]), np.asarray(eps[k]), rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(np.asarray(ld_all[k]), np.asarray(logdet[k]), rtol=1e-5,
                                   atol=1e-6)
    lp = prior.log_prob_all(z_hist[0], z_t[0])
    assert lp.shape == (K, 6)
    want = jnp.sum(-0.5 * eps[0] ** 2 - 0.5 * np.log(2 * np.pi) + logdet[0], axis=-1)
    np.testing.assert_allclose(np.asarray(lp[0]), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_experts_share_no_parameters(prior):
    """Perturbing expert 1's tensors changes expert 1's outputs only."""
    graphdef, params = nnx.split(prior, nnx.Param)
    leaves = jax.tree.leaves(params)
    assert all(leaf.shape[:2] == (K, D) for leaf in leaves)
    bumped = jax.tree.map(lambda p: p.at[1].add(0.3), params)
    z_hist, z_t = _zs(jax.random.key(4), (5,))
    before = np.asarray(prior.log_prob_all(z_hist, z_t))
    after = np.asarray(nnx.merge(graphdef, bumped).log_prob_all(z_hist, z_t))
    np.testing.assert_array_equal(before[[0, 2]], after[[0, 2]])
    assert np.all(before[1] != after[1])


def test_routed_rejects_a_wrong_expert_axis(prior):
    z_hist, z_t = _zs(jax.random.key(5), (K + 1, 2))
    with pytest.raises(ValueError, match="leading expert axis"):
        prior.routed(z_hist, z_t)
    with pytest.raises(ValueError, match="hidden"):
        model.ExpertPrior(K, D, L, 0, rngs=nnx.Rngs(0))


def _setup(seed=0, m=16):
    net = model.TraceVAE(K, D, L, 32, H, rngs=nnx.Rngs(params=seed))
    graphdef, params = nnx.split(net, nnx.Param)
    # a learnable toy: domain k shifts the last step by k (the mechanism the experts learn)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((K, 256, L + 1, D)).astype(np.float32)
    x[:, :, -1, :] += 0.5 * x[:, :, -2, :] + np.arange(K, dtype=np.float32)[:, None, None]
    return graphdef, params, jnp.asarray(x), m


def _train(graphdef, params, x, m, steps):
    tx = promotion_safe(optax.adamw(2e-3, weight_decay=1e-4))

    @jax.jit
    def step(p, opt, i):
        key = jax.random.fold_in(jax.random.key(7), i)
        idx = jax.random.randint(key, (K, m), 0, x.shape[1])
        xb = jnp.take_along_axis(x, idx[:, :, None, None], axis=1)
        (loss, aux), g = jax.value_and_grad(model.loss_fn, has_aux=True)(
            p, graphdef, xb, jax.random.fold_in(key, 1), 2e-3, 2e-2)
        u, opt = tx.update(g, opt, p)
        return optax.apply_updates(p, u), opt, loss

    opt = tx.init(params)
    losses = []
    for i in range(steps):
        params, opt, loss = step(params, opt, i)
        losses.append(float(loss))
    return params, np.asarray(losses)


def test_loss_is_finite_decreases_and_is_deterministic():
    graphdef, params, x, m = _setup()
    loss, aux = model.loss_fn(params, graphdef, x[:, :m], jax.random.key(0), 2e-3, 2e-2)
    assert np.isfinite(float(loss))
    np.testing.assert_allclose(float(loss), float(aux["recon"] + 2e-3 * aux["kl_normal"]
                                                  + 2e-2 * aux["kl_trans"]), rtol=1e-6)
    p1, l1 = _train(graphdef, params, x, m, 200)
    assert np.all(np.isfinite(l1))
    assert l1[-20:].mean() < 0.5 * l1[:20].mean()
    _, l2 = _train(graphdef, params, x, m, 20)  # same seed, same numbers
    np.testing.assert_array_equal(l1[:20], l2)


def test_loss_rejects_a_wrong_number_of_steps():
    graphdef, params, x, m = _setup()
    with pytest.raises(ValueError, match="L \\+ 1"):
        model.loss_fn(params, graphdef, x[:, :m, :2], jax.random.key(0), 2e-3, 2e-2)


def test_loss_variants_agree_jacfwd_logdet_and_masked_routing():
    """The benchmark's references compute the same loss: the full-Jacobian log-det and the
    all-experts-with-a-mask routing equal the jvp log-det with routed slices."""
    graphdef, params, x, m = _setup()
    key = jax.random.key(3)
    ref = model.loss_fn(params, graphdef, x[:, :m], key, 2e-3, 2e-2)[0]
    for kw in ({"jacobian": "jacfwd"}, {"routing": "masked"}):
        got = model.loss_fn(params, graphdef, x[:, :m], key, 2e-3, 2e-2, **kw)[0]
        np.testing.assert_allclose(float(got), float(ref), rtol=1e-5)
    with pytest.raises(ValueError, match="routing"):
        model.loss_fn(params, graphdef, x[:, :m], key, 2e-3, 2e-2, routing="dense")


def test_encoder_and_expert_emissions_sharded_over_every_device_equal_one_device():
    """train.evaluate's placement: the sequences of an ensemble (T * B = 15 rows, padded to
    the 8 devices) sharded over a data mesh, the model replicated; gathered back unpadded."""
    from icml26_jax.core import mesh as mesh_lib
    from icml26_jax.trace import baselines, train

    net = model.TraceVAE(K, D, L, H, H, rngs=nnx.Rngs(params=jax.random.key(0)))
    graphdef, params = nnx.split(net, nnx.Param)
    encode = jax.jit(lambda p, x: model.encode_mean(graphdef, p, x))
    x = np.random.default_rng(0).normal(size=(5, 3, L + 1, D)).astype(np.float32)  # [T, B]
    mesh = mesh_lib.data_mesh()
    assert mesh.devices.size == 8
    on = train.on_mesh(params, mesh)
    z1 = train.encode_rows(encode, params, x)
    z8 = train.encode_rows(encode, on, x, mesh)
    assert z8.shape == x.shape
    np.testing.assert_allclose(z8, z1, rtol=1e-6, atol=1e-6)
    p1, s1 = baselines.pooled_loglik(graphdef, params, z1, (0, 2))
    p8, s8 = baselines.pooled_loglik(graphdef, on, z1, (0, 2), mesh)
    assert s8.shape == (5, 2, 3)
    np.testing.assert_allclose(s8, s1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(p8, p1, rtol=1e-5, atol=1e-5)
