"""Federated domain-skew data: the digits-like domain suite [R] and the real-data path.

**Digits-like domain suite** (spec §Data; a reconstruction, never to be called "Digits").
Base images are ``sklearn.datasets.load_digits`` (bundled with scikit-learn, nothing is
downloaded): 1,797 images of 8 x 8, values / 16, upsampled bilinearly to 16 x 16 with
corners aligned (``scipy.ndimage.zoom(order=1, grid_mode=False)``: the 8 input pixel centres
map onto output pixels 0 and 15, so values stay in [0, 1]). One seeded split per ``seed``
(:func:`base_split`) gives a train pool of 1,300 and a test pool of 497 base images; no base
image is in both. Four domains (:data:`DOMAINS`, defined in ``icml26_jax.fml.domains``) map
a grey stroke image in [0, 1] to RGB in [0, 1]: clean, thick_noisy, colour_texture and
synthetic_affine.

Random streams (all ``np.random.default_rng``): the base split ``(seed, 97)``, the client
draw ``(seed, 96)``, the random domain assignment ``(seed, 95)``, client ``i`` of domain ``d``
``(seed, d, i)`` (``d`` the index in :data:`DOMAINS`), the test set of domain ``d``
``(seed, 99, d)`` and its validation set ``(seed, 98, d)``.

**Real-data path** (:func:`load_domains`): MNIST and SVHN through
``icml26_jax.core.data.data_source`` (``'mnist'``, ``'svhn_cropped'``); USPS, SynthDigits,
Office31 and any other domain from ``<data_dir>/<name>_<split>.npz`` files holding
``x [n, H, W, 3] uint8`` (or grey ``[n, H, W]``) and ``y [n]``. Images are resized to 32 x 32
and every client takes 1 % of its domain's training split (FPL's ``percent_dict``).

Inputs are normalised with the ImageNet mean / std, as in RethinkFL. :func:`augment` is
RethinkFL's random crop with 2-px padding *without* its horizontal flip (a flip is wrong for
digits; a stated deviation).
"""

from __future__ import annotations

import functools
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import ndimage

from icml26_jax.fml.domains import DOMAINS, apply_domain

# ImageNet statistics used by RethinkFL's ``transforms.Normalize``.
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)  # [3]
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)  # [3]

N_BASE = 1797  # load_digits images
N_TRAIN_POOL = 1300
N_TEST_POOL = N_BASE - N_TRAIN_POOL  # 497
N_CLASSES = 10
SIZE = 16  # side of a suite image
REAL_SIZE = 32  # side of a real-data image

# Stream tags of np.random.default_rng((seed, tag[, ...])); domain indices are 0..3.
_SPLIT_TAG, _DRAW_TAG, _ASSIGN_TAG, _VAL_TAG, _TEST_TAG = 97, 96, 95, 98, 99
# Label skew: Dirichlet draws are repeated until every client holds this many images.
_MIN_SKEW_CLIENT = 10


# ----------------------------------------------------------------------------- normalisation


def normalise(x: np.ndarray | jax.Array) -> np.ndarray | jax.Array:
    """ImageNet normalisation ``(x - mean) / std`` over the last (RGB) axis.

    Args:
      x: [..., 3] pixels in [0, 1] (NumPy or JAX).

    Returns:
      [..., 3] of the same array type, float32 for float32 or integer input.
    """
    if isinstance(x, jax.Array):
        return (x - jnp.asarray(IMAGENET_MEAN, x.dtype)) / jnp.asarray(IMAGENET_STD, x.dtype)
    x = np.asarray(x, np.float32)
    return (x - IMAGENET_MEAN) / IMAGENET_STD


def denormalise(x: np.ndarray | jax.Array) -> np.ndarray | jax.Array:
    """Inverse of :func:`normalise` (for plots): ``x * std + mean``, [..., 3] -> [..., 3]."""
    if isinstance(x, jax.Array):
        return x * jnp.asarray(IMAGENET_STD, x.dtype) + jnp.asarray(IMAGENET_MEAN, x.dtype)
    return np.asarray(x, np.float32) * IMAGENET_STD + IMAGENET_MEAN


