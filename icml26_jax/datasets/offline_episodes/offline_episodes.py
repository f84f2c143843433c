"""TFDS builder ``offline_episodes``: an offline-RL transition file stored one episode a record.

The source is one ``.npz`` file of flat transitions in episode order, the schema of
``icml26_jax.safe_flow_rl.data`` (``KEYS``): ``observations`` and ``next_observations``
``[N, O]``, ``actions`` ``[N, A]``, ``rewards``, ``h``, ``next_h``, ``costs``,
``next_costs``, ``masks``, ``terminals``, ``timeouts`` ``[N]`` (all float32), and int32
``episode_ids`` ``[N]`` (0, 1, 2, ... contiguous, non-decreasing) and ``behaviour_ids``
``[N]`` (one value per episode; -1 when unknown). Other arrays in the file are ignored.
:func:`save_source` writes such a file from a dict (e.g. the output of
``safe_flow_rl.data.make_dataset`` or ``load_dsrl``) after checking it.

The builder's single ``train`` split holds one example per episode, in episode order: the
per-step features ``[T, O]`` / ``[T, A]`` / ``[T]`` float32 of every key except the ids,
plus the scalars ``episode_id`` and ``behaviour_id`` (int32). :func:`load_offline_episodes`
concatenates the episodes back into the flat dict (exactly the keys and dtypes above).

The config name is ``<8 hex digits of sha256(absolute source)>_<O>x<A>``, so the same file
always maps to the same prepared files. Those files are not rebuilt when the ``.npz``
changes: :func:`load_offline_episodes` compares the prepared episode and transition counts
with the file's and asks for the stale directory to be removed (a rewrite that keeps both
counts, e.g. new rewards on the same episodes, is not detected: save to a new path).

Usage::

    from icml26_jax.datasets import offline_episodes
    from icml26_jax.safe_flow_rl import data
    path = offline_episodes.save_source(data.load_dsrl("/data/car_circle.hdf5"),
                                        "/data/car_circle.npz")        # once
    ds = offline_episodes.load_offline_episodes(path, data_dir=workdir / "tfds")
    ds["observations"]                                                   # [N, O] float32
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import zipfile
from collections.abc import Mapping

import numpy as np
import tensorflow_datasets as tfds

from icml26_jax.core import data as core_data

NAME = "offline_episodes"
SPLITS = ("train",)
# Same keys and order as icml26_jax.safe_flow_rl.data.KEYS (not imported: that module
# imports the environments; tests check that the two agree).
KEYS = ("observations", "actions", "rewards", "h", "next_h", "costs", "next_costs",
        "next_observations", "masks", "terminals", "timeouts", "episode_ids", "behaviour_ids")
ID_KEYS = ("episode_ids", "behaviour_ids")  # int32, stored once per episode
STEP_KEYS = tuple(k for k in KEYS if k not in ID_KEYS)  # float32, stored per step
_OBS_KEYS = ("observations", "next_observations")  # [N, O]
_ACTION_KEYS = ("actions",)  # [N, A]
_INT32 = np.iinfo(np.int32)


def config_name(source: str | os.PathLike, obs_dim: int, action_dim: int) -> str:
    """The config name for a source file and its dimensions, e.g. ``1a2b3c4d_11x2``."""
    path = os.path.abspath(os.fspath(source))
    return f"{hashlib.sha256(path.encode()).hexdigest()[:8]}_{int(obs_dim)}x{int(action_dim)}"


@dataclasses.dataclass(frozen=True, eq=False)
class SourceInfo:
    """What :func:`source_info` reads from a source file.

    Attributes:
      path: absolute path of the ``.npz`` file.
      num_transitions: ``N``.
      obs_dim: ``O``.
      action_dim: ``A``.
      episode_lengths: ``[E]`` int64 transitions per episode, in episode order.
    """

    path: str
    num_transitions: int
    obs_dim: int
    action_dim: int
    episode_lengths: np.ndarray

    @property
    def num_episodes(self) -> int:
        return int(len(self.episode_lengths))


def _check_layout(layout: Mapping[str, tuple[tuple[int, ...], np.dtype]], where: str
                  ) -> tuple[int, int, int]:
    """Checks keys, ranks, lengths and dtype kinds; returns ``(N, O, A)``."""
    missing = [k for k in KEYS if k not in layout]
    if missing:
        raise ValueError(f"{where} lacks the keys {missing}; an offline_episodes source needs "
                         f"all of {list(KEYS)}")
    for k in KEYS:
        shape, dtype = layout[k]
        ndim = 2 if k in _OBS_KEYS + _ACTION_KEYS else 1
        if len(shape) != ndim:
            raise ValueError(f"{where}: {k!r} must be {ndim}-D "
                             f"({'[N, dim]' if ndim == 2 else '[N]'}), got shape {shape}")
        kinds = "iu" if k in ID_KEYS else "fiub"
        if dtype.kind not in kinds:
            raise ValueError(f"{where}: {k!r} must hold {'integers' if k in ID_KEYS else 'reals'}"
                             f" (stored as {'int32' if k in ID_KEYS else 'float32'}), got dtype "
                             f"{dtype}")
    n = layout["observations"][0][0]
    odd = {k: layout[k][0][0] for k in KEYS if layout[k][0][0] != n}
    if odd:
        raise ValueError(f"{where}: every key must have the length N = {n} of 'observations', "
                         f"got lengths {odd}")
    if n == 0:
        raise ValueError(f"{where} holds no transitions (N = 0)")
    obs, nobs = layout["observations"][0], layout["next_observations"][0]
    if obs != nobs:
        raise ValueError(f"{where}: 'next_observations' must have the shape of 'observations' "
                         f"{obs}, got {nobs}")
    o, a = obs[1], layout["actions"][0][1]
    if o == 0 or a == 0:
        raise ValueError(f"{where}: observations and actions need >= 1 column, got "
                         f"observations {obs} and actions {layout['actions'][0]}")
    return int(n), int(o), int(a)


def _check_ids(episode_ids: np.ndarray, behaviour_ids: np.ndarray, where: str) -> np.ndarray:
    """Checks the id arrays; returns the ``[E]`` episode lengths."""
    ep = np.asarray(episode_ids)
    if ep[0] != 0:
        raise ValueError(f"{where}: 'episode_ids' must start at 0 (renumber them 0, 1, 2, "
                         f"...), got {ep[0]}")
    bad = np.flatnonzero((np.diff(ep) != 0) & (np.diff(ep) != 1))
    if bad.size:
        t = int(bad[0]) + 1
        raise ValueError(f"{where}: 'episode_ids' must be contiguous and non-decreasing "
                         f"(0, 0, 1, 2, 2, ...), got {ep[t - 1]} then {ep[t]} at transition {t}")
    lengths = np.bincount(ep.astype(np.int64))  # every id 0..E-1 occurs: no zero lengths
    bid = np.asarray(behaviour_ids)
    if bid.min() < _INT32.min or bid.max() > _INT32.max:
        raise ValueError(f"{where}: 'behaviour_ids' must fit int32, got values in "
                         f"[{bid.min()}, {bid.max()}]")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    changed = bid != np.repeat(bid[starts], lengths)
    if np.any(changed):
        t = int(np.flatnonzero(changed)[0])
        raise ValueError(f"{where}: 'behaviour_ids' must be constant within an episode, but "
                         f"episode {ep[t]} has {bid[starts[ep[t]]]} and {bid[t]} (transition "
                         f"{t})")
    return lengths


def _npz_layout(path: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{key: (shape, dtype)}`` of the arrays in an ``.npz``, from their headers only."""
    out = {}
    with zipfile.ZipFile(path) as zf:
        for member in zf.namelist():
            if not member.endswith(".npy"):
                continue
            with zf.open(member) as fp:
                version = np.lib.format.read_magic(fp)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(fp)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(fp)
                else:  # Rare (3.0: utf-8 field names): read the array itself.
                    arr = np.load(fp, allow_pickle=False)
                    shape, dtype = arr.shape, arr.dtype
            out[member[:-4]] = (tuple(shape), np.dtype(dtype))
    return out


