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


def test_runs_mesh_maps_the_fewest_replicas_per_device_on_the_fewest_devices():
    sizes = {n: mesh_lib.runs_mesh(n).shape[RUNS] for n in (1, 3, 7, 8, 9, 11, 15, 16, 17)}
    assert sizes == {1: 1, 3: 3, 7: 7, 8: 8, 9: 5, 11: 6, 15: 8, 16: 8, 17: 6}
    for n, size in sizes.items():
        mesh = mesh_lib.runs_mesh(n)
        per_device = mesh_lib.padded_size(n, mesh) // size
        assert per_device == -(-n // 8), n  # what padding to all 8 devices would give
        assert mesh_lib.padded_size(n, mesh) - n < per_device, n  # under one row per device
        assert list(mesh.devices) == jax.devices()[:size]
    assert mesh_lib.runs_mesh().shape[RUNS] == 8
    assert [mesh_lib.padded_size(n, mesh_lib.runs_mesh()) for n in (1, 3, 8, 9, 15)] == [
        8, 8, 8, 16, 16]
    with pytest.raises(ValueError, match="n must be a positive integer"):
        mesh_lib.runs_mesh(0)


def test_map_runs_gives_the_same_numbers_on_the_smaller_mesh():
    # Each device maps one replica of 3 on either mesh: the same program per replica.
    a = np.linspace(-1.0, 1.0, 3 * 5, dtype=np.float32).reshape(3, 5)
    b = np.arange(3 * 2, dtype=np.float32).reshape(3, 2)
    small = mesh_lib.to_host(mesh_lib.map_runs(mesh_lib.runs_mesh(3), _affine, 0.5, a, b), 3)
    every = mesh_lib.to_host(mesh_lib.map_runs(mesh_lib.runs_mesh(), _affine, 0.5, a, b), 3)
    jax.tree.map(np.testing.assert_array_equal, small, every)


def _affine(scale, a, b):
    return jnp.tanh(a * scale) + b.sum(), {"sq": a ** 2}


@pytest.mark.parametrize("n", [1, 3, 5, 8, 11])
def test_map_runs_pads_any_replica_count(n):
    mesh = mesh_lib.runs_mesh(n)
    rng = np.random.default_rng(n)
    a = rng.normal(size=(n, 4)).astype(np.float32)
    b = rng.normal(size=(n, 2)).astype(np.float32)
    out = mesh_lib.map_runs(mesh, _affine, 1.5, a, b)
    total = mesh_lib.padded_size(n, mesh)
    assert out[0].shape == (total, 4)
    assert len(out[0].sharding.device_set) == mesh.shape[RUNS] == {11: 6}.get(n, n)
    want = jax.vmap(lambda x, y: _affine(1.5, x, y))(a, b)
    got = mesh_lib.to_host(out, n)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1]["sq"], want[1]["sq"], rtol=1e-6)
    # Padded outputs go back in as they are, mixed with unpadded host arguments.
    again = mesh_lib.to_host(mesh_lib.map_runs(mesh, _affine, 1.5, out[0], b), n)
    want2 = jax.vmap(lambda x, y: _affine(1.5, x, y))(want[0], b)
    np.testing.assert_allclose(again[0], want2[0], rtol=1e-6)


def test_place_runs_places_once_and_map_runs_reuses_the_placed_arrays():
    mesh = mesh_lib.runs_mesh(5)
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 4)).astype(np.float32)
    data = {"x": rng.normal(size=(5, 2)).astype(np.float32)}
    placed = mesh_lib.place_runs(mesh, data)
    assert placed["x"].shape == (mesh_lib.padded_size(5, mesh), 2)
    assert placed["x"].sharding.spec[0] == RUNS
    # Already placed: map_runs passes it through (no new host-to-device copy)...
    assert mesh_lib._place(placed["x"], mesh, placed["x"].shape[0]) is placed["x"]
    assert mesh_lib.place_runs(mesh, placed)["x"] is placed["x"]
    # ...and computes what the host arrays give.
    got = mesh_lib.to_host(mesh_lib.map_runs(mesh, _affine_dict, 1.5, a, placed), 5)
    want = mesh_lib.to_host(mesh_lib.map_runs(mesh, _affine_dict, 1.5, a, data), 5)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    assert mesh_lib.place_runs(mesh, None) is None


