"""Tests of the offline_episodes TFDS builder (a transition .npz -> one record per episode)."""

import hashlib
import os
import sys

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from icml26_jax.core import data as core_data
from icml26_jax.datasets import offline_episodes
from icml26_jax.datasets.offline_episodes import EpisodesConfig, OfflineEpisodes
from icml26_jax.safe_flow_rl import data, envs

LENGTHS = (3, 7, 1, 12, 5)  # episode lengths; 28 transitions
BEHAVIOURS = (0, 3, -1, 2, 1)
O, A = 3, 2


def _dataset(lengths=LENGTHS, behaviours=BEHAVIOURS, seed=0):
    """A synthetic dataset of the schema (values need not be consistent, only typed)."""
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    ds = {k: rng.normal(size=(n,)).astype(np.float32) for k in offline_episodes.STEP_KEYS}
    ds["observations"] = rng.normal(size=(n, O)).astype(np.float32)
    ds["next_observations"] = rng.normal(size=(n, O)).astype(np.float32)
    ds["actions"] = rng.uniform(-1, 1, size=(n, A)).astype(np.float32)
    ds["terminals"] = (rng.uniform(size=n) < 0.2).astype(np.float32)
    ds["episode_ids"] = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    ds["behaviour_ids"] = np.repeat(np.asarray(behaviours, np.int32), lengths)
    return {k: ds[k] for k in data.KEYS}


def _assert_same(got, want):
    assert list(got) == list(data.KEYS)
    for k in data.KEYS:
        assert got[k].dtype == want[k].dtype, k
        assert got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline_episodes")
    ds = _dataset()
    src = offline_episodes.save_source(ds, root / "src" / "episodes.npz")
    tfds_dir = root / "tfds"
    loaded = offline_episodes.load_offline_episodes(src, data_dir=tfds_dir)
    return ds, src, tfds_dir, loaded


def test_keys_are_the_safe_flow_rl_schema():
    assert offline_episodes.KEYS == data.KEYS
    assert set(offline_episodes.STEP_KEYS) | set(offline_episodes.ID_KEYS) == set(data.KEYS)


def test_round_trip(prepared):
    ds, _, _, loaded = prepared
    _assert_same(loaded, ds)


def test_source_holds_one_record_per_episode(prepared):
    _, src, tfds_dir, _ = prepared
    source = offline_episodes.offline_episodes_source(src, data_dir=tfds_dir)
    assert "tensorflow" not in sys.modules
    assert len(source) == len(LENGTHS)
    assert [len(r["rewards"]) for r in source] == list(LENGTHS)
    for e, r in enumerate(source):
        assert r["observations"].shape == (LENGTHS[e], O)
        assert r["next_observations"].shape == (LENGTHS[e], O)
        assert r["actions"].shape == (LENGTHS[e], A)
        assert r["observations"].dtype == np.float32
        assert (r["episode_id"], r["behaviour_id"]) == (e, BEHAVIOURS[e])
    features = source.dataset_info.features
    assert features["observations"].shape == (None, O)
    assert features["actions"].shape == (None, A)
    assert features["h"].shape == (None,)
    assert dict(source.dataset_info.metadata) == {"num_transitions": sum(LENGTHS)}
    # Readable by name without the config object (as any TFDS data set).
    name = "offline_episodes/" + offline_episodes.config_name(src, O, A)
    by_name = core_data.data_source(name, "train", data_dir=tfds_dir)
    np.testing.assert_array_equal(by_name[3]["actions"], source[3]["actions"])
    info = offline_episodes.source_info(src)
    assert (info.num_transitions, info.obs_dim, info.action_dim, info.num_episodes) == (
        sum(LENGTHS), O, A, len(LENGTHS))
    np.testing.assert_array_equal(info.episode_lengths, LENGTHS)


def test_sliced_split_renumbers_episodes(prepared):
    ds, src, tfds_dir, _ = prepared
    part = offline_episodes.load_offline_episodes(src, data_dir=tfds_dir, split="train[1:4]")
    rows = slice(LENGTHS[0], sum(LENGTHS[:4]))
    want = {k: ds[k][rows] for k in data.KEYS}
    want["episode_ids"] = np.repeat(np.arange(3, dtype=np.int32), LENGTHS[1:4])
    _assert_same(part, want)


