"""Tests of the digits_users TFDS builder and its partition function."""

import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds
from sklearn.datasets import load_digits

from icml26_jax.core import data
from icml26_jax.datasets import digits_users
from icml26_jax.datasets.digits_users import DigitsUsers, DigitsUsersConfig, partition

DIGITS = load_digits()
LABELS = (DIGITS.target >= 5).astype(np.int64)
N = 1797


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tfds")


@pytest.mark.parametrize("split", ["iid", "label_skew"])
@pytest.mark.parametrize("num_users", [1, 2, 16, 64, 1797])
def test_partition_disjoint_equal_shares(split, num_users):
    idx = partition(LABELS, num_users, split, seed=0)
    m = N // num_users
    assert idx.shape == (num_users, m) and idx.dtype == np.int64
    flat = idx.ravel()
    assert len(np.unique(flat)) == flat.size  # disjoint
    assert flat.min() >= 0 and flat.max() < N
    assert flat.size == N - N % num_users  # only the remainder is dropped


def test_partition_iid_is_the_seeded_permutation():
    idx = partition(LABELS, 16, "iid", seed=5)
    np.testing.assert_array_equal(idx.ravel(), np.random.default_rng(5).permutation(N)[:1792])
    np.testing.assert_array_equal(idx, partition(LABELS, 16, "iid", seed=5))
    assert not np.array_equal(idx, partition(LABELS, 16, "iid", seed=6))
    # iid users see both labels in roughly the global proportion.
    frac = LABELS[idx].mean(axis=1)
    assert np.all(np.abs(frac - LABELS.mean()) < 0.35)
    assert 0 < frac.min() and frac.max() < 1


def test_partition_label_skew_is_sorted():
    idx = partition(LABELS, 16, "label_skew", seed=123)
    lab = LABELS[idx.ravel()]
    assert np.all(np.diff(lab) >= 0)  # sorted by label
    np.testing.assert_array_equal(idx, partition(LABELS, 16, "label_skew", seed=0))  # no seed
    # Stable sort: rows keep their original order within each label.
    for value in (0, 1):
        rows = idx.ravel()[lab == value]
        assert np.all(np.diff(rows) > 0)
    # All but the one straddling user hold a single label.
    per_user = LABELS[idx]
    mixed = [u for u in range(16) if 0 < per_user[u].mean() < 1]
    assert len(mixed) <= 1


@pytest.mark.parametrize("args, match", [
    ((LABELS, 4, "dirichlet"), r"split must be one of \('iid', 'label_skew'\)"),
    ((LABELS, 0, "iid"), r"num_users must be in \[1, 1797\]"),
    ((LABELS, 1798, "iid"), r"num_users must be in \[1, 1797\]"),
    ((LABELS, 2.0, "iid"), "num_users must be an integer"),
    ((LABELS.reshape(-1, 1), 2, "iid"), "labels must be 1-D"),
])
def test_partition_errors(args, match):
    with pytest.raises(ValueError, match=match):
        partition(*args)


def test_builder_configs():
    names = [c.name for c in DigitsUsers.BUILDER_CONFIGS]
    assert names == ["iid_16", "iid_64", "label_skew_16", "label_skew_64"]
    cfg = DigitsUsers.builder_configs["label_skew_64"]
    assert (cfg.num_users, cfg.split, cfg.seed) == (64, "label_skew", 0)
    assert DigitsUsersConfig.make(8, "iid", 2).name == "iid_8_seed2"
    with pytest.raises(ValueError, match="split must be one of"):
        DigitsUsersConfig(name="bad", num_users=4, split="other")
    with pytest.raises(ValueError, match="num_users must be in"):
        DigitsUsersConfig.make(0, "iid")


@pytest.mark.parametrize("num_users, split, seed", [(16, "label_skew", 0), (64, "iid", 0),
                                                     (5, "iid", 3)])
def test_records_equal_in_memory_partition(tfds_dir, num_users, split, seed):
    d = digits_users.load_digits_users(num_users, split, seed, data_dir=tfds_dir)
    idx = partition(LABELS, num_users, split, seed)
    m = idx.shape[1]
    assert d["pixels"].shape == (num_users * m, 64) and d["pixels"].dtype == np.float32
    assert d["user"].dtype == np.int32 and d["index"].dtype == np.int32
    assert d["label"].dtype == np.int64 and d["digit"].dtype == np.int64
    # Ordered by user, then position in the user's shard.
    np.testing.assert_array_equal(d["index"].reshape(num_users, m), idx)
    np.testing.assert_array_equal(d["user"], np.repeat(np.arange(num_users), m))
    np.testing.assert_array_equal(d["digit"], DIGITS.target[idx.ravel()])
    np.testing.assert_array_equal(d["label"], LABELS[idx.ravel()])
    np.testing.assert_allclose(d["pixels"], DIGITS.data[idx.ravel()] / 16.0, rtol=0, atol=1e-7)
    assert 0.0 <= d["pixels"].min() and d["pixels"].max() <= 1.0


def test_prepared_dataset_is_readable_via_data_source(tfds_dir):
    digits_users.load_digits_users(16, "label_skew", data_dir=tfds_dir)  # prepared or reused
    assert (tfds_dir / "digits_users" / "label_skew_16" / "1.0.0").is_dir()
    src = data.data_source("digits_users/label_skew_16", "train", data_dir=tfds_dir)
    assert "tensorflow" not in sys.modules
    assert len(src) == 1792
    rec = src[200]
    assert set(rec) == {"pixels", "digit", "label", "user", "index"}
    assert rec["user"] == 200 // 112
    builder = tfds.builder("digits_users/label_skew_16", data_dir=tfds_dir)
    assert builder.info.splits["train"].num_examples == 1792
    assert builder.info.features["digit"].num_classes == 10
    assert builder.info.supervised_keys == ("pixels", "label")


def test_load_requires_data_dir():
    with pytest.raises(ValueError, match="data_dir is required"):
        digits_users.load_digits_users(16, "iid", data_dir=None)
