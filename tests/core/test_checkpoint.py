"""Tests of icml26_jax.core.checkpoint (orbax) in one process with 8 CPU devices.

The multi-process save/restore path runs in tests/core/test_testing.py.
"""

import os

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from icml26_jax.core import checkpoint, mesh as mesh_lib
from icml26_jax.core.testing import tree_allclose


def _state(mesh, scale=1.0):
    w = np.arange(8 * 4, dtype=np.float32).reshape(8, 4) * scale
    return {
        "params": {"w": mesh_lib.shard_leading(w, mesh), "b": jax.numpy.ones(3) * scale},
        "opt": [np.full(4, 2.0 * scale, np.float64), np.arange(3, dtype=np.int32)],
        "step": 7,
        "lr": 0.5 * scale,
        "key": jax.random.key(3),
    }


def test_round_trip_without_like_gives_numpy(tmp_path):
    mesh = mesh_lib.users_mesh(8)
    state = _state(mesh)
    checkpoint.save(tmp_path / "ckpt", 7, state)
    step, restored = checkpoint.restore_latest(tmp_path / "ckpt")
    assert step == 7
    assert isinstance(restored["params"]["w"], np.ndarray)
    assert restored["opt"][0].dtype == np.float64 and restored["opt"][1].dtype == np.int32
    assert restored["step"] == 7 and isinstance(restored["step"], int)
    assert restored["lr"] == 0.5 and isinstance(restored["lr"], float)
    expected = dict(state, key=jax.random.key_data(state["key"]))  # keys come back as data
    tree_allclose(restored, expected, rtol=0, atol=0)


def test_restore_with_like_gives_target_sharding(tmp_path):
    mesh = mesh_lib.users_mesh(8)
    state = _state(mesh)
    checkpoint.save(tmp_path, 1, state)
    # Restore onto a different mesh layout (4 x 2) than the one saved (8 users).
    mesh2 = mesh_lib.make_mesh((4, 2), ("a", "b"))
    target = NamedSharding(mesh2, P("a", "b"))
    like = dict(state)
    like["params"] = {"w": jax.ShapeDtypeStruct((8, 4), np.float32, sharding=target),
                      "b": state["params"]["b"]}
    _, restored = checkpoint.restore_latest(tmp_path, like=like)
    w = restored["params"]["w"]
    assert isinstance(w, jax.Array) and w.sharding == target
    assert w.addressable_shards[0].data.shape == (2, 2)
    assert jax.dtypes.issubdtype(restored["key"].dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(restored["key"]),
                                  jax.random.key_data(state["key"]))
    tree_allclose(restored, state, rtol=0, atol=0)


def test_save_every_and_latest_step(tmp_path):
    mesh = mesh_lib.users_mesh(8)
    with checkpoint.Checkpointer(tmp_path, save_every=3, max_to_keep=None) as ckpt:
        assert ckpt.latest_step() is None
        saved = [ckpt.save(s, _state(mesh, s)) for s in range(1, 8)]
        assert saved == [False, False, True, False, False, True, False]
        assert ckpt.save(7, _state(mesh, 7), force=True)
        assert ckpt.all_steps() == [3, 6, 7]
        assert ckpt.latest_step() == 7
        r = ckpt.restore(6)
    assert r["lr"] == pytest.approx(3.0)
    assert checkpoint.latest_step(tmp_path) == 7


def test_max_to_keep_deletes_old_steps(tmp_path):
    with checkpoint.Checkpointer(tmp_path, max_to_keep=2) as ckpt:
        for s in range(4):
            assert ckpt.save(s, {"x": np.array([s], np.int32)})
        assert ckpt.all_steps() == [2, 3]
        with pytest.raises(FileNotFoundError, match="steps on disk: \\[2, 3\\]"):
            ckpt.restore(0)
    assert sorted(p for p in os.listdir(tmp_path) if p.isdigit()) == ["2", "3"]


def test_resume_does_not_overwrite(tmp_path):
    # A killed run resumes from its latest step and reaches that step again: the saved state
    # is kept, later steps are written.
    with checkpoint.Checkpointer(tmp_path) as ckpt:
        ckpt.save(2, {"x": np.array(1.0)})
    with checkpoint.Checkpointer(tmp_path) as ckpt:
        step = ckpt.latest_step()
        state = ckpt.restore(like={"x": np.array(0.0)})
        assert step == 2 and float(state["x"]) == 1.0
        assert not ckpt.save(2, {"x": np.array(99.0)})
        assert ckpt.save(3, {"x": np.array(3.0)})
    step, state = checkpoint.restore_latest(tmp_path)
    assert step == 3 and float(state["x"]) == 3.0
    with checkpoint.Checkpointer(tmp_path) as ckpt:
        assert float(ckpt.restore(2)["x"]) == 1.0


def test_empty_and_missing_directories(tmp_path):
    assert checkpoint.restore_latest(tmp_path / "nothing") is None
    assert checkpoint.latest_step(tmp_path / "nothing") is None
    assert not (tmp_path / "nothing").exists()  # Looking must not create it.
    with checkpoint.Checkpointer(tmp_path / "empty") as ckpt:
        with pytest.raises(FileNotFoundError, match="no checkpoint"):
            ckpt.restore()
    assert checkpoint.restore_latest(tmp_path / "empty") is None