def test_config_name_and_location(prepared):
    _, src, tfds_dir, _ = prepared
    digest = hashlib.sha256(os.path.abspath(src).encode()).hexdigest()[:8]
    name = offline_episodes.config_name(src, O, A)
    assert name == f"{digest}_3x2"
    assert (tfds_dir / "offline_episodes" / name / "1.0.0").is_dir()
    cfg = EpisodesConfig.make(src)
    assert (cfg.name, cfg.source, cfg.obs_dim, cfg.action_dim) == (name, src, O, A)
    assert tfds.builder(f"offline_episodes/{name}", data_dir=tfds_dir).info.splits[
        "train"].num_examples == len(LENGTHS)


def test_reload_does_not_rebuild(prepared, monkeypatch):
    ds, src, tfds_dir, _ = prepared

    def fail(*args, **kwargs):
        raise AssertionError("the prepared data set was generated again")

    monkeypatch.setattr(OfflineEpisodes, "_generate_examples", fail)
    monkeypatch.setattr(OfflineEpisodes, "_split_generators", fail)
    _assert_same(offline_episodes.load_offline_episodes(src, data_dir=tfds_dir), ds)


def test_save_source_casts_drops_extras_and_leaves_no_temp_file(tmp_path):
    ds = _dataset()
    loose = {k: v.astype(np.float64) for k, v in ds.items()}
    loose["episode_ids"] = ds["episode_ids"].astype(np.int64)
    loose["behaviour_ids"] = ds["behaviour_ids"].astype(np.int16)
    loose["terminals"] = ds["terminals"] > 0  # bool flags are fine
    loose["extra"] = np.zeros(3)
    path = offline_episodes.save_source(loose, tmp_path / "a" / "b.npz")
    assert path == str(tmp_path / "a" / "b.npz")
    assert os.listdir(tmp_path / "a") == ["b.npz"]
    with np.load(path) as f:
        assert sorted(f.files) == sorted(data.KEYS)
        _assert_same({k: f[k] for k in data.KEYS}, ds)
    with pytest.raises(ValueError, match="lacks the keys"):
        offline_episodes.save_source({"rewards": np.zeros(3)}, tmp_path / "c.npz")
    assert sorted(os.listdir(tmp_path)) == ["a"]  # nothing written on error


def test_changed_source_is_reported_stale(tmp_path):
    path = tmp_path / "src.npz"
    offline_episodes.save_source(_dataset(), path)
    offline_episodes.load_offline_episodes(path, data_dir=tmp_path / "tfds")
    # Another episode count.
    offline_episodes.save_source(_dataset(lengths=(4, 4), behaviours=(0, 1)), path)
    with pytest.raises(ValueError, match="does not match the file now at source"):
        offline_episodes.load_offline_episodes(path, data_dir=tmp_path / "tfds")
    # Same episode count, another transition count.
    offline_episodes.save_source(_dataset(lengths=(3, 7, 1, 12, 6)), path)
    with pytest.raises(ValueError, match=r"'episodes': 5, 'transitions': 28\}\) does not match"):
        offline_episodes.load_offline_episodes(path, data_dir=tmp_path / "tfds")


def _raw(tmp_path, name, ds):
    """Writes ``ds`` with plain np.savez (bypassing save_source's checks)."""
    path = tmp_path / name
    np.savez(path, **ds)
    return path


