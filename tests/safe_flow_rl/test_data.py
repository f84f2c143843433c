"""The offline dataset: the spec's statistics, internal consistency against the environment,
determinism and caching; ``normalized_metrics`` and ``load_dsrl`` on hand cases."""

import os

import jax
import numpy as np
import pytest

from icml26_jax.safe_flow_rl import data, envs

P = envs.EnvParams()


@pytest.fixture(scope="module")
def ds20k():
    # The smoke size; one compiled generator serves every size (fixed chunk of episodes).
    return data.make_dataset(P, 20_000, jax.random.key(0))


@pytest.fixture(scope="module")
def ds100k():
    return data.make_dataset(P, 100_000, jax.random.key(0))


@pytest.mark.parametrize("name", ["ds20k", "ds100k"])
def test_dataset_statistics(name, request):
    """Spec §Data: >= 35 % of episodes violate and >= 50 % of the top-decile returns do."""
    ds = request.getfixturevalue(name)
    s = data.dataset_summary(ds)
    assert s["violation_fraction"] >= 0.35, s
    assert s["top_violation_fraction"] >= 0.5, s
    assert s["num_top"] >= 0.09 * s["num_episodes"]
    # The behaviours differ as designed: reckless mostly violate, experts mostly do not.
    assert s["reckless_violation"] > 0.6 > 0.4 > s["cautious_violation"]
    assert s["random_share_of_top"] < 0.1


def test_dataset_layout(ds20k):
    ds = ds20k
    n = 20_000
    assert set(ds) == set(data.KEYS)
    for k, v in ds.items():
        assert isinstance(v, np.ndarray) and len(v) == n, k
    assert ds["observations"].shape == ds["next_observations"].shape == (n, envs.OBS_DIM)
    assert ds["actions"].shape == (n, 2) and np.abs(ds["actions"]).max() <= 1.0
    assert ds["episode_ids"].dtype == np.int32 and ds["behaviour_ids"].dtype == np.int32
    assert ds["rewards"].dtype == ds["masks"].dtype == np.float32
    # Episode shares follow the mix (exact counts per chunk, shuffled; a prefix is kept).
    st = data.episode_stats(ds)
    shares = np.bincount(st["behaviour_ids"], minlength=4) / len(st["behaviour_ids"])
    np.testing.assert_allclose(shares, data.DEFAULT_MIX, atol=0.06)


def test_masks_terminals_and_episode_boundaries(ds20k):
    ds = ds20k
    ep = ds["episode_ids"]
    assert ep[0] == 0 and np.all(np.diff(ep) >= 0) and np.all(np.diff(ep) <= 1)
    last = np.append(ep[1:] != ep[:-1], True)
    ends = ds["terminals"] + ds["timeouts"]
    np.testing.assert_array_equal(ds["masks"], 1.0 - ds["terminals"])
    assert ends.max() == 1.0  # never both
    np.testing.assert_array_equal(ends > 0, last)  # exactly the last transition ends
    np.testing.assert_array_equal(ds["next_observations"][:-1][~last[:-1]],
                                  ds["observations"][1:][~last[:-1]])
    np.testing.assert_array_equal(ds["next_h"][:-1][~last[:-1]], ds["h"][1:][~last[:-1]])
    same = ~last[:-1]
    np.testing.assert_array_equal(ds["behaviour_ids"][1:][same], ds["behaviour_ids"][:-1][same])
    assert set(np.unique(ds["behaviour_ids"]).tolist()) == {0, 1, 2, 3}
    # Terminals are goals or exits, read off the next observation; timeouts neither.
    nx, ny = ds["next_observations"][:, 0], ds["next_observations"][:, 1]
    goal = np.hypot(nx - 2.2, ny - 2.2) <= 0.3
    oob = (np.abs(nx) > 3) | (np.abs(ny) > 3)
    np.testing.assert_array_equal(ds["terminals"] > 0, goal | oob)
    assert not np.any((ds["timeouts"] > 0) & (goal | oob))
    # Starts never violate and every timeout but the final cut is at the horizon.
    first = np.append(True, ep[1:] != ep[:-1])
    assert ds["h"][first].max() <= 0
    lengths = np.bincount(ep)
    timed_out = ep[:-1][ds["timeouts"][:-1] > 0]  # all but the final cut
    np.testing.assert_array_equal(lengths[timed_out], P.horizon)
    assert lengths[:-1].max() <= P.horizon


