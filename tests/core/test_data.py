"""Tests of icml26_jax.core.data on plain lists and on a real TFDS ArrayRecord source."""

import sys

import numpy as np
import pytest

from icml26_jax.core import data
from icml26_jax.datasets import digits_users


def _records(n):
    return [{"x": np.full(2, i, np.float32), "i": i} for i in range(n)]


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tfds")
    digits_users.load_digits_users(4, "iid", seed=1, data_dir=d)  # prepares iid_4_seed1
    return d


@pytest.mark.parametrize("n, count, expected", [
    (10, 1, [slice(0, 10)]), (10, 2, [slice(0, 5), slice(5, 10)]),
    (10, 3, [slice(0, 3), slice(3, 6), slice(6, 9)]), (1, 2, [slice(0, 0), slice(0, 0)]),
])
def test_process_slice(n, count, expected):
    got = [data.process_slice(n, process_index=i, process_count=count) for i in range(count)]
    assert got == expected


def test_process_slice_defaults_and_errors():
    assert data.process_slice(8) == slice(0, 8)  # one process in tests
    with pytest.raises(ValueError, match="process_index must be in \\[0, 2\\)"):
        data.process_slice(8, process_index=2, process_count=2)
    with pytest.raises(ValueError, match="process_count must be >= 1"):
        data.process_slice(8, process_index=0, process_count=0)
    with pytest.raises(ValueError, match="n must be >= 0"):
        data.process_slice(-1)


def test_to_arrays():
    out = data.to_arrays(_records(5))
    assert set(out) == {"x", "i"}
    np.testing.assert_array_equal(out["i"], np.arange(5))
    assert out["x"].shape == (5, 2) and out["x"].dtype == np.float32
    assert set(data.to_arrays(_records(3), keys=["i"])) == {"i"}
    with pytest.raises(ValueError, match="not in the records' features"):
        data.to_arrays(_records(3), keys=["y"])
    with pytest.raises(ValueError, match="empty"):
        data.to_arrays([])


def test_batches_shapes_and_epochs():
    src = _records(10)
    bs = list(data.batches(src, 4, seed=0, epochs=2))
    assert len(bs) == 4  # 2 full batches per epoch, remainder of 2 dropped
    for b in bs:
        assert b["x"].shape == (4, 2) and b["i"].shape == (4,)
    ids = [np.concatenate([b["i"] for b in bs[:2]]), np.concatenate([b["i"] for b in bs[2:]])]
    for e in ids:
        assert len(set(e.tolist())) == 8  # no repeats within an epoch
    assert not np.array_equal(ids[0], ids[1])  # reshuffled per epoch
    np.testing.assert_array_equal(ids[0], np.random.default_rng((0, 0)).permutation(10)[:8])
    tail = list(data.batches(src, 4, seed=0, shuffle=False, drop_remainder=False))
    assert [b["i"].tolist() for b in tail] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_batches_deterministic_and_forever():
    src = _records(12)
    a = [b["i"].tolist() for b in data.batches(src, 3, seed=7, epochs=3)]
    b = [b["i"].tolist() for b in data.batches(src, 3, seed=7, epochs=3)]
    c = [b["i"].tolist() for b in data.batches(src, 3, seed=8, epochs=3)]
    assert a == b and a != c
    it = data.batches(src, 3, seed=7, epochs=None)
    forever = [next(it)["i"].tolist() for _ in range(20)]  # beyond 3 epochs of 4 batches
    assert forever[:12] == a


@pytest.mark.parametrize("count", [2, 4])
def test_batches_process_shares_are_disjoint_and_cover(count):
    src = _records(21)
    full = list(data.batches(src, 8, seed=3, epochs=2, process_index=0, process_count=1))
    shares = [list(data.batches(src, 8, seed=3, epochs=2, process_index=p, process_count=count))
              for p in range(count)]
    for k, batch in enumerate(full):
        parts = [shares[p][k]["i"] for p in range(count)]
        assert all(len(p) == 8 // count for p in parts)
        # Process shares are consecutive pieces of the same global batch.
        np.testing.assert_array_equal(np.concatenate(parts), batch["i"])
        assert len(set(np.concatenate(parts).tolist())) == 8


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size must be a positive integer"),
    (dict(batch_size=2.0), "batch_size must be a positive integer"),
    (dict(batch_size=3, process_index=0, process_count=2), "multiple of the process count"),
    (dict(batch_size=11), "exceeds the 10 records"),
    (dict(batch_size=2, epochs=-1), "epochs must be"),
    (dict(batch_size=2, process_index=3, process_count=2), "process_index must be in"),
])
def test_batches_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        data.batches(_records(10), seed=0, **kwargs)  # raised at the call, not at next()


def test_data_source_requires_data_dir():
    with pytest.raises(ValueError, match="data_dir is required"):
        data.data_source("digits_users/iid_16", "train", data_dir=None)


def test_tfds_source_without_tensorflow(tfds_dir):
    src = data.data_source("digits_users/iid_4_seed1", "train", data_dir=tfds_dir)
    assert "tensorflow" not in sys.modules  # tfds read ArrayRecord files without TF
    assert len(src) == 1796  # 1797 // 4 * 4
    arrays = data.to_arrays(src, keys=["pixels", "user", "index"])
    assert arrays["pixels"].shape == (1796, 64) and arrays["pixels"].dtype == np.float32
    # Declared int32 features keep their dtype (TFDS decodes scalars as Python ints).
    assert arrays["user"].dtype == np.int32 and arrays["index"].dtype == np.int32
    bs = list(data.batches(src, 256, seed=0, process_index=1, process_count=2))
    assert len(bs) == 7 and bs[0]["pixels"].shape == (128, 64)
    order = np.random.default_rng((0, 0)).permutation(1796)
    np.testing.assert_array_equal(bs[0]["index"], arrays["index"][order[128:256]])


def test_tfds_source_missing_dataset(tmp_path):
    # download=False by default: a data set that was never prepared is an error, not a fetch.
    with pytest.raises(FileNotFoundError, match="'digits_users/iid_16' is not prepared"):
        data.data_source("digits_users/iid_16", "train", data_dir=tmp_path)
    assert not (tmp_path / "digits_users" / "iid_16" / "1.0.0" / "dataset_info.json").exists()
    src = data.data_source("digits_users/iid_16", "train[:10]", data_dir=tmp_path,
                           download=True)  # generated locally from scikit-learn
    assert len(src) == 10 and src[0]["user"] == 0
