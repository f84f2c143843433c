"""Tests of the token_shards TFDS builder (a directory of .npy token files -> windows)."""

import hashlib
import os
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from icml26_jax.core import data
from icml26_jax.datasets import token_shards
from icml26_jax.datasets.token_shards import TokenShards, TokenShardsConfig

LENGTH = 8
# Files written out of name order, with different integer dtypes; sorted order is a, b, c.
FILES = {
    "b.npy": np.arange(1000, 1411, dtype=np.int64),  # 411 tokens
    "a.npy": np.arange(0, 300, dtype=np.uint16),  # 300 tokens
    "c.npy": np.arange(5000, 5097, dtype=np.int32),  # 97 tokens
}
STREAM = np.concatenate([FILES[k] for k in sorted(FILES)]).astype(np.int32)  # [808]
NUM_WINDOWS = 808 // LENGTH  # 101 (test_trailing_tokens_are_dropped covers a remainder)
WINDOWS = STREAM[:NUM_WINDOWS * LENGTH].reshape(NUM_WINDOWS, LENGTH)


def _write(directory, files):
    directory.mkdir(parents=True, exist_ok=True)
    for name, arr in files.items():
        np.save(directory / name, arr)
    return directory


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("token_shards")
    src = _write(root / "src", FILES)
    tfds_dir = root / "tfds"
    train = token_shards.load_token_shards(src, LENGTH, "train", data_dir=tfds_dir)
    return src, tfds_dir, train


def test_split_sizes():
    assert token_shards.split_sizes(2) == {"train": 1, "validation": 1}
    assert token_shards.split_sizes(39) == {"train": 38, "validation": 1}
    assert token_shards.split_sizes(40) == {"train": 38, "validation": 2}
    assert token_shards.split_sizes(101) == {"train": 96, "validation": 5}


def test_windows_are_the_concatenation_cut(prepared):
    src, tfds_dir, train = prepared
    val = token_shards.load_token_shards(src, LENGTH, "validation", data_dir=tfds_dir)
    assert train.dtype == np.int32 and val.dtype == np.int32
    assert train.shape == (96, LENGTH) and val.shape == (5, LENGTH)
    np.testing.assert_array_equal(train, WINDOWS[:96])
    np.testing.assert_array_equal(val, WINDOWS[96:])
    # Window 37 spans the a.npy / b.npy boundary (token 300 is b's first).
    np.testing.assert_array_equal(train[37], [296, 297, 298, 299, 1000, 1001, 1002, 1003])


def test_trailing_tokens_are_dropped(tmp_path):
    src = _write(tmp_path / "src", {"x.npy": np.arange(23)})
    out = token_shards.load_token_shards(src, 5, "train", data_dir=tmp_path / "tfds")
    val = token_shards.load_token_shards(src, 5, "validation", data_dir=tmp_path / "tfds")
    np.testing.assert_array_equal(np.concatenate([out, val]).ravel(), np.arange(20))
    assert out.shape == (3, 5) and val.shape == (1, 5)


def test_config_name_and_location(prepared):
    src, tfds_dir, _ = prepared
    digest = hashlib.sha256(os.path.abspath(src).encode()).hexdigest()[:8]
    name = token_shards.config_name(src, LENGTH)
    assert name == f"L8_{digest}"
    assert token_shards.config_name(str(src) + "/", LENGTH) == name  # same absolute path
    assert token_shards.config_name(src, 16) == f"L16_{digest}"
    assert token_shards.config_name(src.parent, LENGTH) != name
    assert (tfds_dir / "token_shards" / name / "1.0.0").is_dir()
    cfg = TokenShardsConfig.make(src, LENGTH)
    assert (cfg.name, cfg.source_dir, cfg.length) == (name, os.path.abspath(src), LENGTH)


def test_reload_does_not_rebuild(prepared, monkeypatch):
    src, tfds_dir, train = prepared

    def fail(*args, **kwargs):
        raise AssertionError("the prepared data set was generated again")

    monkeypatch.setattr(TokenShards, "_generate_examples", fail)
    monkeypatch.setattr(TokenShards, "_split_generators", fail)
    again = token_shards.load_token_shards(src, LENGTH, "train", data_dir=tfds_dir)
    np.testing.assert_array_equal(again, train)


def test_readable_by_name_via_data_source(prepared):
    src, tfds_dir, _ = prepared
    name = "token_shards/" + token_shards.config_name(src, LENGTH)
    source = data.data_source(name, "validation", data_dir=tfds_dir)
    assert "tensorflow" not in sys.modules
    assert len(source) == 5
    np.testing.assert_array_equal(source[0]["tokens"], WINDOWS[96])
    builder = tfds.builder(name, data_dir=tfds_dir)
    assert builder.info.splits["train"].num_examples == 96
    assert builder.info.features["tokens"].shape == (LENGTH,)


def test_changed_source_is_reported_stale(tmp_path):
    src = _write(tmp_path / "src", {"a.npy": np.arange(40)})
    token_shards.load_token_shards(src, 4, "train", data_dir=tmp_path / "tfds")
    _write(src, {"b.npy": np.arange(40)})
    with pytest.raises(ValueError, match="does not match the files now in source_dir"):
        token_shards.load_token_shards(src, 4, "train", data_dir=tmp_path / "tfds")


def test_input_errors(tmp_path):
    tfds_dir = tmp_path / "tfds"
    with pytest.raises(ValueError, match="source_dir must be an existing directory"):
        token_shards.load_token_shards(tmp_path / "missing", 8, "train", data_dir=tfds_dir)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="source_dir must contain .npy token files"):
        token_shards.load_token_shards(tmp_path / "empty", 8, "train", data_dir=tfds_dir)
    two_d = _write(tmp_path / "two_d", {"a.npy": np.zeros((4, 8), np.int32)})
    with pytest.raises(ValueError, match=r"1-D integer array, got shape \(4, 8\)"):
        token_shards.load_token_shards(two_d, 8, "train", data_dir=tfds_dir)
    floats = _write(tmp_path / "floats", {"a.npy": np.zeros(64, np.float32)})
    with pytest.raises(ValueError, match="1-D integer array, got shape .* dtype float32"):
        token_shards.load_token_shards(floats, 8, "train", data_dir=tfds_dir)
    ok = _write(tmp_path / "ok", {"a.npy": np.arange(64)})
    for length in (1, 0, 2.0):
        with pytest.raises(ValueError, match=f"length must be an integer >= 2, got "
                                             f"length={length}"):
            token_shards.load_token_shards(ok, length, "train", data_dir=tfds_dir)
    with pytest.raises(ValueError, match="fewer than the 2 \\* length = 128"):
        token_shards.load_token_shards(ok, 64, "train", data_dir=tfds_dir)
    with pytest.raises(ValueError, match=r"split must be one of \('train', 'validation'\)"):
        token_shards.load_token_shards(ok, 8, "test", data_dir=tfds_dir)
    with pytest.raises(ValueError, match="data_dir is required"):
        token_shards.load_token_shards(ok, 8, "train", data_dir=None)
    assert not tfds_dir.exists()  # every error came before any preparation


def test_negative_tokens_are_rejected(tmp_path):
    src = _write(tmp_path / "src", {"a.npy": np.arange(-3, 61)})
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 2147483647\]"):
        token_shards.load_token_shards(src, 8, "train", data_dir=tmp_path / "tfds")