def test_bad_sources_are_rejected(tmp_path):
    tfds_dir = tmp_path / "tfds"
    good = _dataset()

    def load(name, **changes):
        ds = {k: v for k, v in {**good, **changes}.items() if v is not None}
        return offline_episodes.load_offline_episodes(_raw(tmp_path, name, ds),
                                                      data_dir=tfds_dir)

    with pytest.raises(ValueError, match=r"lacks the keys \['h', 'next_costs'\]"):
        load("missing.npz", h=None, next_costs=None)
    with pytest.raises(ValueError, match=r"'observations' must be 2-D \(\[N, dim\]\), got "
                                         r"shape \(28,\)"):
        load("obs_1d.npz", observations=np.zeros(28, np.float32))
    with pytest.raises(ValueError, match=r"'actions' must be 2-D .* got shape \(28, 2, 1\)"):
        load("act_3d.npz", actions=np.zeros((28, 2, 1), np.float32))
    with pytest.raises(ValueError, match=r"'rewards' must be 1-D \(\[N\]\), got shape \(28, 1\)"):
        load("rew_2d.npz", rewards=np.zeros((28, 1), np.float32))
    with pytest.raises(ValueError, match=r"length N = 28 of 'observations', got lengths "
                                         r"\{'costs': 27\}"):
        load("short.npz", costs=np.zeros(27, np.float32))
    with pytest.raises(ValueError, match=r"'next_observations' must have the shape of "
                                         r"'observations' \(28, 3\), got \(28, 4\)"):
        load("next_obs.npz", next_observations=np.zeros((28, 4), np.float32))
    with pytest.raises(ValueError, match="'episode_ids' must hold integers .* got dtype float32"):
        load("float_ids.npz", episode_ids=good["episode_ids"].astype(np.float32))
    with pytest.raises(ValueError, match="'masks' must hold reals .* got dtype <U1"):
        load("str_masks.npz", masks=np.full(28, "x"))
    with pytest.raises(ValueError, match="'episode_ids' must start at 0 .* got 1"):
        load("from_one.npz", episode_ids=good["episode_ids"] + 1)
    gap = good["episode_ids"].copy()
    gap[10:] += 1
    with pytest.raises(ValueError, match="contiguous and non-decreasing .* got 1 then 3 at "
                                         "transition 10"):
        load("gap.npz", episode_ids=gap)
    with pytest.raises(ValueError, match="got 4 then 0 at transition 27"):
        load("back.npz", episode_ids=np.append(good["episode_ids"][:-1], 0).astype(np.int32))
    mixed = good["behaviour_ids"].copy()
    mixed[5] = 2
    with pytest.raises(ValueError, match="'behaviour_ids' must be constant within an episode, "
                                         "but episode 1 has 3 and 2 \\(transition 5\\)"):
        load("mixed.npz", behaviour_ids=mixed)
    with pytest.raises(ValueError, match=r"holds no transitions"):
        load("empty.npz", **{k: v[:0] for k, v in good.items()})
    with pytest.raises(ValueError, match="source must be an existing .npz file"):
        offline_episodes.load_offline_episodes(tmp_path / "nope.npz", data_dir=tfds_dir)
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(ValueError, match="is not a zip file"):
        offline_episodes.load_offline_episodes(tmp_path / "text.npz", data_dir=tfds_dir)
    ok = _raw(tmp_path, "ok.npz", good)
    with pytest.raises(ValueError, match=r"split must be one of \('train',\)"):
        offline_episodes.load_offline_episodes(ok, data_dir=tfds_dir, split="test")
    with pytest.raises(ValueError, match="data_dir is required"):
        offline_episodes.load_offline_episodes(ok, data_dir=None)
    assert not tfds_dir.exists()  # every error came before any preparation
    with pytest.raises(ValueError, match="needs a config with source"):
        tfds.builder("offline_episodes", data_dir=tmp_path / "bare").download_and_prepare(
            file_format="array_record",
            download_config=tfds.download.DownloadConfig(try_download_gcs=False))


def test_generated_point_robot_data_round_trips(tmp_path):
    ds = data.make_dataset(envs.EnvParams(), 3000, jax.random.key(0))
    path = offline_episodes.save_source(ds, tmp_path / "point_robot.npz")
    loaded = offline_episodes.load_offline_episodes(path, data_dir=tmp_path / "tfds")
    _assert_same(loaded, ds)
    source = offline_episodes.offline_episodes_source(path, data_dir=tmp_path / "tfds")
    stats = data.episode_stats(ds)
    assert len(source) == len(stats["lengths"])
    np.testing.assert_array_equal([len(r["rewards"]) for r in source], stats["lengths"])
    np.testing.assert_array_equal([r["behaviour_id"] for r in source], stats["behaviour_ids"])
