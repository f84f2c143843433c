"""Real-text language-modelling data: byte windows of documents, PG19, local token shards.

The synthetic HMM language (:mod:`icml26_jax.lm.hmm`) is what tests and default runs use;
these paths are for users who have real text. All of them return ``[N, L]`` int32 arrays of
non-overlapping windows in a deterministic order (documents in order, windows in order), so
the same call gives the same data.

Bytes are the vocabulary for raw text (UTF-8, ``V = 256``): no tokenizer to download.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from icml26_jax.core import data as core_data

__all__ = ["BYTE_VOCAB_SIZE", "byte_windows", "pg19_windows", "token_shard_windows"]

BYTE_VOCAB_SIZE = 256

_PG19_HOWTO = (
    "prepare PG19 once as array_record, e.g. `tfds build pg19 --data_dir={data_dir} "
    "--file_format=array_record` or, in Python, `tfds.builder('pg19', data_dir=..., "
    "file_format='array_record').download_and_prepare(file_format='array_record')`. Building "
    "PG19 reads gs://deepmind-gutenberg and needs TensorFlow in the environment that builds "
    "it (this package only reads the prepared files, without TensorFlow)")


def byte_windows(texts: Iterable[str | bytes], length: int, *, num_windows: int | None = None,
                 stride: int | None = None) -> np.ndarray:
    """UTF-8 byte windows of documents.

    Each document (``str`` is UTF-8 encoded) is cut into windows ``doc[s:s + length]`` for
    ``s = 0, stride, 2 * stride, ...`` while the window fits; a document shorter than
    ``length`` gives no window, and the tail of a document that does not fill a window is
    dropped. Windows never cross documents.

    Args:
      texts: an iterable of documents (``str`` or ``bytes``); read lazily, and only until
        ``num_windows`` windows are found.
      length: window length ``L >= 1`` in bytes.
      num_windows: keep at most this many windows (the first ones); None keeps all.
      stride: distance between window starts, ``>= 1``; defaults to ``length``
        (non-overlapping windows).

    Returns:
      ``[N, L]`` int32 bytes in ``[0, 256)``.
    """
    if isinstance(texts, (str, bytes, bytearray)):
        raise ValueError(f"texts must be an iterable of documents, not a single "
                         f"{type(texts).__name__}; wrap it in a list")
    length = _check_int("length", length, 1)
    stride = length if stride is None else _check_int("stride", stride, 1)
    if num_windows is not None:
        num_windows = _check_int("num_windows", num_windows, 1)
    out = []
    found = 0
    for i, doc in enumerate(texts):
        if isinstance(doc, str):
            doc = doc.encode("utf-8")
        elif isinstance(doc, (np.bytes_, bytearray, memoryview)):
            doc = bytes(doc)
        if not isinstance(doc, bytes):
            raise ValueError(f"every document in texts must be str or bytes, got "
                             f"{type(doc).__name__} at index {i}")
        arr = np.frombuffer(doc, np.uint8)  # [len(doc)]
        if arr.shape[0] < length:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(arr, length)[::stride]  # [n, L]
        if num_windows is not None:
            windows = windows[:num_windows - found]
        out.append(windows.astype(np.int32))
        found += windows.shape[0]
        if num_windows is not None and found >= num_windows:
            break
    if not out:
        return np.zeros((0, length), np.int32)
    return np.concatenate(out)


def pg19_windows(data_dir: str | os.PathLike, split: str, length: int, *,
                 num_docs: int | None = None, num_windows: int | None = None) -> np.ndarray:
    """Byte windows of PG19 books (Rae et al., 2020), read from a prepared TFDS copy.

    Reads ``icml26_jax.core.data.data_source("pg19", split, data_dir=data_dir)``: the data
    set must have been prepared in ``data_dir`` as ``array_record`` beforehand (nothing is
    downloaded here). Books are taken in the data set's order and cut by
    :func:`byte_windows` from their ``book_text``.

    Args:
      data_dir: TFDS data directory holding the prepared ``pg19``.
      split: ``"train"``, ``"validation"`` or ``"test"`` (TFDS slices work too).
      length: window length in bytes.
      num_docs: use the first ``num_docs`` books (None: all of the split).
      num_windows: keep at most this many windows; reading stops once they are found.

    Returns:
      ``[N, length]`` int32 bytes.

    Raises:
      FileNotFoundError: PG19 is not prepared in ``data_dir``; the message says how to.
    """
    length = _check_int("length", length, 1)
    if num_docs is not None:
        num_docs = _check_int("num_docs", num_docs, 1)
    try:
        source = core_data.data_source("pg19", split, data_dir=data_dir)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"PG19 is not prepared in data_dir={os.fspath(data_dir)!r}: "
                                + _PG19_HOWTO.format(data_dir=os.fspath(data_dir))) from e
    n = len(source) if num_docs is None else min(num_docs, len(source))
    texts = (source[i]["book_text"] for i in range(n))
    return byte_windows(texts, length, num_windows=num_windows)


def token_shard_windows(data_dir: str | os.PathLike, length: int, *, split: str = "train",
                        num_windows: int | None = None,
                        source_dir: str | os.PathLike | None = None) -> np.ndarray:
    """Windows of the ``token_shards`` data set (``.npy`` token files, see its builder).

    Args:
      data_dir: TFDS data directory.
      length: window length ``L`` the data set was (or is to be) prepared with.
      split: ``"train"`` or ``"validation"``.
      num_windows: keep at most the first ``num_windows`` windows (None: all).
      source_dir: the directory of ``.npy`` files. When given, the data set is prepared on
        first use (:func:`icml26_jax.datasets.token_shards.load_token_shards`). When None,
        the one ``token_shards`` config of window length ``length`` already prepared in
        ``data_dir`` is read.

    Returns:
      ``[N, L]`` int32 tokens in stream order.

    Raises:
      FileNotFoundError: ``source_dir`` is None and no config of this length is prepared.
      ValueError: ``source_dir`` is None and several configs of this length are prepared.
    """
    from icml26_jax.datasets import token_shards  # Deferred: imports TFDS.

    if data_dir is None:
        raise ValueError("data_dir is required (we never read ~/tensorflow_datasets)")
    length = _check_int("length", length, 2)
    if split not in token_shards.SPLITS:
        raise ValueError(f"split must be one of {token_shards.SPLITS}, got split={split!r}")
    if num_windows is not None:
        num_windows = _check_int("num_windows", num_windows, 1)
    if source_dir is not None:
        source = token_shards.token_shards_source(source_dir, length, split, data_dir=data_dir)
    else:
        root = Path(os.fspath(data_dir)) / token_shards.NAME
        infos = root.glob(f"L{length}_*/*/dataset_info.json")  # <config>/<version>/
        names = sorted({p.parent.parent.name for p in infos})
        if not names:
            raise FileNotFoundError(
                f"no token_shards data set with length={length} is prepared in "
                f"data_dir={os.fspath(data_dir)!r}; pass source_dir (a directory of .npy "
                f"token files) to prepare it, or call token_shards.load_token_shards once")
        if len(names) > 1:
            raise ValueError(f"several token_shards data sets with length={length} are "
                             f"prepared in data_dir={os.fspath(data_dir)!r} ({names}); pass "
                             f"source_dir to choose one")
        source = core_data.data_source(f"{token_shards.NAME}/{names[0]}", split,
                                       data_dir=data_dir)
    n = len(source) if num_windows is None else min(num_windows, len(source))
    if n == 0:
        return np.zeros((0, length), np.int32)
    # Only the first n records are read (a TFDS split slice would fail past the split's end).
    getitems = getattr(source, "__getitems__", None)
    records = getitems(list(range(n))) if getitems else [source[i] for i in range(n)]
    return np.stack([np.asarray(r["tokens"], np.int32) for r in records])


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {name}={value!r}")
    return int(value)