# Black (pixel value 0) in normalised space: the fill of the crop padding.
_BLACK = -IMAGENET_MEAN / IMAGENET_STD  # [3]


def augment(x: jax.Array, key: jax.Array, pad: int = 2) -> jax.Array:
    """Random crop with ``pad``-px padding, one offset per image, no flip.

    As torchvision's ``RandomCrop(size, padding=pad)`` applied before ``Normalize`` in
    RethinkFL, the padding is black in pixel space, i.e. ``-mean / std`` per channel in the
    normalised space ``x`` lives in. Each image is padded and a window of its original size is
    cut at an offset drawn uniformly from ``{0, ..., 2 pad}^2``: a shift of up to ``pad``
    pixels. Pure JAX (``vmap`` of ``lax.dynamic_slice``), so it can be jitted and vmapped.

    Args:
      x: [..., H, W, 3] normalised images (any number of leading axes).
      key: PRNG key; the offsets of all images come from it (same key -> same crops).
      pad: padding in pixels, >= 0.

    Returns:
      [..., H, W, 3], same dtype as ``x``.
    """
    if x.ndim < 3 or x.shape[-1] != 3:
        raise ValueError(f"x must have shape [..., H, W, 3], got x.shape={x.shape}")
    if pad < 0:
        raise ValueError(f"pad must be >= 0, got pad={pad}")
    h, w, c = x.shape[-3:]
    flat = jnp.reshape(x, (-1, h, w, c))  # [B, H, W, 3]
    black = jnp.asarray(_BLACK, flat.dtype)  # [3]
    padded = jnp.broadcast_to(black, (flat.shape[0], h + 2 * pad, w + 2 * pad, c))
    padded = padded.at[:, pad:pad + h, pad:pad + w].set(flat)  # exact copy, black border
    offsets = jax.random.randint(key, (flat.shape[0], 2), 0, 2 * pad + 1)  # [B, 2]

    def crop(img, off):  # [H + 2 pad, W + 2 pad, 3], [2] -> [H, W, 3]
        return jax.lax.dynamic_slice(img, (off[0], off[1], 0), (h, w, c))

    return jnp.reshape(jax.vmap(crop)(padded, offsets), x.shape)


# ----------------------------------------------------------------------------- containers


class FedData(NamedTuple):
    """Padded per-client training data plus per-domain test and validation sets.

    Attributes:
      x: [N, n_max, H, W, 3] float32, ImageNet-normalised; padding rows are 0.
      y: [N, n_max] int32 labels; padding rows are 0.
      mask: [N, n_max] bool, True on a client's real rows (the first ``n[i]``).
      n: [N] int32 true client sizes.
      domain: [N] int32, each client's domain as an index into ``domain_names``.
      test: ``{domain name: (x [M, H, W, 3] float32 normalised, y [M] int32)}``.
      val: ``{domain name: (x [V, H, W, 3] float32 normalised, y [V] int32)}``.
      domain_names: the domain names, in index order (``tuple(DOMAINS)`` for the suite).
      base_idx: [N, n_max] int32 source index of each client row (the ``load_digits`` index
        for the suite, the index in the domain's train split for real data); -1 on padding.
      test_idx: ``{domain name: [M] int32}`` source indices of the test images.
      val_idx: ``{domain name: [V] int32}`` source indices of the validation images.
    """

    x: np.ndarray
    y: np.ndarray
    mask: np.ndarray
    n: np.ndarray
    domain: np.ndarray
    test: dict
    val: dict
    domain_names: tuple[str, ...] = tuple(DOMAINS)
    base_idx: np.ndarray | None = None
    test_idx: dict | None = None
    val_idx: dict | None = None


