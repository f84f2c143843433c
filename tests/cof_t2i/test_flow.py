"""CoF-T2I spec §Tests 5: the flow-matching path, the oracle velocity, the time shift, and the
Euler sampler's first-order convergence on an analytic linear field."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.cof_t2i import flow


def test_interpolation_endpoints_and_oracle_velocity():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    z0 = jax.random.normal(k1, (4, 3, 8, 8, 8))
    eps = jax.random.normal(k2, (4, 3, 8, 8, 8))
    np.testing.assert_allclose(flow.interpolate(z0, eps, jnp.zeros(4)), z0)
    np.testing.assert_allclose(flow.interpolate(z0, eps, jnp.ones(4)), eps)
    t = jax.random.uniform(k3, (4,))
    zt = flow.interpolate(z0, eps, t)
    # d z_t / d t is the target, by finite differences
    h = 1e-3
    fd = (flow.interpolate(z0, eps, t + h) - flow.interpolate(z0, eps, t - h)) / (2 * h)
    np.testing.assert_allclose(fd, flow.target_velocity(z0, eps), atol=2e-3)
    assert float(flow.flow_loss(eps - z0, z0, eps)) == 0.0
    assert float(flow.flow_loss(jnp.zeros_like(zt), z0, eps)) > 0.5
    # the same t for every frame of an example
    one = flow.interpolate(z0[:1], eps[:1], t[:1])
    for f in range(3):
        np.testing.assert_allclose(one[0, f], (1 - t[0]) * z0[0, f] + t[0] * eps[0, f],
                                   rtol=1e-6, atol=1e-6)


def test_time_shift_is_monotone_and_fixes_the_ends():
    t = jnp.linspace(0.0, 1.0, 101)
    for s in (0.5, 1.0, 3.0):
        ts = flow.shift_time(t, s)
        assert float(ts[0]) == 0.0 and float(ts[-1]) == pytest.approx(1.0)
        assert bool(jnp.all(jnp.diff(ts) > 0))
    np.testing.assert_allclose(flow.shift_time(t, 1.0), t)
    assert float(flow.shift_time(jnp.float32(0.5), 3.0)) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="shift must be > 0"):
        flow.shift_time(t, 0.0)
    with pytest.raises(ValueError, match="sampling steps must be a positive integer"):
        flow.time_grid(0)
    lt = flow.logit_normal_t(jax.random.key(1), 10_000)
    assert 0.0 < float(lt.min()) and float(lt.max()) < 1.0
    assert abs(float(jnp.median(lt)) - 0.5) < 0.02


def test_euler_converges_at_first_order_on_a_linear_field():
    """dz/dt = a z + b t has the closed form below; halving the step halves the error."""
    a, b = 0.7, -0.4
    z1 = jnp.array([1.3, -0.2], jnp.float32)  # errors 1e-2..1e-3 >> float32 eps

    def exact_at0(z1):
        # z(t) = C e^{a t} - b t / a - b / a^2, with C fixed by z(1) = z1
        c = (z1 + b / a + b / a ** 2) * np.exp(-a)
        return c - b / a ** 2

    def vel(z, t):
        return a * z + b * t

    errs = [float(jnp.max(jnp.abs(flow.euler(vel, z1, n) - exact_at0(z1))))
            for n in (16, 32, 64)]
    ratios = [errs[0] / errs[1], errs[1] / errs[2]]
    assert all(abs(r - 2.0) < 0.15 for r in ratios), (errs, ratios)
    # the oracle field of a straight path is integrated exactly by one step
    z0, eps = jnp.array([0.5, 2.0]), jnp.array([-1.0, 0.3])
    out = flow.euler(lambda z, t: eps - z0, eps, 1, shift=3.0)
    np.testing.assert_allclose(out, z0, atol=1e-6)


def _tiny_dit(frames=3):
    from flax import nnx

    from icml26_jax.cof_t2i import dit

    m = dit.VideoDiT(frames, d=32, depth=1, heads=4, rngs=nnx.Rngs(0))
    key = jax.random.key(5)
    for _, v in nnx.iter_graph(m):  # non-zero adaLN / output layers so the model mixes
        if isinstance(v, nnx.Param) and not jnp.any(v[...]):
            key, k = jax.random.split(key)
            v[...] = 0.05 * jax.random.normal(k, v[...].shape)
    return nnx.split(m)


def _batch(n=16, frames=3):
    k1, k2 = jax.random.split(jax.random.key(3))
    ids = jax.random.randint(k2, (n, 12), 1, 40).at[:, 8:].set(0)
    return flow.FlowBatch(jax.random.normal(k1, (n, frames, 8, 8, 8)), ids, ids != 0)


def test_loss_sharded_over_8_devices_equals_unsharded():
    """Spec §Tests 8: the DATA-sharded loss (and gradient) equals the single-device one."""
    from icml26_jax.core import mesh as mesh_lib

    graphdef, params = _tiny_dit()
    b = _batch()
    key = jax.random.key(9)
    fn = jax.jit(jax.value_and_grad(flow.loss, argnums=1), static_argnums=(0,))
    l0, g0 = fn(graphdef, params, b, key)
    mesh = mesh_lib.make_mesh((8,), (mesh_lib.DATA,), auto=True)
    bs = flow.FlowBatch(*(mesh_lib.shard_leading(np.asarray(x), mesh, mesh_lib.DATA)
                          for x in b))
    ps = jax.tree.map(lambda a: mesh_lib.replicate(np.asarray(a), mesh), params)
    l1, g1 = fn(graphdef, ps, bs, key)
    assert len(bs.z0.sharding.device_set) == 8
    np.testing.assert_allclose(float(l1), float(l0), rtol=1e-5)
    for a, c in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(c), np.asarray(a), rtol=1e-4, atol=1e-6)


def test_loss_uses_one_t_per_clip_and_caption_dropout():
    graphdef, params = _tiny_dit()
    b = _batch(4)
    # with p = 1 every caption is dropped: the loss equals that of an empty caption
    empty = b._replace(text_ids=jnp.zeros_like(b.text_ids),
                       text_mask=jnp.zeros_like(b.text_mask))
    key = jax.random.key(2)
    assert float(flow.loss(graphdef, params, b, key, 1.0)) == pytest.approx(
        float(flow.loss(graphdef, params, empty, key, 0.0)), rel=1e-6)
    assert float(flow.loss(graphdef, params, b, key, 0.0)) != pytest.approx(
        float(flow.loss(graphdef, params, empty, key, 0.0)), rel=1e-6)
    ids, mask = flow.drop_text(jax.random.key(0), jnp.ones((2000, 3), jnp.int32),
                               jnp.ones((2000, 3), bool), 0.1)
    dropped = ~np.asarray(mask).any(1)
    assert abs(dropped.mean() - 0.1) < 0.02
    assert np.all(np.asarray(ids)[dropped] == 0) and np.all(np.asarray(ids)[~dropped] == 1)


def test_sampler_is_deterministic_and_validates_arguments():
    graphdef, params = _tiny_dit()
    b = _batch(3)
    run = jax.jit(flow.sample, static_argnums=(0, 4, 5, 6, 7))
    z = run(graphdef, params, b.text_ids, b.text_mask, 3, 4, 3.0, 3.0, jax.random.key(1))
    again = run(graphdef, params, b.text_ids, b.text_mask, 3, 4, 3.0, 3.0, jax.random.key(1))
    other = run(graphdef, params, b.text_ids, b.text_mask, 3, 4, 3.0, 3.0, jax.random.key(2))
    assert z.shape == (3, 3, 8, 8, 8) and bool(jnp.all(jnp.isfinite(z)))
    np.testing.assert_array_equal(np.asarray(z), np.asarray(again))
    assert not np.allclose(np.asarray(z), np.asarray(other))
    # the sampler is the Euler integrator of the CFG velocity
    from flax import nnx

    from icml26_jax.cof_t2i import dit

    model = nnx.merge(graphdef, params)
    z1 = jax.random.normal(jax.random.key(1), z.shape)
    ref = flow.euler(lambda zz, t: dit.cfg_velocity(model, zz, jnp.full((3,), t), b.text_ids,
                                                    b.text_mask, 3.0), z1, 4, 3.0)
    np.testing.assert_allclose(np.asarray(z), np.asarray(ref), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="sampling steps must be a positive integer"):
        flow.sample(graphdef, params, b.text_ids, b.text_mask, 3, 0, 3.0, 3.0,
                    jax.random.key(0))
    with pytest.raises(ValueError, match="num_frames must be 1, 2 or 3"):
        flow.sample(graphdef, params, b.text_ids, b.text_mask, 4, 4, 3.0, 3.0,
                    jax.random.key(0))
    with pytest.raises(ValueError, match="cfg"):
        flow.sample(graphdef, params, b.text_ids, b.text_mask, 3, 4, -1.0, 3.0,
                    jax.random.key(0))