def _affine_dict(scale, a, d):
    return _affine(scale, a, d["x"])


def test_map_runs_rejects_mismatched_sizes():
    mesh = mesh_lib.runs_mesh()
    with pytest.raises(ValueError, match="same leading size"):
        mesh_lib.map_runs(mesh, _affine, 1.0, np.zeros((3, 4), np.float32),
                          np.zeros((5, 2), np.float32))


def test_pad_leading_repeats_the_last_row():
    x = np.arange(6).reshape(3, 2)
    np.testing.assert_array_equal(mesh_lib.pad_leading(x, 5)[3:], [[4, 5], [4, 5]])
    assert mesh_lib.pad_leading(x, 3) is x
    with pytest.raises(ValueError, match="cannot pad"):
        mesh_lib.pad_leading(x, 2)


def test_to_host_trims_and_reads_keys():
    keys = jax.random.split(jax.random.key(0), 4)
    got = mesh_lib.to_host({"k": keys, "x": np.arange(4)}, 3)
    np.testing.assert_array_equal(got["k"], np.asarray(jax.random.key_data(keys))[:3])
    np.testing.assert_array_equal(got["x"], [0, 1, 2])


def test_put_rows_builds_only_requested_rows():
    mesh = mesh_lib.runs_mesh()
    asked = []

    def rows(r):
        asked.append(np.asarray(r))
        return np.stack([r, -r], 1).astype(np.float32)

    y = mesh_lib.put_rows(rows, 16, mesh)
    assert y.sharding.spec == P(RUNS)
    np.testing.assert_array_equal(mesh_lib.to_host(y)[:, 1], -np.arange(16))
    # One probe row, then one call per device with that device's two rows.
    assert [len(r) for r in asked[1:]] == [2] * 8
    with pytest.raises(ValueError, match="not divisible"):
        mesh_lib.put_rows(rows, 12, mesh)


@pytest.mark.parametrize("n, batch", [(7, 3), (16, 8), (5, 16)])
def test_batched_pads_to_the_devices(n, batch):
    mesh = mesh_lib.data_mesh()
    assert mesh.shape[mesh_lib.DATA] == 8
    x = np.arange(n, dtype=np.float32)
    seen = []

    def fn(v):
        seen.append(v.shape[0])
        return v * 2

    np.testing.assert_array_equal(mesh_lib.batched(fn, n, batch, x, mesh=mesh), 2 * x)
    assert set(seen) == {mesh_lib.padded_size(batch, mesh, mesh_lib.DATA)}
    np.testing.assert_array_equal(mesh_lib.batched(fn, n, batch, x), 2 * x)


@pytest.mark.parametrize("n", [1, 3, 8, 9])
def test_shard_replicas_pads_to_the_mesh_and_to_host_trims(n):
    mesh = mesh_lib.runs_mesh(n)
    total = mesh_lib.padded_size(n, mesh)
    tree = {"w": np.arange(n * 2, dtype=np.float32).reshape(n, 2),
            "b": np.arange(5 * n, dtype=np.int32).reshape(5, n)}
    out = {"w": mesh_lib.shard_replicas(tree["w"], mesh, n),
           "b": mesh_lib.shard_replicas(tree["b"], mesh, n, dim=1)}
    assert out["w"].shape == (total, 2) and out["b"].shape == (5, total)
    assert len(out["w"].sharding.device_set) == {9: 5}.get(n, n)
    assert out["w"].sharding.spec[0] == mesh_lib.RUNS and out["b"].sharding.spec[1] == \
        mesh_lib.RUNS
    w = mesh_lib.to_host(out["w"])
    np.testing.assert_array_equal(w[:n], tree["w"])
    np.testing.assert_array_equal(w[n:], np.repeat(tree["w"][-1:], total - n, 0))
    np.testing.assert_array_equal(mesh_lib.to_host(out["w"], n), tree["w"])
    np.testing.assert_array_equal(mesh_lib.to_host(out["b"])[:, :n], tree["b"])
    # A restored padded copy (here of 16 devices) is cut back to n replicas first.
    restored = mesh_lib.pad_leading(tree["w"], n + 16)
    np.testing.assert_array_equal(
        mesh_lib.to_host(mesh_lib.shard_replicas(restored, mesh, n)), w)


