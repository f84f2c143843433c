"""TFDS builder ``digits_users``: ``sklearn.datasets.load_digits`` split over simulated users.

The 1797 8x8 digit images ship inside the scikit-learn wheel, so preparing the data set
downloads nothing. Each config fixes the number of users, the partition (``iid`` or
``label_skew`` over the binary label ``digit >= 5``) and its seed; the single ``train`` split
holds the kept samples ordered by user, then by position in the user's shard, so a reader
can reshape every feature to ``[num_users, m, ...]``.

Usage::

    from icml26_jax.datasets import digits_users
    data = digits_users.load_digits_users(16, "iid", data_dir=workdir / "tfds")
    x = data["pixels"].reshape(16, -1, 64)                 # [U, m, 64]
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow_datasets as tfds

from icml26_jax.core import data as core_data
from icml26_jax.datasets.digits_users.partition import SPLITS, partition

NUM_SAMPLES = 1797  # rows of sklearn.datasets.load_digits()


def config_name(num_users: int, split: str, seed: int = 0) -> str:
    """The config name for a partition, e.g. ``iid_16`` or ``iid_16_seed3``."""
    return f"{split}_{num_users}" + (f"_seed{seed}" if seed else "")


@dataclasses.dataclass(eq=False)
class DigitsUsersConfig(tfds.core.BuilderConfig):
    """A partition of the digits over users.

    Attributes:
      num_users: number of simulated users, in ``[1, 1797]``.
      split: ``"iid"`` or ``"label_skew"`` (see ``partition.partition``).
      seed: seed of the ``iid`` permutation.
    """

    num_users: int = 16
    split: str = "iid"
    seed: int = 0

    def __post_init__(self):
        # Fail at construction, not halfway through download_and_prepare.
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got split={self.split!r}")
        if not 1 <= int(self.num_users) <= NUM_SAMPLES:
            raise ValueError(f"num_users must be in [1, {NUM_SAMPLES}], "
                             f"got num_users={self.num_users}")

    @classmethod
    def make(cls, num_users: int, split: str, seed: int = 0) -> DigitsUsersConfig:
        """A config named by :func:`config_name`, so distinct partitions never share files."""
        return cls(name=config_name(num_users, split, seed), num_users=num_users, split=split,
                   seed=seed, description=f"{split} partition over {num_users} users, seed {seed}")


BUILDER_CONFIGS = [DigitsUsersConfig.make(u, s) for s in SPLITS for u in (16, 64)]


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # Deferred: sklearn import is slow.

    digits = load_digits()
    return digits.data, digits.target


class DigitsUsers(tfds.core.GeneratorBasedBuilder):
    """sklearn's digits, partitioned over simulated users."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    BUILDER_CONFIGS = BUILDER_CONFIGS
    DEFAULT_BUILDER_CONFIG_NAME = "iid_16"

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            description=("UCI optical handwritten digits (sklearn.datasets.load_digits), "
                         "8x8 pixels in [0, 1], partitioned over simulated users."),
            features=tfds.features.FeaturesDict({
                "pixels": tfds.features.Tensor(shape=(64,), dtype=np.float32),
                "digit": tfds.features.ClassLabel(num_classes=10),
                "label": tfds.features.Scalar(dtype=np.int64),
                "user": tfds.features.Scalar(dtype=np.int32),
                "index": tfds.features.Scalar(dtype=np.int32),
            }),
            supervised_keys=("pixels", "label"),
            homepage="https://archive.ics.uci.edu/dataset/80",
            # Keep generation order (by user, then shard position) instead of hashing keys.
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download: the data ships with scikit-learn.
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        pixels, digits = _load_digits()
        labels = (digits >= 5).astype(np.int64)
        cfg = self.builder_config
        shards = partition(labels, cfg.num_users, cfg.split, cfg.seed)  # [U, m]
        for key, (user, row) in enumerate(
                (u, r) for u in range(shards.shape[0]) for r in shards[u]):
            yield key, {
                "pixels": (pixels[row] / 16.0).astype(np.float32),
                "digit": int(digits[row]),
                "label": np.int64(labels[row]),
                "user": np.int32(user),
                "index": np.int32(row),
            }


def load_digits_users(num_users: int, split: str, seed: int = 0, *,
                      data_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """All records of a partition as NumPy arrays, preparing the data set on first use.

    Args:
      num_users: number of users.
      split: ``"iid"`` or ``"label_skew"``.
      seed: seed of the ``iid`` partition.
      data_dir: TFDS data directory (required: we never read ``~/tensorflow_datasets``).

    Several processes must not prepare the same ``data_dir`` at once (TFDS renames its
    finished temporary directory into place): prepare on one process first, or give each
    process its own ``data_dir``.

    Returns:
      ``{"pixels": [U*m, 64] float32, "digit", "label": [U*m] int64, "user", "index":
      [U*m] int32}``, ordered by user so ``x.reshape(num_users, -1, ...)`` gives per-user
      data.
    """
    if data_dir is None:
        raise ValueError("data_dir is required (we never read ~/tensorflow_datasets)")
    name = config_name(num_users, split, seed)
    # TFDS rejects a new config object named like a registered one, so pass those by name.
    config = name if name in DigitsUsers.builder_configs else DigitsUsersConfig.make(
        num_users, split, seed)
    builder = DigitsUsers(config=config, data_dir=os.fspath(data_dir),
                          file_format="array_record")
    # try_download_gcs=False: TFDS would otherwise probe GCS for a prepared copy (network).
    builder.download_and_prepare(
        file_format="array_record",
        download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return core_data.to_arrays(builder.as_data_source("train"))
