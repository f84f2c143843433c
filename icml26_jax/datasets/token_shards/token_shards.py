"""TFDS builder ``token_shards``: a directory of ``.npy`` token arrays cut into LM windows.

A user who has tokenised a corpus elsewhere saves it as 1-D integer ``.npy`` files (any
lengths, any number of files) in one directory. A config names that directory and the window
length ``L``; the builder concatenates the files' tokens in sorted file-name order, cuts the
stream into non-overlapping windows of ``L`` tokens (the trailing ``< L`` tokens are dropped)
and stores each window as one example ``{"tokens": int32[L]}``. The last ``max(1, W // 20)``
of the ``W`` windows (5%, at least one) form the ``validation`` split, the others ``train``;
both keep the stream order.

The config name is ``L<length>_<8 hex digits of sha256(absolute source_dir)>``, so the same
directory and length always map to the same prepared files. Those files are not rebuilt when
the ``.npy`` files change: :func:`load_token_shards` compares the prepared window count with
the files' current sizes and asks for the stale directory to be removed.

Usage::

    from icml26_jax.datasets import token_shards
    train = token_shards.load_token_shards("/data/my_tokens", 256, "train",
                                           data_dir=workdir / "tfds")   # [N, 256] int32
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from icml26_jax.core import data as core_data

NAME = "token_shards"
SPLITS = ("train", "validation")
_INT32_MAX = np.iinfo(np.int32).max


def config_name(source_dir: str | os.PathLike, length: int) -> str:
    """The config name for a source directory and window length, e.g. ``L256_1a2b3c4d``."""
    path = os.path.abspath(os.fspath(source_dir))
    return f"L{int(length)}_{hashlib.sha256(path.encode()).hexdigest()[:8]}"


def shard_files(source_dir: str | os.PathLike) -> tuple[list[Path], list[int]]:
    """The ``.npy`` files of ``source_dir`` in sorted order and their token counts.

    Only the ``.npy`` headers are read (memory-mapped), so this is cheap for large corpora.

    Raises:
      ValueError: ``source_dir`` is not a directory, holds no ``.npy`` file, or one of them
        is not a 1-D integer array.
    """
    root = Path(os.fspath(source_dir))
    if not root.is_dir():
        raise ValueError(f"source_dir must be an existing directory of .npy token files, got "
                         f"source_dir={os.fspath(source_dir)!r}")
    paths = sorted(p for p in root.iterdir() if p.suffix == ".npy" and p.is_file())
    if not paths:
        raise ValueError(f"source_dir must contain .npy token files, found none in "
                         f"source_dir={os.fspath(source_dir)!r}")
    sizes = []
    for p in paths:
        arr = np.load(p, mmap_mode="r", allow_pickle=False)
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"every .npy file in source_dir must hold a 1-D integer array, got "
                             f"shape {arr.shape} and dtype {arr.dtype} in {str(p)!r}")
        sizes.append(int(arr.shape[0]))
    return paths, sizes


def split_sizes(num_windows: int) -> dict[str, int]:
    """``{"train": W - max(1, W // 20), "validation": max(1, W // 20)}`` for ``W >= 2``."""
    num_val = max(1, num_windows // 20)
    return {"train": num_windows - num_val, "validation": num_val}


@dataclasses.dataclass(eq=False)
class TokenShardsConfig(tfds.core.BuilderConfig):
    """A directory of ``.npy`` token files and a window length.

    Attributes:
      source_dir: absolute path of the directory of 1-D integer ``.npy`` files.
      length: window length ``L >= 2`` (tokens per example).
    """

    source_dir: str = ""
    length: int = 256

    def __post_init__(self):
        # Fail at construction, not halfway through download_and_prepare.
        if isinstance(self.length, bool) or not isinstance(self.length, (int, np.integer)) \
                or self.length < 2:
            raise ValueError(f"length must be an integer >= 2, got length={self.length!r}")

    @classmethod
    def make(cls, source_dir: str | os.PathLike, length: int = 256) -> TokenShardsConfig:
        """A config named by :func:`config_name`, after checking the directory's files."""
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 2:
            raise ValueError(f"length must be an integer >= 2, got length={length!r}")
        _, sizes = shard_files(source_dir)
        path = os.path.abspath(os.fspath(source_dir))
        if sum(sizes) < 2 * length:
            raise ValueError(f"source_dir={path!r} holds {sum(sizes)} tokens, fewer than the "
                             f"2 * length = {2 * length} needed for one train and one "
                             f"validation window; lower length={length} or add tokens")
        return cls(name=config_name(path, length), source_dir=path, length=int(length),
                   description=f"windows of {length} tokens from {path}")


class TokenShards(tfds.core.GeneratorBasedBuilder):
    """Non-overlapping windows of a token stream stored as ``.npy`` files."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}

    def _info(self) -> tfds.core.DatasetInfo:
        length = self.builder_config.length if self.builder_config else 256
        return self.dataset_info_from_configs(
            description=("Token windows for language modelling, cut from a directory of "
                         "1-D integer .npy arrays concatenated in sorted file order."),
            features=tfds.features.FeaturesDict({
                "tokens": tfds.features.Tensor(shape=(length,), dtype=np.int32),
            }),
            # Keep stream order (validation = the end of the stream) instead of hashing keys.
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download: the tokens are local files.
        cfg = self.builder_config
        if cfg is None or not cfg.source_dir:
            raise ValueError("token_shards needs a config with source_dir: use "
                             "TokenShardsConfig.make(source_dir, length) or load_token_shards")
        paths, sizes = shard_files(cfg.source_dir)
        num_windows = sum(sizes) // cfg.length
        if num_windows < 2:
            raise ValueError(f"source_dir holds {sum(sizes)} tokens, fewer than the "
                             f"2 * length = {2 * cfg.length} needed for a train and a "
                             f"validation window (length={cfg.length})")
        n_train = split_sizes(num_windows)["train"]
        return {
            "train": self._generate_examples(paths, sizes, 0, n_train),
            "validation": self._generate_examples(paths, sizes, n_train, num_windows),
        }

    def _generate_examples(self, paths, sizes, start, stop):
        length = self.builder_config.length
        reader = _StreamReader(paths, sizes)
        for w in range(start, stop):
            yield w, {"tokens": reader.read(w * length, (w + 1) * length)}


class _StreamReader:
    """Random access to tokens ``[start, stop)`` of the concatenated, memory-mapped files."""

    def __init__(self, paths, sizes):
        self._paths = list(paths)
        self._offsets = np.concatenate([[0], np.cumsum(sizes)])  # [F + 1]
        self._cache: dict[int, np.ndarray] = {}

    def _file(self, i: int) -> np.ndarray:
        if i not in self._cache:
            self._cache.clear()  # Windows are read in order: one open file at a time.
            self._cache[i] = np.load(self._paths[i], mmap_mode="r", allow_pickle=False)
        return self._cache[i]

    def read(self, start: int, stop: int) -> np.ndarray:
        parts = []
        pos = start
        while pos < stop:
            i = int(np.searchsorted(self._offsets, pos, side="right")) - 1
            end = min(stop, int(self._offsets[i + 1]))
            parts.append(np.asarray(self._file(i)[pos - self._offsets[i]:end - self._offsets[i]]))
            pos = end
        out = np.concatenate(parts)
        if out.size and (out.min() < 0 or out.max() > _INT32_MAX):
            raise ValueError(f"token ids must be in [0, {_INT32_MAX}] (they are stored as "
                             f"int32), got values in [{out.min()}, {out.max()}] in tokens "
                             f"[{start}, {stop}) of the files {[str(p) for p in self._paths]}")
        return out.astype(np.int32)


def load_token_shards(source_dir: str | os.PathLike, length: int, split: str, *,
                      data_dir: str | os.PathLike) -> np.ndarray:
    """All windows of a split, preparing the data set on first use.

    Args:
      source_dir: directory of 1-D integer ``.npy`` token files.
      length: window length ``L >= 2``.
      split: ``"train"`` or ``"validation"`` (a TFDS slice such as ``"train[:10]"`` works too).
      data_dir: TFDS data directory (required: we never read ``~/tensorflow_datasets``).

    Several processes must not prepare the same ``data_dir`` at once (TFDS renames its
    finished temporary directory into place): prepare on one process first.

    Returns:
      ``[N, L]`` int32 windows in stream order.

    Raises:
      ValueError: bad ``source_dir``, ``length`` or ``split``, or a prepared copy that no
        longer matches the files in ``source_dir``.
    """
    source = token_shards_source(source_dir, length, split, data_dir=data_dir)
    if len(source) == 0:
        return np.zeros((0, int(length)), np.int32)
    return core_data.to_arrays(source, ["tokens"])["tokens"]


def token_shards_source(source_dir: str | os.PathLike, length: int, split: str, *,
                        data_dir: str | os.PathLike):
    """Like :func:`load_token_shards`, but returns the random-access TFDS data source.

    Returns:
      A sequence of ``{"tokens": [L] int32}`` records (``core.data.batches`` reads it).
    """
    if data_dir is None:
        raise ValueError("data_dir is required (we never read ~/tensorflow_datasets)")
    if not isinstance(split, str) or split.split("[")[0] not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} (optionally sliced), got split={split!r}")
    config = TokenShardsConfig.make(source_dir, length)
    source = core_data.data_source(
        NAME, split, data_dir=data_dir, download=True,
        builder_kwargs={"config": config, "file_format": "array_record"})
    _check_fresh(source, config)
    return source


def _check_fresh(source, config: TokenShardsConfig) -> None:
    """Raises if the prepared windows no longer match the source files' token counts."""
    _, sizes = shard_files(config.source_dir)
    expected = split_sizes(sum(sizes) // config.length)
    splits = source.dataset_info.splits
    prepared = {k: splits[k].num_examples for k in SPLITS}
    if prepared != expected:
        raise ValueError(f"the prepared token_shards/{config.name} ({prepared}) does not match "
                         f"the files now in source_dir={config.source_dir!r} ({expected}); "
                         f"delete {source.dataset_info.data_dir} to rebuild it")