@pytest.mark.parametrize("c", [1, 8, 33])
def test_map_columns_runs_each_block_alone_and_equals_all_columns_at_once(c):
    """Per-column while loops (each column stops at its own count) sharded over the devices
    give the unsharded result; each device sees ceil(c / 8) columns, and the padded zero
    columns are dropped."""
    rng = np.random.default_rng(c)
    b = rng.uniform(1.0, 2.0, (5, c)) * 2.0 ** rng.integers(0, 8, c)
    scale = rng.uniform(0.5, 1.5, (5, 1))
    seen = []

    def halve_until_small(scale, cols):  # per column: halve until its sum drops below 1
        seen.append(cols.shape[-1])

        def cond(s):
            return jnp.any(jnp.sum(s[0], 0) >= 1.0)

        def body(s):
            x, k = s
            big = jnp.sum(x, 0) >= 1.0
            return jnp.where(big, 0.5 * x * scale, x), k + big.astype(jnp.int32)

        x, k = jax.lax.while_loop(cond, body, (cols, jnp.zeros(cols.shape[-1], jnp.int32)))
        return x, k

    ref = jax.jit(halve_until_small)(scale, b)
    mesh = mesh_lib.runs_mesh()  # all 8 devices (the default on GPU and TPU)
    out = jax.jit(lambda s, b: mesh_lib.map_columns(halve_until_small, b, s, mesh=mesh))(
        scale, b)
    per_device = -(-c // 8)  # zero-padded to 8 devices
    assert seen[-1] == per_device, seen
    assert out[0].shape == (5, c) and out[1].shape == (c,)
    np.testing.assert_array_equal(np.asarray(out[1]), np.asarray(ref[1]))
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(ref[0]), rtol=1e-6)
    assert len(set(np.asarray(ref[1]))) > 1 or c == 1  # the columns really stop apart


def test_columns_mesh_is_one_device_per_process_on_cpu():
    mesh = mesh_lib.columns_mesh()
    assert mesh.axis_names == (RUNS,) and mesh.devices.size == jax.process_count() == 1
    out = jax.jit(lambda b: mesh_lib.map_columns(lambda b: 2 * b, b))(jnp.ones((3, 5)))
    np.testing.assert_array_equal(np.asarray(out), 2 * np.ones((3, 5)))


@pytest.mark.parametrize("n_dev", [1, 8])
def test_auto_over_runs_samples_per_replica_on_a_runs_mesh_as_unsharded(n_dev):
    from icml26_jax.lm import hmm as hmm_lib

    lang = hmm_lib.device_hmm(hmm_lib.make_hmm(8, 16, seed=0))

    def draw(seeds, h):
        return jax.vmap(lambda s: hmm_lib.sample_jax(jax.random.key(s), h, 2, 5))(seeds)

    seeds = np.arange(8, dtype=np.int32)
    want = np.asarray(mesh_lib.auto_over_runs(draw, jnp.asarray(seeds), lang))
    mesh = mesh_lib.make_mesh((n_dev,), (RUNS,), jax.devices()[:n_dev])
    placed = mesh_lib.shard_leading(seeds, mesh, RUNS)
    with jax.set_mesh(mesh):
        out = jax.jit(lambda s, h: mesh_lib.auto_over_runs(draw, s, h))(placed, lang)
    assert out.sharding.spec[0] == RUNS
    np.testing.assert_array_equal(np.asarray(out), want)