def _source_path(source: str | os.PathLike) -> str:
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"source must be the path of an .npz file, got source={source!r}")
    path = os.path.abspath(os.fspath(source))
    if not os.path.isfile(path):
        raise ValueError(f"source must be an existing .npz file, got source={os.fspath(source)!r}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"source must be an .npz archive (np.savez / save_source), but "
                         f"{path!r} is not a zip file")
    return path


def source_info(source: str | os.PathLike) -> SourceInfo:
    """Checks a source file and returns its sizes.

    Only the array headers and the two id arrays are read, so this is cheap for large files.

    Raises:
      ValueError: ``source`` is not an ``.npz`` file, lacks a key of ``KEYS``, or has an array
        of the wrong rank, length or dtype, or ids that break the schema.
    """
    path = _source_path(source)
    where = f"source {path!r}"
    n, o, a = _check_layout(_npz_layout(path), where)
    with np.load(path, allow_pickle=False) as f:
        lengths = _check_ids(f["episode_ids"], f["behaviour_ids"], where)
    return SourceInfo(path=path, num_transitions=n, obs_dim=o, action_dim=a,
                      episode_lengths=lengths)


def _to_schema(ds: Mapping[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """The schema keys of ``ds`` checked and cast to float32 / int32."""
    if not isinstance(ds, Mapping):
        raise ValueError(f"{where} must be a dict of arrays, got {type(ds).__name__}")
    arrays = {k: np.asarray(ds[k]) for k in KEYS if k in ds}
    _check_layout({k: (v.shape, v.dtype) for k, v in arrays.items()}, where)
    _check_ids(arrays["episode_ids"], arrays["behaviour_ids"], where)
    return {k: arrays[k].astype(np.int32 if k in ID_KEYS else np.float32, copy=False)
            for k in KEYS}


def save_source(ds: Mapping[str, np.ndarray], path: str | os.PathLike) -> str:
    """Writes a transition dict as an ``offline_episodes`` source file, atomically.

    Args:
      ds: the schema's arrays (see the module docstring; other keys are dropped). Real
        arrays are cast to float32, the ids to int32.
      path: where to write the ``.npz`` (parent directories are created). An existing file
        is replaced; if it was prepared already, delete its prepared copy (a changed
        episode or transition count is reported by :func:`load_offline_episodes`).

    Returns:
      The absolute path written.

    Raises:
      ValueError: ``ds`` breaks the schema (the message names the key and the problem).
    """
    out = os.path.abspath(os.fspath(path))
    arrays = _to_schema(ds, "ds")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:  # A file object: np.savez appends no ".npz" suffix.
            np.savez(fh, **arrays)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out


@dataclasses.dataclass(eq=False)
class EpisodesConfig(tfds.core.BuilderConfig):
    """A source file of transitions.

    Attributes:
      source: absolute path of the ``.npz`` file (see the module docstring).
      obs_dim: ``O``, the columns of ``observations``.
      action_dim: ``A``, the columns of ``actions``.
    """

    source: str = ""
    obs_dim: int = 0
    action_dim: int = 0

    @classmethod
    def make(cls, source: str | os.PathLike) -> EpisodesConfig:
        """A config named by :func:`config_name`, after checking the file (:func:`source_info`)."""
        return cls.from_info(source_info(source))

    @classmethod
    def from_info(cls, info: SourceInfo) -> EpisodesConfig:
        """The config of a file already checked by :func:`source_info`."""
        return cls(name=config_name(info.path, info.obs_dim, info.action_dim), source=info.path,
                   obs_dim=info.obs_dim, action_dim=info.action_dim,
                   description=f"episodes of {info.path}")


class OfflineEpisodes(tfds.core.GeneratorBasedBuilder):
    """Offline-RL transitions from an ``.npz`` file, one example per episode."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}

    def _info(self) -> tfds.core.DatasetInfo:
        cfg = self.builder_config
        o = cfg.obs_dim if cfg and cfg.obs_dim else None
        a = cfg.action_dim if cfg and cfg.action_dim else None
        dims = {k: (None, o) for k in _OBS_KEYS} | {k: (None, a) for k in _ACTION_KEYS}
        step = {k: tfds.features.Tensor(shape=dims.get(k, (None,)), dtype=np.float32)
                for k in STEP_KEYS}
        return self.dataset_info_from_configs(
            description=("Offline-RL transitions (observations, actions, rewards, constraint "
                         "values h, costs, flags) from an .npz file, one example per episode."),
            features=tfds.features.FeaturesDict({
                **step,
                "episode_id": tfds.features.Scalar(dtype=np.int32),
                "behaviour_id": tfds.features.Scalar(dtype=np.int32),
            }),
            # {"num_transitions": N} of the file as prepared, for the freshness check.
            metadata=tfds.core.MetadataDict(),
            # Keep episode order instead of hashing keys.
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download: the transitions are a local file.
        cfg = self.builder_config
        if cfg is None or not cfg.source:
            raise ValueError("offline_episodes needs a config with source: use "
                             "EpisodesConfig.make(source) or load_offline_episodes")
        path = _source_path(cfg.source)
        with np.load(path, allow_pickle=False) as f:
            arrays = _to_schema({k: f[k] for k in KEYS if k in f.files}, f"source {path!r}")
        dims = (arrays["observations"].shape[1], arrays["actions"].shape[1])
        if dims != (cfg.obs_dim, cfg.action_dim):
            raise ValueError(f"source {path!r} now has observations x actions {dims}, but the "
                             f"config {cfg.name} was made for {(cfg.obs_dim, cfg.action_dim)}; "
                             "make a new config (EpisodesConfig.make)")
        self.info.metadata["num_transitions"] = int(len(arrays["rewards"]))
        return {"train": self._generate_examples(arrays)}

    def _generate_examples(self, arrays):
        lengths = np.bincount(arrays["episode_ids"])
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        for e in range(len(lengths)):
            start, stop = int(bounds[e]), int(bounds[e + 1])
            example = {k: arrays[k][start:stop] for k in STEP_KEYS}
            example["episode_id"] = np.int32(e)
            example["behaviour_id"] = np.int32(arrays["behaviour_ids"][start])
            yield e, example


def load_offline_episodes(source: str | os.PathLike, *, data_dir: str | os.PathLike,
                          split: str = "train") -> dict[str, np.ndarray]:
    """All transitions of the source file, preparing the data set on first use.

    Args:
      source: the ``.npz`` file (see :func:`save_source`).
      data_dir: TFDS data directory (required: we never read ``~/tensorflow_datasets``).
      split: ``"train"`` or a non-empty TFDS slice of its episodes such as
        ``"train[:90%]"`` (TFDS itself rejects an empty slice).

    Several processes must not prepare the same ``data_dir`` at once (TFDS renames its
    finished temporary directory into place): prepare on one process first.

    Returns:
      ``{key: array}`` for every key of ``KEYS``, transitions in episode order:
      ``observations``/``next_observations`` ``[N, O]``, ``actions`` ``[N, A]``, the others
      ``[N]``; float32, except int32 ``episode_ids`` (renumbered 0..E-1 over the split's
      episodes) and ``behaviour_ids``.

    Raises:
      ValueError: a bad ``source`` or ``split``, or a prepared copy that no longer matches
        the file.
    """
    src = offline_episodes_source(source, data_dir=data_dir, split=split)
    records = src.__getitems__(list(range(len(src))))  # One batched read of every episode.
    lengths = np.array([len(r["rewards"]) for r in records], np.int64)
    out = {k: np.concatenate([np.asarray(r[k], np.float32) for r in records])
           for k in STEP_KEYS}
    out["episode_ids"] = np.repeat(np.arange(len(records), dtype=np.int32), lengths)
    bids = np.array([r["behaviour_id"] for r in records], np.int32)
    out["behaviour_ids"] = np.repeat(bids, lengths)
    return {k: out[k] for k in KEYS}


def offline_episodes_source(source: str | os.PathLike, *, data_dir: str | os.PathLike,
                            split: str = "train"):
    """Like :func:`load_offline_episodes`, but returns the random-access TFDS data source.

    Returns:
      A sequence of episodes ``{key: [T, ...] float32 for key in STEP_KEYS, "episode_id",
      "behaviour_id"}`` (``T`` varies; the scalars decode as Python ints).
    """
    if data_dir is None:
        raise ValueError("data_dir is required (we never read ~/tensorflow_datasets)")
    if not isinstance(split, str) or split.split("[")[0] not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} (optionally sliced), got split={split!r}")
    info = source_info(source)
    config = EpisodesConfig.from_info(info)
    src = core_data.data_source(
        NAME, split, data_dir=data_dir, download=True,
        builder_kwargs={"config": config, "file_format": "array_record"})
    _check_fresh(src, config, info)
    return src


def _check_fresh(src, config: EpisodesConfig, info: SourceInfo) -> None:
    """Raises if the prepared episodes no longer match the source file's counts."""
    expected = {"episodes": info.num_episodes, "transitions": info.num_transitions}
    metadata = src.dataset_info.metadata or {}
    prepared = {"episodes": src.dataset_info.splits["train"].num_examples,
                "transitions": metadata.get("num_transitions")}
    if prepared != expected:
        raise ValueError(f"the prepared offline_episodes/{config.name} ({prepared}) does not "
                         f"match the file now at source={config.source!r} ({expected}); "
                         f"delete {src.dataset_info.data_dir} to rebuild it")