def test_relative_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkpoint.save("rel/ckpt", 5, {"a": [1, 2.0]})
    assert checkpoint.restore_latest("rel/ckpt") == (5, {"a": [1, 2.0]})
    assert (tmp_path / "rel" / "ckpt" / "5").is_dir()


@pytest.mark.parametrize("kwargs", [dict(save_every=0), dict(save_every=1.5),
                                    dict(max_to_keep=0)])
def test_bad_arguments(tmp_path, kwargs):
    with pytest.raises(ValueError, match="save_every|max_to_keep"):
        checkpoint.Checkpointer(tmp_path, **kwargs)


def test_config_fingerprint():
    import ml_collections

    a = ml_collections.ConfigDict({"lr": 0.1, "arms": ("rope", "nope"), "sub": {"n": 3}})
    b = ml_collections.ConfigDict({"sub": {"n": 3}, "arms": ("rope", "nope"), "lr": 0.1})
    fp = checkpoint.config_fingerprint(a)
    assert fp == checkpoint.config_fingerprint(b) == checkpoint.config_fingerprint(a.to_dict())
    assert 0 <= fp < 2**62
    b.sub.n = 4
    assert checkpoint.config_fingerprint(b) != fp


def _counting_loop(tmp_path, steps, fingerprint=7, stop_after=None):
    """A loop whose state is a running sum; ``stop_after`` chunks then raises (a crash)."""
    calls = []

    def advance(state, logs, s0, n):
        if stop_after is not None and len(calls) == stop_after:
            raise KeyboardInterrupt
        calls.append((s0, n))
        logs["seen"][s0:s0 + n] = np.arange(s0, s0 + n)
        return {"total": state["total"] + n}, f"total {state['total'] + n}"

    state, logs = checkpoint.run_chunks(
        tmp_path / "ck", fingerprint=fingerprint, state={"total": np.int64(0)},
        logs={"seen": -np.ones(steps, np.int64)}, steps=steps, chunk=3, advance=advance,
        name="count")
    return state, logs, calls


def test_run_chunks_resumes_where_it_stopped(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _counting_loop(tmp_path, 10, stop_after=2)  # chunks [0, 3) and [3, 6) saved
    state, logs, calls = _counting_loop(tmp_path, 10)
    assert calls == [(6, 3), (9, 1)]  # the last chunk is shorter
    assert int(state["total"]) == 10
    np.testing.assert_array_equal(logs["seen"], np.arange(10))
    # A finished run is restored without running any chunk.
    state, logs, calls = _counting_loop(tmp_path, 10)
    assert calls == [] and int(state["total"]) == 10


def test_run_chunks_refuses_another_config(tmp_path):
    _counting_loop(tmp_path, 3, fingerprint=1)
    with pytest.raises(ValueError, match="different config"):
        _counting_loop(tmp_path, 3, fingerprint=2)
    with pytest.raises(ValueError, match="chunk >= 1"):
        checkpoint.run_chunks(tmp_path / "x", fingerprint=0, state={}, logs={}, steps=3,
                              chunk=0, advance=None)


def test_per_step_dispatch_only_for_convolutions_on_cpu():
    assert checkpoint.per_step_dispatch(True, "cpu")
    assert not checkpoint.per_step_dispatch(False, "cpu")
    assert not checkpoint.per_step_dispatch(True, "gpu")
    assert not checkpoint.per_step_dispatch(True, "tpu")


@pytest.mark.parametrize("keys", ["loss", ("loss", "norm")])
def test_steps_loop_scanned_chunk_equals_per_step_dispatch(monkeypatch, keys):
    data = jax.numpy.asarray(np.random.default_rng(0).normal(size=(16, 4)), jax.numpy.float32)

    @jax.jit
    def one(w, i, x):
        row = x[i % x.shape[0]]
        g = jax.grad(lambda w: jax.numpy.sum((w * row - 1.0) ** 2))(w)
        w = w - 0.1 * g
        return w, {"loss": jax.numpy.sum(g ** 2), "norm": jax.numpy.linalg.norm(w)}

    out = []
    for conv in (True, False):  # on the test's CPU backend: per-step, then scanned
        w, logs = checkpoint.steps_loop(one, jax.numpy.ones(4), 3, 5, keys, (data,),
                                        convolutional=conv)
        out.append((np.asarray(w), logs))
    (w_loop, l_loop), (w_scan, l_scan) = out
    np.testing.assert_allclose(w_scan, w_loop, rtol=1e-6)
    for k in ((keys,) if isinstance(keys, str) else keys):
        got, want = (l[k] if isinstance(keys, tuple) else l for l in (l_scan, l_loop))
        assert got.shape == want.shape == (5,)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    # Steps 3..7 ran: a loop started at 0 differs (the rows are indexed by the step).
    w0, _ = checkpoint.steps_loop(one, jax.numpy.ones(4), 0, 5, "loss", (data,),
                                  convolutional=False)
    assert not np.allclose(np.asarray(w0), w_scan)
