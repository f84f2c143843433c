"""TFDS data sources -> NumPy arrays and per-process batches.

Data sets are read with ``tfds.data_source`` (random access over ArrayRecord files), never
``tfds.load``, so TensorFlow is not needed. Every function takes an explicit ``data_dir``:
tests and runs never touch ``~/tensorflow_datasets``.

In a multi-process job each process reads only its own contiguous share of every batch
(:func:`process_slice`); :func:`global_batch` assembles the global array from the shares
(``jax.make_array_from_process_local_data``). A data set prepared on first use is prepared by
process 0 alone while the others wait (:func:`data_source`), so no two processes write the
same files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import jax
import numpy as np


def data_source(name: str, split, *, data_dir: str | os.PathLike, **kw):
    """``tfds.data_source(name, split=split, data_dir=data_dir, **kw)``; no download by default.

    Args:
      name: registered builder name, optionally ``name/config:version``. The builder's
        module must be imported first (e.g. ``icml26_jax.datasets.digits_users``).
      split: split spec, e.g. ``"train"`` or ``"train[:80%]"``.
      data_dir: TFDS data directory (required).
      **kw: further ``tfds.data_source`` arguments. ``download`` defaults to False (then an
        unprepared data set is a ``FileNotFoundError``); with ``download=True`` the data set
        is prepared as ``array_record`` without looking on GCS (our builders generate their
        data locally), by process 0 first in a multi-process job (every process must call).

    Returns:
      A random-access sequence of feature dicts (NumPy values).
    """
    if data_dir is None:
        raise ValueError("data_dir is required: we never read ~/tensorflow_datasets")
    import tensorflow_datasets as tfds  # Deferred: importing tfds costs about a second.

    data_dir = os.fspath(data_dir)
    kw.setdefault("download", False)
    if kw["download"]:
        dp = dict(kw.pop("download_and_prepare_kwargs", None) or {})
        dp.setdefault("file_format", "array_record")
        # TFDS would otherwise look for a prepared copy on GCS, a network call.
        dp.setdefault("download_config", tfds.download.DownloadConfig(try_download_gcs=False))
        kw["download_and_prepare_kwargs"] = dp
        # Process 0 prepares; after the barrier the others find the prepared files.
        from icml26_jax.core import distributed

        return distributed.primary_first(
            lambda: tfds.data_source(name, split=split, data_dir=data_dir, **kw),
            f"data_source:{name}:{data_dir}")
    elif not tfds.builder(name, data_dir=data_dir, **(kw.get("builder_kwargs") or {})
                          ).is_prepared():
        # Checked here because TFDS's own error blames the file format instead.
        raise FileNotFoundError(f"data set {name!r} is not prepared in {data_dir}; prepare it "
                                "first (e.g. the builder's load function) or pass download=True")
    return tfds.data_source(name, split=split, data_dir=data_dir, **kw)


def process_slice(n: int, *, process_index: int | None = None,
                  process_count: int | None = None) -> slice:
    """This process's contiguous equal share of ``n`` items; the ``n % count`` rest is dropped.

    Args:
      n: number of items.
      process_index: defaults to ``jax.process_index()``.
      process_count: defaults to ``jax.process_count()``.
    """
    index, count = _process(process_index, process_count)
    if n < 0:
        raise ValueError(f"n must be >= 0, got n={n}")
    share = n // count
    return slice(index * share, (index + 1) * share)


def global_batch(local, mesh, axis=None):
    """One global array per leaf of ``local``, this process's share of a batch.

    The leading axes of the processes' shares are concatenated in process order (as
    :func:`batches` and :func:`process_slice` cut them) and sharded over mesh ``axis`` (all of
    the mesh's axes by default); ``jax.make_array_from_process_local_data`` builds each array
    without any process holding the whole batch.

    Args:
      local: pytree of host arrays, this process's rows.
      mesh: a ``jax.sharding.Mesh`` whose devices cover every process.
      axis: mesh axis name (or tuple of names) of the leading dimension.
    """
    from jax.sharding import NamedSharding, PartitionSpec as P

    axis = tuple(mesh.axis_names) if axis is None else axis
    sharding = NamedSharding(mesh, P(axis))
    return jax.tree.map(
        lambda a: jax.make_array_from_process_local_data(sharding, np.asarray(a)), local)


def to_arrays(source: Sequence[dict], keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Stacks every record of ``source`` into one array per feature.

    Args:
      source: random-access sequence of flat feature dicts (e.g. from :func:`data_source`).
      keys: features to keep (default: all features of the first record).

    Returns:
      ``{key: [len(source), ...] array}``.
    """
    n = len(source)
    if n == 0:
        raise ValueError("source is empty: nothing to stack")
    return _stack(source, range(n), keys)


def batches(source: Sequence[dict], batch_size: int, *, seed: int, epochs: int | None = 1,
            shuffle: bool = True, process_index: int | None = None,
            process_count: int | None = None,
            drop_remainder: bool = True) -> Iterator[dict[str, np.ndarray]]:
    """Iterates over this process's share of global batches of ``source``.

    Every process draws the same global order (a permutation from
    ``np.random.default_rng((seed, epoch))`` when ``shuffle``), cuts it into global batches of
    ``batch_size`` and keeps its own contiguous ``batch_size // process_count`` rows of each,
    so the shares of all processes are disjoint and together form the global batch.

    Args:
      source: random-access sequence of flat feature dicts.
      batch_size: global batch size, a positive multiple of the process count.
      seed: seed of the shuffle; same seed -> same batches.
      epochs: passes over the data; None repeats forever.
      shuffle: reshuffle every epoch (otherwise the source order).
      process_index: defaults to ``jax.process_index()``.
      process_count: defaults to ``jax.process_count()``.
      drop_remainder: drop the last incomplete global batch of each epoch. When False it is
        yielded, shared over processes like the others (remainder rows dropped).

    Returns:
      An iterator of ``{key: [batch_size // process_count, ...] array}``.
    """
    index, count = _process(process_index, process_count)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got batch_size={batch_size!r}")
    if batch_size % count:
        raise ValueError(f"batch_size={batch_size} must be a multiple of the process count "
                         f"{count} so every process gets an equal share")
    if epochs is not None and (not isinstance(epochs, (int, np.integer)) or epochs < 0):
        raise ValueError(f"epochs must be a non-negative integer or None, got epochs={epochs!r}")
    n = len(source)
    if n == 0:
        raise ValueError("source is empty")
    if drop_remainder and n < batch_size:
        raise ValueError(f"batch_size={batch_size} exceeds the {n} records of the source "
                         "(with drop_remainder=True there would be no batch)")
    # Validation above runs at the call; iteration is deferred to the inner generator.
    return _batches(source, batch_size, seed, epochs, shuffle, index, count, drop_remainder)


def _batches(source, batch_size, seed, epochs, shuffle, index, count, drop_remainder):
    n = len(source)
    epoch = 0
    while epochs is None or epoch < epochs:
        order = np.random.default_rng((seed, epoch)).permutation(n) if shuffle else np.arange(n)
        for start in range(0, n, batch_size):
            rows = order[start:start + batch_size]
            if len(rows) < batch_size and drop_remainder:
                break
            mine = rows[process_slice(len(rows), process_index=index, process_count=count)]
            if len(mine):
                yield _stack(source, mine, None)
        epoch += 1


def _process(index: int | None, count: int | None) -> tuple[int, int]:
    index = jax.process_index() if index is None else int(index)
    count = jax.process_count() if count is None else int(count)
    if count < 1:
        raise ValueError(f"process_count must be >= 1, got process_count={count}")
    if not 0 <= index < count:
        raise ValueError(f"process_index must be in [0, {count}), got process_index={index}")
    return index, count


def _stack(source: Sequence[dict], rows, keys: Sequence[str] | None) -> dict[str, np.ndarray]:
    rows = [int(i) for i in rows]
    # TFDS sources read many records in one call; a plain list does not have that method.
    getitems = getattr(source, "__getitems__", None)
    records = getitems(rows) if getitems else [source[i] for i in rows]
    keys = list(records[0]) if keys is None else list(keys)
    missing = [k for k in keys if k not in records[0]]
    if missing:
        raise ValueError(f"keys {missing} not in the records' features {sorted(records[0])}")
    dtypes = _feature_dtypes(source)
    out = {}
    for k in keys:
        out[k] = np.stack([np.asarray(r[k]) for r in records])
        if k in dtypes:
            out[k] = out[k].astype(dtypes[k], copy=False)
    return out


def _feature_dtypes(source) -> dict[str, np.dtype]:
    """Declared dtypes of a TFDS source's top-level features.

    TFDS decodes scalar features without TensorFlow as Python ints (int32 features would
    stack as int64), so the declared dtype is restored here.
    """
    features = getattr(getattr(source, "dataset_info", None), "features", None)
    if features is None:
        return {}
    out = {}
    for k in features.keys():
        dtype = getattr(features[k], "np_dtype", None)
        if dtype is not None:
            out[k] = np.dtype(dtype)
    return out
