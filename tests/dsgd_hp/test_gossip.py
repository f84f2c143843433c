"""Gossip inside shard_map: ppermute halo exchange and circulant shifts == dense W."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.mesh import USERS
from icml26_jax.dsgd_hp import gossip, graphs


def _users_only_mesh(n_dev):
    return mesh_lib.make_mesh((n_dev,), (USERS,))


def _run(fn, Y, mesh, *extra, extra_specs=()):
    Yd = mesh_lib.put(Y, mesh, P(None, USERS, None))
    extra = [mesh_lib.put(e, mesh, s) for e, s in zip(extra, extra_specs)]
    out = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P(None, USERS, None), *extra_specs),
                                out_specs=P(None, USERS, None)))(Yd, *extra)
    return np.asarray(out)


@pytest.mark.parametrize("n", [8, 16, 64])
@pytest.mark.parametrize("n_dev", [1, 2, 4, 8])
def test_ring_ppermute_equals_dense(n, n_dev):
    g = graphs.make_graph("ring", n)
    Y = np.random.default_rng(n).standard_normal((3, n, 5)).astype(np.float32)
    mesh = _users_only_mesh(n_dev)
    ring = _run(functools.partial(gossip.mix_ring, n=n), Y, mesh)
    dense = _run(gossip.mix_dense, Y, mesh, g.W.astype(np.float32), extra_specs=(P(USERS),))
    np.testing.assert_allclose(ring, dense, atol=1e-6)
    np.testing.assert_allclose(ring, np.einsum("ij,rjd->rid", g.W, Y), atol=1e-6)


@pytest.mark.parametrize("n,n_dev", [(8, 8), (16, 4), (32, 8), (64, 2)])
def test_exp_circulant_equals_dense(n, n_dev):
    g = graphs.make_graph("exp", n)
    Y = np.random.default_rng(0).standard_normal((2, n, 3)).astype(np.float32)
    fn = functools.partial(gossip.mix_circulant, offsets=g.offsets, weight=g.W[0, 1], n=n)
    out = _run(fn, Y, _users_only_mesh(n_dev))
    np.testing.assert_allclose(out, np.einsum("ij,rjd->rid", g.W, Y), atol=1e-6)


@pytest.mark.parametrize("n,n_dev", [(9, 1), (16, 4), (32, 8), (64, 8), (64, 2), (36, 4)])
def test_torus_shifts_equal_dense(n, n_dev):
    g = graphs.make_graph("torus", n)
    shape = graphs.torus_shape(n)
    Y = np.random.default_rng(n).standard_normal((2, n, 3)).astype(np.float32)
    w = float(g.W[0, 1])

    def fn(y):
        nl = y.shape[-2]
        halo = gossip.halo_exchange(
            y, gossip.circulant_needs(gossip.torus_offsets(*shape), n, nl), n // nl)
        uid = jax.lax.axis_index(USERS) * nl + jnp.arange(nl)
        return gossip.torus_mix(y, halo, uid, shape, w)

    out = _run(fn, Y, _users_only_mesh(n_dev))
    np.testing.assert_allclose(out, np.einsum("ij,rjd->rid", g.W, Y), atol=1e-6)


@pytest.mark.parametrize("s", [0, 1, 3, 4, 7, 13])
def test_shift_is_global_roll(s):
    n = 16
    Y = np.arange(2 * n, dtype=np.float32).reshape(1, n, 2)
    out = _run(lambda y: gossip.shift(y, s, n), Y, _users_only_mesh(4))
    np.testing.assert_array_equal(out, np.roll(Y, -s, axis=1))


def test_complete_is_global_mean():
    n = 16
    Y = np.random.default_rng(3).standard_normal((4, n, 3)).astype(np.float32)
    out = _run(gossip.mix_complete, Y, _users_only_mesh(8))
    np.testing.assert_allclose(out, np.broadcast_to(Y.mean(1, keepdims=True), Y.shape),
                               atol=1e-6)


def test_ring_needs_three_users():
    with pytest.raises(ValueError, match="n >= 3"):
        gossip.mix_ring(jnp.zeros((1, 2, 1)), n=2)