def test_costs_h_and_rewards_match_the_environment(ds20k):
    ds = ds20k
    o, o2 = ds["observations"], ds["next_observations"]
    np.testing.assert_array_equal(ds["costs"], (ds["h"] > 0).astype(np.float32))
    np.testing.assert_array_equal(ds["next_costs"], (ds["next_h"] > 0).astype(np.float32))
    # h from the hazard distances of the observation (columns 5 and 8) and from (x, y).
    np.testing.assert_allclose(ds["h"], 0.8 - np.minimum(o[:, 5], o[:, 8]), atol=1e-5)
    cen = np.array(P.hazard_centres)
    h_xy = 0.8 - np.min(np.hypot(o2[:, :1] - cen[:, 0], o2[:, 1:2] - cen[:, 1]), axis=1)
    np.testing.assert_allclose(ds["next_h"], h_xy, atol=1e-5)
    # r = (d_prev - d) + 1[d <= 0.3].
    d0 = np.hypot(o[:, 0] - 2.2, o[:, 1] - 2.2)
    d1 = np.hypot(o2[:, 0] - 2.2, o2[:, 1] - 2.2)
    np.testing.assert_allclose(ds["rewards"], d0 - d1 + (d1 <= 0.3), atol=1e-5)
    # The stored transition is one Euler step under the stored action.
    th = np.arctan2(o[:, 4], o[:, 3])
    np.testing.assert_allclose(o2[:, 0], o[:, 0] + 0.05 * o[:, 2] * np.cos(th), atol=1e-5)
    np.testing.assert_allclose(o2[:, 2], o[:, 2] + 0.05 * ds["actions"][:, 0], atol=1e-5)
    # Episode cost counts the violating visited states.
    st = data.episode_stats(ds)
    np.testing.assert_allclose(st["costs"], np.bincount(ds["episode_ids"], ds["next_costs"]))
    assert st["costs"].sum() > 0


def test_deterministic_and_prefix_consistent(ds20k):
    a = data.make_dataset(P, 3000, jax.random.key(0))
    b = data.make_dataset(P, 3000, jax.random.key(0))
    c = data.make_dataset(P, 3000, jax.random.key(1))
    for k in data.KEYS:
        np.testing.assert_array_equal(a[k], b[k])
        if k in ("timeouts", "masks"):
            continue  # the cut at n transitions marks a timeout
        np.testing.assert_array_equal(a[k], ds20k[k][:3000], err_msg=k)
    assert not np.array_equal(a["observations"], c["observations"])
    assert a["timeouts"][-1] == 1.0 or a["terminals"][-1] == 1.0


def test_load_or_make_dataset_caches(tmp_path):
    ds, info = data.load_or_make_dataset(P, 1500, 3, tmp_path)
    assert not info["cached"] and os.path.exists(info["path"])
    assert info["path"].startswith(os.fspath(tmp_path))
    ds2, info2 = data.load_or_make_dataset(P, 1500, 3, tmp_path)
    assert info2["cached"] and info2["path"] == info["path"]
    for k in data.KEYS:
        np.testing.assert_array_equal(ds[k], ds2[k])
    _, info3 = data.load_or_make_dataset(P, 1500, jax.random.key(3), tmp_path)
    _, info4 = data.load_or_make_dataset(P, 1500, 4, tmp_path)
    assert info4["path"] != info["path"] and not info4["cached"]
    assert info3["path"] != info4["path"]


def test_input_errors():
    with pytest.raises(ValueError, match="n_transitions"):
        data.make_dataset(P, 0, jax.random.key(0))
    with pytest.raises(ValueError, match="mix"):
        data.make_dataset(P, 10, jax.random.key(0), mix=(0.5, 0.5, 0.5, 0.0))
    with pytest.raises(ValueError, match="mix"):
        data.make_dataset(P, 10, jax.random.key(0), mix=(1.0, 0.0))
    with pytest.raises(ValueError, match="seed"):
        data.load_or_make_dataset(P, 10, 1.5, "/nonexistent")


def test_episode_stats_hand_case():
    ds = {"episode_ids": np.array([0, 0, 0, 1, 1, 2], np.int32),
          "rewards": np.array([0.5, 0.5, 1.2, -0.1, 0.3, 2.0], np.float32),
          "next_h": np.array([-0.2, 0.1, -0.3, -0.5, -0.4, 0.2], np.float32),
          "terminals": np.array([0, 0, 1, 0, 0, 1], np.float32),
          "behaviour_ids": np.array([1, 1, 1, 3, 3, 0], np.int32)}
    st = data.episode_stats(ds)
    np.testing.assert_allclose(st["returns"], [2.2, 0.2, 2.0], rtol=1e-6)
    np.testing.assert_array_equal(st["costs"], [1, 0, 1])
    np.testing.assert_array_equal(st["violated"], [True, False, True])
    np.testing.assert_array_equal(st["lengths"], [3, 2, 1])
    np.testing.assert_array_equal(st["behaviour_ids"], [1, 3, 0])
    np.testing.assert_array_equal(st["terminal"], [True, False, True])


