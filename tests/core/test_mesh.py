"""Tests of icml26_jax.core.mesh on the 8 CPU devices that conftest.py sets up."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.mesh import RUNS, USERS


def test_eight_devices():
    # Every sharded path below assumes conftest.py's 8 CPU devices.
    assert jax.device_count() == 8


@pytest.mark.parametrize("n, users", [(1, 1), (2, 2), (4, 4), (16, 8), (64, 8), (6, 2)])
def test_users_mesh_shapes(n, users):
    mesh = mesh_lib.users_mesh(n)
    assert mesh.axis_names == (RUNS, USERS)
    assert dict(mesh.shape) == {RUNS: 1, USERS: users}
    assert len(set(mesh.devices.flat)) == users


@pytest.mark.parametrize("n, runs, shape", [
    (1, 8, (8, 1)), (2, 4, (4, 2)), (4, 2, (2, 4)), (16, 4, (1, 8)), (2, 8, (4, 2)),
    (1, 3, (1, 1)), (1, 6, (2, 1)),
])
def test_users_mesh_runs(n, runs, shape):
    mesh = mesh_lib.users_mesh(n, runs=runs)
    assert (mesh.shape[RUNS], mesh.shape[USERS]) == shape


@pytest.mark.parametrize("kwargs", [dict(n=0), dict(n=-3), dict(n=2.0), dict(n=4, runs=0)])
def test_users_mesh_errors(kwargs):
    with pytest.raises(ValueError, match="must be a positive integer"):
        mesh_lib.users_mesh(**kwargs)


def test_make_mesh_errors_on_wrong_device_count():
    with pytest.raises(ValueError, match="needs 4 devices, got 2"):
        mesh_lib.make_mesh((2, 2), ("a", "b"), devices=jax.devices()[:2])


def test_shard_leading_places_rows_on_devices():
    mesh = mesh_lib.users_mesh(16)
    x = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
    y = mesh_lib.shard_leading(x, mesh)
    assert y.sharding == NamedSharding(mesh, P(USERS, None))
    assert len(y.addressable_shards) == 8
    for shard in y.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), x[shard.index])
        assert shard.data.shape == (2, 3)
    np.testing.assert_array_equal(mesh_lib.to_host(y), x)


def test_shard_leading_other_dim_and_error():
    mesh = mesh_lib.users_mesh(4)
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    y = mesh_lib.shard_leading(x, mesh, dim=1)
    assert y.sharding.spec == P(None, USERS)
    np.testing.assert_array_equal(mesh_lib.to_host(y), x)
    with pytest.raises(ValueError, match="not divisible"):
        mesh_lib.shard_leading(np.zeros((6, 2), np.float32), mesh)


def test_replicate_and_put():
    mesh = mesh_lib.users_mesh(8, runs=1)
    x = np.arange(5, dtype=np.int32)
    r = mesh_lib.replicate(x, mesh)
    assert r.sharding.is_fully_replicated
    for shard in r.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), x)
    mesh2 = mesh_lib.users_mesh(2, runs=4)
    z = np.arange(4 * 2 * 3, dtype=np.float32).reshape(4, 2, 3)
    zs = mesh_lib.put(z, mesh2, P(RUNS, USERS))
    assert zs.addressable_shards[0].data.shape == (1, 1, 3)
    np.testing.assert_array_equal(mesh_lib.to_host(zs), z)


def test_sharded_computation_matches_host():
    mesh = mesh_lib.users_mesh(16)
    x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    y = jax.jit(lambda v: jnp.sum(v ** 2, axis=1))(mesh_lib.shard_leading(x, mesh))
    np.testing.assert_allclose(mesh_lib.to_host(y), np.sum(x ** 2, axis=1), rtol=1e-6)


def test_runs_mesh_largest_divisor():
    from icml26_jax.core import mesh as mesh_lib

    assert mesh_lib.runs_mesh(15).shape[mesh_lib.RUNS] == 5
    assert mesh_lib.runs_mesh(16).shape[mesh_lib.RUNS] == 8
    assert mesh_lib.runs_mesh(6).shape[mesh_lib.RUNS] == 6
    assert mesh_lib.runs_mesh(7).shape[mesh_lib.RUNS] == 7
    assert mesh_lib.runs_mesh(11).shape[mesh_lib.RUNS] == 1
