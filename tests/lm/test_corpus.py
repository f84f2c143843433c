"""Tests of the real-text LM data paths: byte windows, PG19, token shards."""

import sys

import numpy as np
import pytest

from icml26_jax.datasets import token_shards
from icml26_jax.lm import corpus


def _bytes(text):
    return list(text.encode("utf-8"))


def test_byte_windows_exact():
    out = corpus.byte_windows(["abcdefghij", "xy", "héllo!", b"\x00\xff\x10\x20"], 4)
    assert out.dtype == np.int32
    expected = [_bytes("abcd"), _bytes("efgh"),  # "ij" dropped, "xy" too short
                [104, 195, 169, 108],  # "hél": é is two UTF-8 bytes; "lo!" dropped
                [0, 255, 16, 32]]
    np.testing.assert_array_equal(out, expected)
    assert corpus.BYTE_VOCAB_SIZE == 256


def test_byte_windows_str_and_bytes_agree_and_are_deterministic():
    texts = ["The quick brown fox jumps over the lazy dog. " * 3, "Ünïcödé text ✓ " * 5]
    out = corpus.byte_windows(texts, 16)
    np.testing.assert_array_equal(out, corpus.byte_windows([t.encode() for t in texts], 16))
    np.testing.assert_array_equal(out, corpus.byte_windows(iter(texts), 16))
    n0 = len(texts[0].encode()) // 16
    assert out.shape == (n0 + len(texts[1].encode()) // 16, 16)
    assert bytes(out[:n0].astype(np.uint8).ravel()) == texts[0].encode()[:n0 * 16]


def test_byte_windows_stride_and_num_windows():
    np.testing.assert_array_equal(corpus.byte_windows(["abcdefg"], 4, stride=2),
                                  [_bytes("abcd"), _bytes("cdef")])
    np.testing.assert_array_equal(corpus.byte_windows(["abcdefghijkl"], 2, stride=5),
                                  [_bytes("ab"), _bytes("fg"), _bytes("kl")])
    np.testing.assert_array_equal(corpus.byte_windows(["abcdef", "ghijkl"], 2, num_windows=4),
                                  [_bytes("ab"), _bytes("cd"), _bytes("ef"), _bytes("gh")])

    def docs():  # Reading stops once num_windows windows are found.
        yield "abcdefgh"
        raise AssertionError("read past the windows asked for")

    assert corpus.byte_windows(docs(), 4, num_windows=2).shape == (2, 4)
    empty = corpus.byte_windows(["ab", ""], 4)
    assert empty.shape == (0, 4) and empty.dtype == np.int32


@pytest.mark.parametrize("args, kwargs, match", [
    (("abcdef", 2), {}, "texts must be an iterable of documents, not a single str"),
    ((["abc"], 0), {}, "length must be an integer >= 1, got length=0"),
    ((["abc"], 2), dict(stride=0), "stride must be an integer >= 1, got stride=0"),
    ((["abc"], 2), dict(num_windows=0), "num_windows must be an integer >= 1"),
    ((["abc", 3], 2), {}, "every document in texts must be str or bytes, got int at index 1"),
])
def test_byte_windows_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        corpus.byte_windows(*args, **kwargs)


def test_pg19_missing_is_a_clear_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="PG19 is not prepared") as err:
        corpus.pg19_windows(tmp_path, "train", 64)
    assert "file_format=array_record" in str(err.value)
    assert "tfds build pg19" in str(err.value)
    assert "tensorflow" not in sys.modules
    assert not (tmp_path / "pg19").exists()  # nothing was built or downloaded


def test_pg19_windows_reads_book_text(monkeypatch, tmp_path):
    # PG19 cannot be built here (it reads GCS with TensorFlow), so the data source is faked
    # with records shaped like the prepared data set's (book_text decodes to bytes).
    books = [{"book_text": b"0123456789", "book_id": 1}, {"book_text": b"abcdefgh", "book_id": 2},
             {"book_text": b"ABCDEFGH", "book_id": 3}]
    calls = []

    def fake_source(name, split, *, data_dir):
        calls.append((name, split, data_dir))
        return books

    monkeypatch.setattr(corpus.core_data, "data_source", fake_source)
    out = corpus.pg19_windows(tmp_path, "validation", 4, num_docs=2)
    assert calls == [("pg19", "validation", tmp_path)]
    np.testing.assert_array_equal(out, [_bytes("0123"), _bytes("4567"), _bytes("abcd"),
                                        _bytes("efgh")])
    assert corpus.pg19_windows(tmp_path, "train", 4, num_windows=3).shape == (3, 4)
    assert corpus.pg19_windows(tmp_path, "train", 4).shape == (6, 4)


def test_token_shard_windows(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    np.save(src / "a.npy", np.arange(100))
    np.save(src / "b.npy", np.arange(100, 203))  # 203 tokens -> 50 windows of 4 (2 val)
    tfds_dir = tmp_path / "tfds"
    with pytest.raises(FileNotFoundError, match="no token_shards data set with length=4"):
        corpus.token_shard_windows(tfds_dir, 4)
    train = corpus.token_shard_windows(tfds_dir, 4, source_dir=src)
    np.testing.assert_array_equal(train, np.arange(192).reshape(48, 4))
    # Without source_dir, the one prepared config of that length is found and read.
    np.testing.assert_array_equal(corpus.token_shard_windows(tfds_dir, 4), train)
    np.testing.assert_array_equal(corpus.token_shard_windows(tfds_dir, 4, split="validation"),
                                  np.arange(192, 200).reshape(2, 4))
    np.testing.assert_array_equal(corpus.token_shard_windows(tfds_dir, 4, num_windows=3),
                                  train[:3])
    # num_windows past the end of the split keeps what there is.
    assert corpus.token_shard_windows(tfds_dir, 4, split="validation", num_windows=9).shape \
        == (2, 4)
    with pytest.raises(FileNotFoundError, match="length=8"):
        corpus.token_shard_windows(tfds_dir, 8)
    other = tmp_path / "other"
    other.mkdir()
    np.save(other / "a.npy", np.arange(40))
    token_shards.load_token_shards(other, 4, "train", data_dir=tfds_dir)
    with pytest.raises(ValueError, match="several token_shards data sets with length=4"):
        corpus.token_shard_windows(tfds_dir, 4)
    np.testing.assert_array_equal(
        corpus.token_shard_windows(tfds_dir, 4, source_dir=other, num_windows=2),
        [[0, 1, 2, 3], [4, 5, 6, 7]])
    with pytest.raises(ValueError, match=r"split must be one of \('train', 'validation'\)"):
        corpus.token_shard_windows(tfds_dir, 4, split="test")