def test_normalized_metrics_hand_cases():
    m = data.normalized_metrics([0.0, 5.0, 10.0], [0, 5, 10], r_min=0.0, r_max=10.0, kappa=5.0)
    assert m["r_norm"] == pytest.approx(0.5)
    assert m["c_norm"] == pytest.approx(1.0)  # mean C = 5 = kappa: exactly at the limit
    assert m["violation_rate"] == pytest.approx(2 / 3)
    assert m["safe"] is True and m["num_episodes"] == 3
    m = data.normalized_metrics(np.array([-1.0, 3.0]), np.array([0.0, 0.0]), -1.0, 7.0, 10.0)
    assert m["r_norm"] == pytest.approx((0.0 + 0.5) / 2)
    assert m["c_norm"] == 0.0 and m["violation_rate"] == 0.0 and m["safe"]
    m = data.normalized_metrics([8.0], [11.0], 0.0, 4.0, 10.0)  # returns may exceed r_max
    assert m["r_norm"] == pytest.approx(2.0) and m["c_norm"] == pytest.approx(1.1)
    assert m["safe"] is False
    for kappa in (0.0, -1.0):
        with pytest.raises(ValueError, match="kappa"):
            data.normalized_metrics([1.0], [0.0], 0.0, 1.0, kappa)
    with pytest.raises(ValueError, match="r_max"):
        data.normalized_metrics([1.0], [0.0], 1.0, 1.0, 5.0)
    with pytest.raises(ValueError, match="returns and costs"):
        data.normalized_metrics([1.0, 2.0], [0.0], 0.0, 1.0, 5.0)


def _dsrl_dict():
    rng = np.random.default_rng(0)
    n = 7
    return {"observations": rng.normal(size=(n, 3)).astype(np.float32),
            "next_observations": rng.normal(size=(n, 3)).astype(np.float32),
            "actions": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
            "rewards": np.arange(n, dtype=np.float32),
            "costs": np.array([0, 1, 0, 0, 2, 0, 1], np.float32),
            "terminals": np.array([0, 0, 1, 0, 0, 0, 0], np.float32),
            "timeouts": np.array([0, 0, 0, 0, 0, 1, 0], np.float32)}


def _check_dsrl(ds, raw):
    n = len(raw["rewards"])
    assert set(ds) == set(data.KEYS)
    for k in ("observations", "next_observations", "actions", "rewards"):
        np.testing.assert_array_equal(ds[k], raw[k])
    np.testing.assert_array_equal(ds["h"], [-1, 25, -1, -1, 25, -1, 25])  # FISOR's mapping
    np.testing.assert_array_equal(ds["costs"], [0, 1, 0, 0, 1, 0, 1])
    np.testing.assert_array_equal(ds["episode_ids"], [0, 0, 0, 1, 1, 1, 2])
    # next_h: the next transition's h within an episode, its own h at an episode's end.
    np.testing.assert_array_equal(ds["next_h"], [25, -1, -1, 25, -1, -1, 25])
    np.testing.assert_array_equal(ds["masks"], 1 - raw["terminals"])
    np.testing.assert_array_equal(ds["timeouts"], raw["timeouts"])
    np.testing.assert_array_equal(ds["behaviour_ids"], np.full(n, -1))
    assert ds["h"].dtype == ds["masks"].dtype == np.float32


def test_load_dsrl_npz_round_trip(tmp_path):
    raw = _dsrl_dict()
    path = tmp_path / "toy.npz"
    np.savez(path, **raw)
    ds = data.load_dsrl(path)
    _check_dsrl(ds, raw)
    st = data.episode_stats(ds)  # works on loaded data (cost from next_h)
    np.testing.assert_array_equal(st["lengths"], [3, 3, 1])
    del raw["timeouts"]
    np.savez(tmp_path / "bad.npz", **raw)
    with pytest.raises(ValueError, match="timeouts"):
        data.load_dsrl(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="does not exist"):
        data.load_dsrl(tmp_path / "missing.npz")


def test_load_dsrl_hdf5(tmp_path):
    raw = _dsrl_dict()
    path = tmp_path / "toy.hdf5"
    try:
        import h5py
    except ImportError:
        path.write_bytes(b"not read")
        with pytest.raises(ValueError, match="h5py"):
            data.load_dsrl(path)
        return
    with h5py.File(path, "w") as f:
        for k, v in raw.items():
            f.create_dataset(k, data=v)
    _check_dsrl(data.load_dsrl(path), raw)


def test_a_users_file_in_our_schema_goes_through_the_tfds_builder(tmp_path):
    from icml26_jax.datasets import offline_episodes
    from icml26_jax.safe_flow_rl import configs, train
    ds = data.make_dataset(P, 1500, jax.random.key(5))
    path = offline_episodes.save_source(ds, tmp_path / "mine.npz")
    c = configs.get_config("smoke")
    c.data_path = path
    got, info = train._dataset(c, str(tmp_path / "wd"))
    assert os.path.isdir(tmp_path / "wd" / "data" / "tfds" / offline_episodes.NAME)
    for k in data.KEYS:
        np.testing.assert_array_equal(got[k], ds[k])
