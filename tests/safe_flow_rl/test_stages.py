"""The critic stage: a killed and resumed run equals an uninterrupted one (orbax chunks); the
feasible-set IoU is computed on the spec's grid."""

import jax
import numpy as np
import pytest

from icml26_jax.core import checkpoint
from icml26_jax.safe_flow_rl import configs, data, envs, stages


@pytest.fixture(scope="module")
def small():
    c = configs.get_config("smoke")
    c.hidden, c.batch_size, c.critic_steps, c.chunk, c.num_seeds = 32, 64, 40, 20, 2
    ds = data.make_dataset(envs.EnvParams(), 3000, jax.random.key(0))
    return c, stages.device_data(ds)


@pytest.fixture(scope="module")
def critics_whole(small, tmp_path_factory):
    """One uninterrupted critic stage (key 1), shared by the resume and flow/refiner tests."""
    c, d = small
    return stages.critic_stage(c, d, jax.random.key(1), str(tmp_path_factory.mktemp("a")), 7)


def test_killed_and_resumed_critic_stage_equals_uninterrupted(small, critics_whole, tmp_path,
                                                              monkeypatch):
    c, d = small
    key = jax.random.key(1)
    _, whole, logs_whole = critics_whole
    real = checkpoint.run_chunks

    def killed_after_one_chunk(directory, **kw):
        advance, calls = kw["advance"], []

        def once(state, logs, start, n):
            if calls:
                raise RuntimeError("killed")
            calls.append(start)
            return advance(state, logs, start, n)

        return real(directory, **{**kw, "advance": once})

    monkeypatch.setattr(checkpoint, "run_chunks", killed_after_one_chunk)
    with pytest.raises(RuntimeError, match="killed"):
        stages.critic_stage(c, d, key, str(tmp_path / "b"), 7)
    monkeypatch.setattr(checkpoint, "run_chunks", real)
    _, resumed, logs_resumed = stages.critic_stage(c, d, key, str(tmp_path / "b"), 7)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                 whole.params, resumed.params)
    np.testing.assert_array_equal(logs_whole["loss_qh"], logs_resumed["loss_qh"])
    with pytest.raises(ValueError, match="different config"):
        stages.critic_stage(c, d, key, str(tmp_path / "b"), 8)


def test_vmapped_seeds_equal_separate_runs(small, tmp_path):
    c, d = small
    one = c.copy_and_resolve_references()
    one.num_seeds = 1
    key = jax.random.key(3)
    _, pair, _ = stages.critic_stage(c, d, key, str(tmp_path / "two"), 1)
    _, alone, _ = stages.critic_stage(one, d, key, str(tmp_path / "one"), 1)
    for a, b in zip(jax.tree.leaves(pair.params), jax.tree.leaves(alone.params)):
        np.testing.assert_allclose(a[0], b[0], atol=2e-5)
    assert not np.allclose(jax.tree.leaves(pair.params)[0][1], jax.tree.leaves(alone.params)[0][0])


def test_feasibility_iou_of_a_constant_critic(small):
    c, d = small
    g, state = stages.init_critics(c, d["observations"].shape[1], d["actions"].shape[1],
                                   jax.random.key(0))
    params = jax.tree.map(lambda x: x[0] * 0.0, state.params)  # V_h = 0 everywhere
    iou, learned, truth = stages.feasibility_iou(g, params, n=20)
    assert learned.all()  # {V_h <= 0} is the whole grid, so IoU = |avoidable| / |grid|
    assert iou == pytest.approx(truth.mean())


@pytest.mark.slow
def test_flow_and_refiner_stages_run_per_seed_and_hold_the_budget(small, critics_whole,
                                                                   tmp_path):
    from flax import nnx

    from icml26_jax.safe_flow_rl import refiner

    c, d = small
    c = c.copy_and_resolve_references()
    c.flow_steps, c.refiner_steps, c.chunk = 20, 20, 20
    cg, cs, _ = critics_whole  # the critic stage of key 1 (2 seeds)
    w = stages.dataset_weights(c, cg, cs, d)
    assert w.shape == (2, d["observations"].shape[0]) and bool((w >= 0).all())
    fg, fp, logs = stages.flow_stage(c, d, w, jax.random.key(2), str(tmp_path / "f"), 1)
    assert np.isfinite(logs["loss"]).all() and logs["loss"].shape == (20, 2)
    eps = (0.1, 0.5, float("inf"))
    rg, rp, rlogs = stages.refiner_stage(c, d, eps, (cg, cs), (fg, fp), jax.random.key(3),
                                         str(tmp_path / "r"), 1)
    assert rlogs["loss_stage2"].shape == (20, 2, 3) and np.isfinite(rlogs["loss_stage2"]).all()
    s = d["observations"][:256]
    z0 = jax.random.normal(jax.random.key(4), (256, 2))
    for j, e in enumerate(eps[:2]):  # trained heads, finite budgets: never exceeded
        ref = nnx.merge(rg, jax.tree.map(lambda x: x[0, j], rp))
        _, aux = refiner.refine(ref.g_h, ref.g_r, s, z0, e / 2, e / 2)
        assert float(aux["shift_norm"].max()) <= e + 1e-5


def _toy_one(state, args, seed_key, step):
    # A step with per-seed randomness, a per-seed argument and an [E]-shaped log.
    noise = jax.random.normal(jax.random.fold_in(seed_key, step), (3,))
    state = state * 0.9 + args * noise
    return state, {"norm": jax.numpy.linalg.norm(state), "vec": state}


def test_seeds_sharded_over_every_device_equal_one_device(tmp_path):
    # 3 seeds on the 8 devices (padded to 8, padded seeds dropped) == the same 3 on 1 device
    # (a resume from a padded checkpoint: test_killed_and_resumed_critic_stage_...).
    from icml26_jax.core import mesh as mesh_lib

    assert jax.device_count() == 8
    state, args = np.arange(9.0, dtype=np.float32).reshape(3, 3), np.float32([1.0, 2.0, 3.0])
    keys = stages.per_seed_keys(jax.random.key(5), 3)
    kw = dict(steps=5, chunk=2, fingerprint=1, name="toy", message=lambda m: "")
    one_dev = mesh_lib.make_mesh((1,), (mesh_lib.RUNS,))
    s1, l1 = checkpoint.seed_loop(state, args, _toy_one, keys, directory=str(tmp_path / "a"),
                              mesh=one_dev, **kw)
    s8, l8 = checkpoint.seed_loop(state, args, _toy_one, keys, directory=str(tmp_path / "b"), **kw)
    assert s8.shape == (3, 3) and l8["vec"].shape == (5, 3, 3) and l8["norm"].shape == (5, 3)
    np.testing.assert_array_equal(s1, s8)
    for k in l1:
        np.testing.assert_array_equal(l1[k], l8[k])