def test_map_runs_with_compiler_options_compiles_its_own_program_and_agrees():
    """``compiler_options`` (``LIGHT_COMPILE``: XLA's CPU backend at optimisation level 0)
    give a separately cached program with the default program's numbers."""
    mesh = mesh_lib.runs_mesh(4)
    rng = np.random.default_rng(2)
    a = rng.normal(size=(4, 6)).astype(np.float32)
    b = rng.normal(size=(4, 3)).astype(np.float32)
    light = mesh_lib._map_runs_with(tuple(sorted(mesh_lib.LIGHT_COMPILE.items())))
    before_light, before_default = light._cache_size(), mesh_lib._map_runs._cache_size()
    got = mesh_lib.to_host(mesh_lib.map_runs(mesh, _affine, 0.25, a, b,
                                             compiler_options=mesh_lib.LIGHT_COMPILE), 4)
    assert light._cache_size() == before_light + 1
    assert mesh_lib._map_runs._cache_size() == before_default
    want = mesh_lib.to_host(mesh_lib.map_runs(mesh, _affine, 0.25, a, b), 4)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), got, want)
    mesh_lib.map_runs(mesh, _affine, 0.25, a, b, compiler_options=dict(mesh_lib.LIGHT_COMPILE))
    assert light._cache_size() == before_light + 1  # an equal dict reuses the program



def _branchy(scale, x, shared):
    """A loop whose trip count and a branch that depend on the replica: batched by ``vmap``,
    real ones under ``lax.map``; the values agree either way."""
    steps = jnp.sum(x > 0).astype(jnp.int32)
    acc = jax.lax.fori_loop(0, steps, lambda i, a: a + x[i] * scale, jnp.zeros((), x.dtype))
    return jax.lax.cond(acc > 0, lambda: acc + shared["off"], lambda: acc - shared["off"])


@pytest.mark.parametrize("n_rep, n_dev", [(5, 1), (12, 8), (7, 4)])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_map_runs_sequential_batches_equal_the_vmapped_map(n_rep, n_dev, batch_size):
    """``batch_size`` maps each device's replicas by ``lax.map`` over chunks (a remainder
    chunk included) with the numbers of the one-``vmap`` default, sharded like it."""
    mesh = mesh_lib.make_mesh((n_dev,), (RUNS,), jax.devices()[:n_dev])
    x = np.random.default_rng(3).normal(size=(n_rep, 6))
    shared = {"off": np.float32(0.5)}
    want = mesh_lib.to_host(mesh_lib.map_runs(mesh, _branchy, 2.0, x, shared=shared), n_rep)
    got = mesh_lib.map_runs(mesh, _branchy, 2.0, x, shared=shared, batch_size=batch_size)
    assert got.sharding.spec[0] == RUNS
    np.testing.assert_allclose(mesh_lib.to_host(got, n_rep), want, rtol=1e-6)
    ref = [_branchy(2.0, jnp.asarray(r), shared) for r in x]
    np.testing.assert_allclose(want, np.asarray(ref), rtol=1e-6)
    a, b = x[:, :3].astype(np.float32), x[:, 3:].astype(np.float32)  # without shared
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=1e-6),
                 mesh_lib.to_host(mesh_lib.map_runs(mesh, _affine, 0.5, a, b,
                                                    batch_size=batch_size), n_rep),
                 mesh_lib.to_host(mesh_lib.map_runs(mesh, _affine, 0.5, a, b), n_rep))


@pytest.mark.parametrize("bad", [0, -2, True, 1.5])
def test_map_runs_rejects_a_bad_batch_size(bad):
    mesh = mesh_lib.runs_mesh(2)
    with pytest.raises(ValueError, match="batch_size must be None or an int >= 1"):
        mesh_lib.map_runs(mesh, _affine, 0.5, np.zeros((2, 3)), np.zeros((2, 3)),
                          batch_size=bad)