def _pad_clients(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray],
                 idx: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Stacks per-client arrays (x [n_i, H, W, 3], y [n_i], idx [n_i]) padded to n_max."""
    n = np.array([len(v) for v in ys], np.int32)  # [N]
    n_max, n_clients = int(n.max()), len(ys)
    x = np.zeros((n_clients, n_max) + xs[0].shape[1:], np.float32)
    y = np.zeros((n_clients, n_max), np.int32)
    base = np.full((n_clients, n_max), -1, np.int32)
    mask = np.arange(n_max)[None, :] < n[:, None]  # [N, n_max]
    for i in range(n_clients):
        x[i, :n[i]], y[i, :n[i]], base[i, :n[i]] = xs[i], ys[i], idx[i]
    return x, y, mask, n, base


# ----------------------------------------------------------------------------- digits suite


@functools.lru_cache(maxsize=1)
def _base() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    img = d.images.astype(np.float64) / 16.0  # [1797, 8, 8]
    up = ndimage.zoom(img, (1, SIZE / 8, SIZE / 8), order=1, grid_mode=False)  # [1797, 16, 16]
    up = np.clip(up, 0.0, 1.0)
    label = d.target.astype(np.int32)
    up.setflags(write=False)
    label.setflags(write=False)
    return up, label


def base_images() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 base images and labels of the suite (read-only, cached).

    Returns:
      ``(images [1797, 16, 16] float64 in [0, 1], labels [1797] int32)``: ``load_digits``
      / 16, upsampled bilinearly 8 -> 16 with aligned corners.
    """
    return _base()


def base_split(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The seeded split of the base images into a train pool and a test pool.

    Args:
      seed: non-negative integer.

    Returns:
      ``(train_idx [1300] int32, test_idx [497] int32)``, disjoint indices into
      :func:`base_images`: the first 1,300 and the last 497 entries of one permutation from
      ``default_rng((seed, 97))``.
    """
    _check_seed(seed)
    perm = np.random.default_rng((seed, _SPLIT_TAG)).permutation(N_BASE).astype(np.int32)
    return perm[:N_TRAIN_POOL], perm[N_TRAIN_POOL:]


def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got seed={seed!r}")


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {name}={value!r}")


def _domain_of_clients(n_clients, domain_counts, rand_assign, n_domains, seed) -> np.ndarray:
    """[N] int32 domain index (into the chosen domains) of every client."""
    if rand_assign:
        rng = np.random.default_rng((seed, _ASSIGN_TAG))
        return rng.integers(0, n_domains, size=n_clients).astype(np.int32)
    if n_clients < n_domains:
        raise ValueError(f"n_clients={n_clients} is smaller than the number of domains "
                         f"{n_domains}: every domain needs a client (or pass rand_assign=True)")
    if domain_counts is None:  # as even as possible, the remainder to the first domains
        domain_counts = [n_clients // n_domains + (d < n_clients % n_domains)
                         for d in range(n_domains)]
    counts = [int(c) for c in domain_counts]
    if len(counts) != n_domains or min(counts) < 1 or sum(counts) != n_clients:
        raise ValueError(f"domain_counts must hold {n_domains} positive counts (one per domain) "
                         f"summing to n_clients={n_clients}, got domain_counts={domain_counts!r}")
    return np.repeat(np.arange(n_domains, dtype=np.int32), counts)


def _draw_stratified(pool: np.ndarray, labels: np.ndarray, n_clients: int, per_client: int,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """per_client / 10 images of every class per client, disjoint across clients."""
    per_class = per_client // N_CLASSES
    parts = [[] for _ in range(n_clients)]
    for c in range(N_CLASSES):
        members = rng.permutation(pool[labels[pool] == c])
        if n_clients * per_class > len(members):
            raise ValueError(
                f"per_client={per_client} needs {per_class} images of class {c} for each of "
                f"{n_clients} clients, but the train pool holds only {len(members)}")
        for i in range(n_clients):
            parts[i].append(members[i * per_class:(i + 1) * per_class])
    return [rng.permutation(np.concatenate(p)) for p in parts]


def _draw_label_skew(pool: np.ndarray, labels: np.ndarray, n_clients: int, per_client: int,
                     alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Dirichlet label skew: each class's budget is split over clients ~ Dir(alpha 1_N).

    The total budget ``n_clients * per_client`` is shared evenly over the classes; class c's
    share goes to the clients in proportions q_c ~ Dir(alpha), rounded by largest remainder.
    Draws repeat until every client holds >= min(10, per_client) images.
    """
    total = n_clients * per_client
    budget = [total // N_CLASSES + (c < total % N_CLASSES) for c in range(N_CLASSES)]
    members = [rng.permutation(pool[labels[pool] == c]) for c in range(N_CLASSES)]
    for c in range(N_CLASSES):
        if budget[c] > len(members[c]):
            raise ValueError(
                f"per_client={per_client} with n_clients={n_clients} needs {budget[c]} images "
                f"of class {c}, but the train pool holds only {len(members[c])}")
    min_size = min(_MIN_SKEW_CLIENT, per_client)
    for _ in range(1000):
        counts = np.zeros((N_CLASSES, n_clients), np.int64)  # [C, N]
        for c in range(N_CLASSES):
            exact = rng.dirichlet(np.full(n_clients, alpha)) * budget[c]
            k = np.floor(exact).astype(np.int64)
            rest = budget[c] - int(k.sum())
            k[np.argsort(k - exact)[:rest]] += 1  # largest remainders first
            counts[c] = k
        if counts.sum(0).min() >= min_size:
            break
    else:
        raise ValueError(f"label_skew={alpha} left a client with fewer than {min_size} images "
                         "in 1000 draws; use a larger label_skew or per_client")
    parts = []
    start = np.cumsum(np.concatenate([np.zeros((N_CLASSES, 1), np.int64), counts], 1), 1)
    for i in range(n_clients):
        p = np.concatenate([members[c][start[c, i]:start[c, i + 1]] for c in range(N_CLASSES)])
        parts.append(rng.permutation(p))
    return parts


def make_digits_domains(seed: int, n_clients: int = 10,
                        domain_counts: Sequence[int] | None = (3, 2, 2, 3),
                        per_client: int = 100, label_skew: float | None = None,
                        rand_assign: bool = False, test_per_domain: int | None = None,
                        val_per_domain: int | None = None,
                        domains: Sequence[str] | None = None) -> FedData:
    """Builds the federated digits-like domain suite for one seed (spec §Data).

    Clients ``0 .. domain_counts[0] - 1`` hold domain 0, the next ``domain_counts[1]`` domain 1,
    and so on. Every client draws its base images without replacement from the train pool,
    disjoint across all clients: ``per_client / 10`` of every class (domain skew, no label skew)
    unless ``label_skew`` is set. Its images go through its domain's transform with
    ``default_rng((seed, d, i))`` (``d`` the domain's index in :data:`DOMAINS`, ``i`` the
    client). A domain's test set is its transform of the test pool (its first
    ``test_per_domain`` images) with ``default_rng((seed, 99, d))``; its validation set is the
    transform of the train-pool images no client holds, with ``default_rng((seed, 98, d))``.

    Args:
      seed: non-negative integer; it fixes the split, the draw and every transform.
      n_clients: number of clients N.
      domain_counts: clients per domain, in the order of ``domains``, summing to ``n_clients``;
        None splits the clients as evenly as possible. Ignored with ``rand_assign``.
      per_client: training images per client (a multiple of 10 without ``label_skew``). With
        ``label_skew`` it is the mean client size.
      label_skew: Dirichlet concentration alpha > 0 of an extra label skew, or None. Each
        class's share of the ``n_clients * per_client`` budget is split over the clients in
        proportions ~ Dir(alpha); client sizes become unequal and are padded (``mask``).
      rand_assign: draw each client's domain uniformly at random (FPL style, stream
        ``(seed, 95)``) instead of using ``domain_counts``; a domain may then have no client
        (it still has its test and validation sets).
      test_per_domain: keep only the first this many test-pool images per domain (None: all
        497).
      val_per_domain: keep only the first this many unused train-pool images per domain for
        validation (None: all of them, 300 in the default setting).
      domains: names of the domains to use, keys of :data:`DOMAINS` (None: all four in order).

    Returns:
      A :class:`FedData` with 16 x 16 images.

    Raises:
      ValueError: naming the argument, for an unknown domain, ``n_clients`` below the number of
        domains (without ``rand_assign``), inconsistent ``domain_counts``, a ``per_client``
        that is not a multiple of 10 (without ``label_skew``) or exceeds the train pool,
        ``label_skew <= 0``, a ``test_per_domain`` outside [1, 497] or a negative
        ``val_per_domain``.
    """
    _check_seed(seed)
    names = tuple(DOMAINS) if domains is None else tuple(domains)
    for name in names:
        if name not in DOMAINS:
            raise ValueError(f"domains must be keys of {tuple(DOMAINS)}, got domain {name!r}")
    if not names or len(set(names)) != len(names):
        raise ValueError(f"domains must be distinct and non-empty, got domains={domains!r}")
    _check_positive_int("n_clients", n_clients)
    _check_positive_int("per_client", per_client)
    if label_skew is None and per_client % N_CLASSES:
        raise ValueError(f"per_client must be a multiple of {N_CLASSES} (10 images per class "
                         f"and client) without label_skew, got per_client={per_client}")
    if label_skew is not None and not float(label_skew) > 0:
        raise ValueError(f"label_skew must be a Dirichlet alpha > 0 or None, "
                         f"got label_skew={label_skew!r}")
    if n_clients * per_client > N_TRAIN_POOL:
        raise ValueError(f"per_client={per_client} x n_clients={n_clients} exceeds the train "
                         f"pool of {N_TRAIN_POOL} images")
    if test_per_domain is not None and not (
            isinstance(test_per_domain, (int, np.integer)) and 1 <= test_per_domain <= N_TEST_POOL):
        raise ValueError(f"test_per_domain must be in [1, {N_TEST_POOL}] or None, "
                         f"got test_per_domain={test_per_domain!r}")
    if val_per_domain is not None and not (
            isinstance(val_per_domain, (int, np.integer)) and val_per_domain >= 0):
        raise ValueError(f"val_per_domain must be a non-negative integer or None, "
                         f"got val_per_domain={val_per_domain!r}")
    domain = _domain_of_clients(n_clients, domain_counts, rand_assign, len(names), seed)

    images, labels = base_images()
    train_pool, test_pool = base_split(seed)
    rng = np.random.default_rng((seed, _DRAW_TAG))
    if label_skew is None:
        parts = _draw_stratified(train_pool, labels, n_clients, per_client, rng)
    else:
        parts = _draw_label_skew(train_pool, labels, n_clients, per_client, float(label_skew),
                                 rng)

    global_index = {name: list(DOMAINS).index(name) for name in names}
    xs = []
    for i, idx in enumerate(parts):
        name = names[domain[i]]
        client_rng = np.random.default_rng((seed, global_index[name], i))
        xs.append(normalise(apply_domain(name, images[idx], client_rng)))
    x, y, mask, n, base_idx = _pad_clients(xs, [labels[p] for p in parts], parts)

    used = np.concatenate(parts)
    val_pool = train_pool[~np.isin(train_pool, used)]  # the pool's order, minus used images
    val_pool = val_pool if val_per_domain is None else val_pool[:val_per_domain]
    test_pool = test_pool if test_per_domain is None else test_pool[:test_per_domain]
    test, val, test_idx, val_idx = {}, {}, {}, {}
    for name in names:
        d = global_index[name]
        trng = np.random.default_rng((seed, _TEST_TAG, d))
        test[name] = (normalise(apply_domain(name, images[test_pool], trng)),
                      labels[test_pool].copy())
        vrng = np.random.default_rng((seed, _VAL_TAG, d))
        val[name] = (normalise(apply_domain(name, images[val_pool], vrng)),
                     labels[val_pool].copy())
        test_idx[name], val_idx[name] = test_pool.copy(), val_pool.copy()
    return FedData(x=x, y=y, mask=mask, n=n, domain=domain, test=test, val=val,
                   domain_names=names, base_idx=base_idx, test_idx=test_idx, val_idx=val_idx)


# ----------------------------------------------------------------------------- real data

# Domains read through ``core.data.data_source``; every other name comes from .npz files.
TFDS_DOMAINS = {"mnist": "mnist", "svhn": "svhn_cropped"}


class _Rows:
    """A random-access view of some rows of a data source (for ``core.data.to_arrays``)."""

    def __init__(self, source, rows: np.ndarray):
        self.source, self.rows = source, [int(r) for r in rows]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, k):
        return self.source[self.rows[k]]

    def __getitems__(self, ks):
        rows = [self.rows[k] for k in ks]
        getitems = getattr(self.source, "__getitems__", None)
        return getitems(rows) if getitems else [self.source[r] for r in rows]


class _DomainSplit:
    """One domain's split: its length and a reader of rows -> (x uint8 [m, H, W, 3], y [m])."""

    def __init__(self, name: str, split: str, data_dir: str | os.PathLike):
        self.name = name
        if name in TFDS_DOMAINS:
            from icml26_jax.core import data as core_data

            self._source = core_data.data_source(TFDS_DOMAINS[name], split, data_dir=data_dir)
            self._x = self._y = None
            self.size = len(self._source)
        else:
            path = pathlib.Path(data_dir) / f"{name}_{split}.npz"
            if not path.exists():
                raise FileNotFoundError(
                    f"domain {name!r} is read from {path} (x [n, H, W, 3] uint8, y [n]); "
                    f"only {tuple(TFDS_DOMAINS)} come from TFDS")
            with np.load(path) as f:
                self._x, self._y = np.asarray(f["x"]), np.asarray(f["y"])
            if self._x.ndim not in (3, 4) or len(self._x) != len(self._y):
                raise ValueError(f"{path}: x must be [n, H, W(, C)] and y [n], got "
                                 f"x {self._x.shape}, y {self._y.shape}")
            self.size = len(self._y)

    def read(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._x is not None:
            x, y = self._x[rows], self._y[rows]
        else:
            from icml26_jax.core import data as core_data

            rec = core_data.to_arrays(_Rows(self._source, rows), ["image", "label"])
            x, y = rec["image"], rec["label"]
        return x, y.astype(np.int32)


def _to_input(x: np.ndarray, size: int) -> np.ndarray:
    """uint8 [m, H, W(, 1 | 3)] -> [m, size, size, 3] float32 normalised (bilinear resize with
    antialiasing when shrinking)."""
    x = np.asarray(x, np.float32) / 255.0
    if x.ndim == 3:
        x = x[..., None]
    if x.shape[-1] == 1:
        x = np.repeat(x, 3, axis=-1)
    if x.shape[-1] != 3:
        raise ValueError(f"images must have 1 or 3 channels, got shape {x.shape}")
    if x.shape[1:3] != (size, size):
        rows, cols = _resize_matrix(x.shape[1], size), _resize_matrix(x.shape[2], size)
        x = np.einsum("oh,nhwc,pw->nopc", rows, x, cols, optimize=True)
    return normalise(np.clip(x, 0.0, 1.0))


@functools.lru_cache(maxsize=16)
def _resize_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] float32 matrix of 1-D ``jax.image.resize(..., "linear")`` (bilinear,
    antialiased when shrinking). The 2-D resize is separable: rows then columns."""
    eye = jnp.eye(n_in, dtype=jnp.float32)
    return np.asarray(jax.image.resize(eye, (n_out, n_in), "linear"), np.float32)


def load_domains(spec: Mapping[str, int] | Sequence[str], data_dir: str | os.PathLike, *,
                 seed: int = 0, percent: float = 0.01, size: int = REAL_SIZE,
                 test_limit: int | None = None, val_limit: int | None = 1000) -> FedData:
    """Real-data path: federated domain skew over real domains (FPL's protocol).

    ``mnist`` and ``svhn`` are read with ``core.data.data_source('mnist' | 'svhn_cropped',
    split, data_dir=data_dir)`` (prepared TFDS data; nothing is downloaded). Any other domain
    (``usps``, ``syn``, ``amazon``, ``dslr``, ``webcam``, ...) is read from
    ``<data_dir>/<name>_train.npz`` and ``<name>_test.npz`` with ``x [n, H, W, 3] uint8`` (grey
    ``[n, H, W]`` is accepted) and ``y [n]``. Every client of a domain takes
    ``round(percent * n_train)`` training images without replacement, disjoint across the
    domain's clients (stream ``default_rng((seed, d))``). Images are resized to
    ``size x size`` and normalised like the suite.

    Args:
      spec: ``{domain name: number of clients}`` in client order, or a sequence of names (one
        client each).
      data_dir: directory of the TFDS data and the ``.npz`` files.
      seed: non-negative integer.
      percent: fraction of a domain's training split per client, in (0, 1].
      size: output side in pixels.
      test_limit: keep the first this many test images per domain (None: all).
      val_limit: validation images per domain, taken from the unused training images
        (None: all of them).

    Returns:
      A :class:`FedData`; ``base_idx``, ``test_idx`` and ``val_idx`` index the domain's splits.
    """
    _check_seed(seed)
    if isinstance(spec, str):
        spec = (spec,)
    counts = dict(spec) if isinstance(spec, Mapping) else {name: 1 for name in spec}
    if not counts or (not isinstance(spec, Mapping) and len(counts) != len(spec)):
        raise ValueError(f"spec must name distinct domains, got spec={spec!r}")
    for name, c in counts.items():
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
            raise ValueError(f"spec must map each domain to a positive client count, "
                             f"got spec[{name!r}]={c!r}")
    if not 0.0 < percent <= 1.0:
        raise ValueError(f"percent must be in (0, 1], got percent={percent!r}")
    _check_positive_int("size", size)
    names = tuple(counts)
    xs, ys, idxs, domain = [], [], [], []
    test, val, test_idx, val_idx = {}, {}, {}, {}
    for d, name in enumerate(names):
        train = _DomainSplit(name, "train", data_dir)
        per = max(1, int(round(percent * train.size)))
        if per * counts[name] > train.size:
            raise ValueError(f"percent={percent} x {counts[name]} clients needs "
                             f"{per * counts[name]} images of domain {name!r}, which has "
                             f"{train.size}")
        perm = np.random.default_rng((seed, d)).permutation(train.size)
        for k in range(counts[name]):
            rows = np.sort(perm[k * per:(k + 1) * per])
            x, y = train.read(rows)
            xs.append(_to_input(x, size))
            ys.append(y)
            idxs.append(rows)
            domain.append(d)
        rest = np.sort(perm[counts[name] * per:])
        rest = rest if val_limit is None else rest[:val_limit]
        x, y = train.read(rest)
        val[name], val_idx[name] = (_to_input(x, size), y), rest.astype(np.int32)
        tsplit = _DomainSplit(name, "test", data_dir)
        rows = np.arange(tsplit.size if test_limit is None else min(test_limit, tsplit.size))
        x, y = tsplit.read(rows)
        test[name], test_idx[name] = (_to_input(x, size), y), rows.astype(np.int32)
    x, y, mask, n, base_idx = _pad_clients(xs, ys, idxs)
    return FedData(x=x, y=y, mask=mask, n=n, domain=np.array(domain, np.int32), test=test,
                   val=val, domain_names=names, base_idx=base_idx, test_idx=test_idx,
                   val_idx=val_idx)
