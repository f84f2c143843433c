"""The digits clone test of claim C1 (Refinetti et al. 2023 style), spec §Digits protocol.

A denoiser D(x_t, b) = a x_t + MLP([x_t, b]) (MLP 65 -> 256 tanh -> 64, last layer
zero-initialised, so training starts at the isotropic denoiser) is trained on 8x8 digits at
the noise levels b in {0.2, 0.4, 0.6, 0.8} (one per example), a = sqrt(1 - b^2). At log-spaced
checkpoints it is evaluated, on the *same* fixed noise draws, on test images (L_real) and on
a Gaussian clone of the training set (same mean and covariance; L_clone), next to the Wiener
filter of the training covariance on both (L_W, L_W,clone). Losses are summed over pixels and
averaged over images.

Distributional simplicity bias: while the network learns the covariance, L_clone tracks
L_real (gap = (L_clone - L_real) / L_real ~ 0); later L_real drops below the Wiener filter
(higher-order statistics learned) and L_clone rises above L_W,clone (the network is no longer
a function of the covariance alone).

The digits are a substitute for the paper's natural images (no download here);
:func:`load_images` is the real-data path for a TFDS image set the user has prepared.
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26_jax.core.optim import promotion_safe
from icml26_jax.simplicity_bias import baselines, mcm, online

N_TRAIN = 1400
B_LEVELS = (0.2, 0.4, 0.6, 0.8)
wiener = baselines.wiener  # the Wiener filter of spec §Module API (images.wiener)


class CloneConfig(NamedTuple):
    """Static parameters of the clone test (hashable: a jit static argument).

    Attributes:
      epochs: passes over the training set (400 = spec default, ~8,800 steps).
      batch: batch size (an epoch is ceil(n / batch) steps; the last batch wraps around
        the epoch's permutation).
      lr: Adam learning rate.
      hidden: MLP width.
      b_levels: noise levels b (a = sqrt(1 - b^2)), one drawn per training example.
      n_checkpoints: log-spaced evaluation steps (plus step 0).
      n_clone: Gaussian clone draws (default: the test-set size).
    """

    epochs: int = 400
    batch: int = 64
    lr: float = 1e-3
    hidden: int = 256
    b_levels: tuple = B_LEVELS
    n_checkpoints: int = 60
    n_clone: int = 397

    def validate(self) -> "CloneConfig":
        """Raises ``ValueError`` naming the offending field; returns ``self``."""
        for name in ("epochs", "batch", "hidden", "n_checkpoints", "n_clone"):
            val = getattr(self, name)
            if not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"{name} must be a positive integer, got {name}={val!r}")
        if not float(self.lr) > 0:
            raise ValueError(f"lr must be > 0, got lr={self.lr!r}")
        if not self.b_levels or not all(0.0 < float(b) < 1.0 for b in self.b_levels):
            raise ValueError(f"b_levels must be a non-empty tuple of values in (0, 1), got "
                             f"b_levels={self.b_levels!r}")
        return self


def standardise(train, test):
    """Centres per pixel on the training mean and divides by the training set's global std
    (the same map for both): ``(train, test)`` float32."""
    train, test = np.asarray(train, np.float64), np.asarray(test, np.float64)
    mean = train.mean(0)
    std = (train - mean).std()
    return ((train - mean) / std).astype(np.float32), ((test - mean) / std).astype(np.float32)


def load_digits_split(seed: int = 0, n_train: int = N_TRAIN):
    """8x8 digits (``sklearn.datasets.load_digits``, bundled, 1797 images), pixels / 16,
    split ``n_train`` / rest by ``np.random.default_rng(seed)``, then :func:`standardise`.

    Returns:
      ``(x_train [1400, 64], x_test [397, 64])`` float32.
    """
    from sklearn.datasets import load_digits

    x = load_digits().data / 16.0
    if not 1 <= n_train < x.shape[0]:
        raise ValueError(f"n_train must be in [1, {x.shape[0]}), got n_train={n_train}")
    perm = np.random.default_rng(seed).permutation(x.shape[0])
    return standardise(x[perm[:n_train]], x[perm[n_train:]])


def load_images(tfds_name: str, split: str, data_dir: str | os.PathLike, size: int = 16,
                limit: int | None = None) -> np.ndarray:
    """Real-data path: images of a prepared TFDS set (e.g. ``cifar10``) as grayscale
    ``size x size``, flattened: ``[n, size^2]`` float32 in [0, 1] (standardise them with
    :func:`standardise`). Read through ``core.data.data_source``; nothing is downloaded."""
    from icml26_jax.core import data as data_lib

    src = data_lib.data_source(tfds_name, split, data_dir=data_dir)
    n = len(src) if limit is None else min(int(limit), len(src))
    img = np.stack([np.asarray(src[i]["image"], np.float32) for i in range(n)]) / 255.0
    if img.ndim == 4:  # [n, H, W, C] -> grayscale
        img = img.mean(-1)
    img = jax.image.resize(jnp.asarray(img), (n, size, size), "linear")
    return np.asarray(img, np.float32).reshape(n, size * size)


class MLPDenoiser(nnx.Module):
    """D(x_t, b) = a x_t + MLP([x_t, b]), a = sqrt(1 - b^2); MLP d+1 -> hidden (tanh) -> d with
    the last layer zero-initialised (training starts at the isotropic denoiser a x_t)."""

    def __init__(self, d: int = 64, hidden: int = 256, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(d + 1, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, d, kernel_init=nnx.initializers.zeros,
                              bias_init=nnx.initializers.zeros, rngs=rngs)

    def __call__(self, xt: jax.Array, b: jax.Array) -> jax.Array:
        """xt [..., d], b [...] -> D(x_t, b) [..., d]."""
        a = jnp.sqrt(1.0 - b * b)[..., None]
        h = jnp.tanh(self.hidden(jnp.concatenate([xt, b[..., None]], axis=-1)))
        return a * xt + self.out(h)


def _loss_sum(x0, d):
    """Pixel-summed squared error, mean over images: x0, d [n, dim] -> []."""
    return jnp.mean(jnp.sum((x0 - d) ** 2, axis=-1))


def checkpoint_steps(total: int, n: int) -> np.ndarray:
    """Step 0 and ``n`` log-spaced steps in [1, total] (``online.record_steps``)."""
    return np.concatenate([[0], online.record_steps(total, min(n, total))])


def batch_indices(seed: int, n: int, batch: int, epochs: int) -> np.ndarray:
    """[epochs * ceil(n / batch), batch] training indices: a fresh permutation per epoch, the
    last batch of an epoch filled up from the start of the same permutation."""
    rng = np.random.default_rng(seed)
    per = -(-n // batch)
    out = []
    for _ in range(epochs):
        p = rng.permutation(n)
        out.append(np.concatenate([p, p[: per * batch - n]]).reshape(per, batch))
    return np.concatenate(out).astype(np.int32)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _train(graphdef, cfg: CloneConfig, params, x_train, idx, is_ckpt, key):
    """Adam on the denoising loss over all steps (one scan); params snapshot [K, ...] at the
    steps where ``is_ckpt`` (bool [steps]) is set, after the step."""
    tx = promotion_safe(optax.adam(cfg.lr))
    levels = jnp.asarray(cfg.b_levels, x_train.dtype)
    n_ck = int(cfg.n_checkpoints)

    def loss_fn(p, x0, b, xi):
        a = jnp.sqrt(1.0 - b * b)[:, None]
        xt = a * x0 + b[:, None] * xi
        return _loss_sum(x0, nnx.merge(graphdef, p)(xt, b))

    def step(carry, inp):
        p, opt, j, snaps, losses = carry
        ix, ck, t = inp
        kb, kn = jax.random.split(jax.random.fold_in(key, t))
        x0 = x_train[ix]
        b = levels[jax.random.randint(kb, (ix.shape[0],), 0, levels.shape[0])]
        xi = jax.random.normal(kn, x0.shape, x0.dtype)
        loss, g = jax.value_and_grad(loss_fn)(p, x0, b, xi)
        upd, opt = tx.update(g, opt, p)
        p = optax.apply_updates(p, upd)
        jj = jnp.minimum(j, n_ck - 1)
        snaps = jax.tree.map(lambda s, q: s.at[jj].set(jnp.where(ck, q, s[jj])), snaps, p)
        losses = losses.at[jj].set(jnp.where(ck, loss, losses[jj]))
        return (p, opt, j + ck.astype(jnp.int32), snaps, losses), None

    snaps = jax.tree.map(lambda q: jnp.zeros((n_ck,) + q.shape, q.dtype), params)
    init = (params, tx.init(params), jnp.zeros((), jnp.int32), snaps,
            jnp.zeros((n_ck,), x_train.dtype))
    t = jnp.arange(idx.shape[0], dtype=jnp.int32)
    (_, _, _, snaps, losses), _ = jax.lax.scan(step, init, (idx, is_ckpt, t))
    return snaps, losses


@functools.partial(jax.jit, static_argnums=0)
def _evaluate(graphdef, snaps, x_eval, b_vals, xi):
    """Losses [K, n_sets, n_b] of the snapshots on x_eval [n_sets, n, d] at the noise levels
    b_vals [n_b] with fixed noise xi [n_b, n, d]."""
    def one(p):
        model = nnx.merge(graphdef, p)

        def at_b(b, z):
            a = jnp.sqrt(1.0 - b * b)
            xt = a * x_eval + b * z  # [n_sets, n, d]
            return jax.vmap(lambda x0, x: _loss_sum(x0, model(x, jnp.full(x.shape[:1], b))))(
                x_eval, xt)

        return jax.vmap(at_b, out_axes=1)(b_vals, xi)

    return jax.lax.map(one, snaps)


def clone_curves(seed: int, x_train, x_test, cfg: CloneConfig = CloneConfig()) -> dict:
    """Trains :class:`MLPDenoiser` and records the clone-test curves (spec §Digits protocol).

    Args:
      seed: initialisation, batches, training noise, clone draws and the fixed evaluation
        noise all derive from it.
      x_train: [n_train, d] standardised training images (mean ~ 0).
      x_test: [n_test, d] test images, same standardisation.
      cfg: :class:`CloneConfig`.

    Returns:
      ``{"steps": [K], "train_loss": [K], "b_levels": [n_b], "L_real": [K, n_b],
      "L_clone": [K, n_b], "gap": [K, n_b], "L_W": [n_b], "L_W_clone": [n_b],
      "L_W_theory": [n_b]}`` as host arrays; K = n_checkpoints + 1 (step 0 first).
      ``L_W_theory`` is the closed-form Wiener loss under the clone (= L_W_clone up to the
      sampling error of the clone draws).
    """
    cfg.validate()
    x_train = np.asarray(x_train, np.float32)
    x_test = np.asarray(x_test, np.float32)
    if x_train.ndim != 2 or x_test.ndim != 2 or x_train.shape[1] != x_test.shape[1]:
        raise ValueError(f"x_train and x_test must be [n, d] with the same d, got "
                         f"{x_train.shape} and {x_test.shape}")
    n, d = x_train.shape
    key = jax.random.key(seed)
    k_init, k_train, k_clone, k_eval = jax.random.split(key, 4)
    graphdef, params = nnx.split(MLPDenoiser(d, cfg.hidden, rngs=nnx.Rngs(params=k_init)),
                                 nnx.Param)
    idx = batch_indices(seed, n, cfg.batch, cfg.epochs)
    total = idx.shape[0]
    ck = checkpoint_steps(total, cfg.n_checkpoints)  # [K]: 0 first
    is_ckpt = np.zeros(total, bool)
    is_ckpt[ck[1:] - 1] = True
    snaps, losses = _train(graphdef, cfg._replace(n_checkpoints=len(ck) - 1), params,
                           jnp.asarray(x_train), jnp.asarray(idx), jnp.asarray(is_ckpt),
                           k_train)
    snaps = jax.tree.map(lambda p0, s: jnp.concatenate([p0[None], s]), params, snaps)

    # Clone: N(mean, Cov) of the training set; its evaluation set has the test set's size
    # unless n_clone says otherwise (both use the first rows of the same noise draws).
    n_eval = max(x_test.shape[0], cfg.n_clone)
    clone = np.asarray(mcm.gaussian_clone(k_clone, jnp.asarray(x_train), cfg.n_clone))
    b_vals = np.asarray(cfg.b_levels, np.float32)
    xi = np.asarray(jax.random.normal(k_eval, (len(b_vals), n_eval, d)))
    L = {}
    for name, xe in (("real", x_test), ("clone", clone)):
        m = xe.shape[0]
        L[name] = np.asarray(_evaluate(graphdef, snaps, jnp.asarray(xe[None]),
                                       jnp.asarray(b_vals), jnp.asarray(xi[:, :m])))[:, 0]
    C = np.cov(x_train.T.astype(np.float64), bias=True) + np.outer(
        x_train.mean(0), x_train.mean(0))  # second moment (the data are centred)
    L_W, L_Wc, L_Wt = [], [], []
    for i, b in enumerate(b_vals.astype(np.float64)):
        a = float(np.sqrt(1.0 - b * b))
        W = np.asarray(baselines.wiener(jnp.asarray(C, jnp.float32), a, float(b)), np.float64)
        for xe, out in ((x_test, L_W), (clone, L_Wc)):
            xe = xe.astype(np.float64)
            xt = a * xe + b * xi[i, : xe.shape[0]]
            out.append(float(np.mean(np.sum((xe - xt @ W.T) ** 2, axis=1))))
        L_Wt.append(float(baselines.wiener_loss(jnp.asarray(C, jnp.float32), a, float(b))))
    return {"steps": ck, "train_loss": np.concatenate([[np.nan], np.asarray(losses)]),
            "b_levels": b_vals.astype(np.float64), "L_real": L["real"],
            "L_clone": L["clone"], "gap": (L["clone"] - L["real"]) / L["real"],
            "L_W": np.array(L_W), "L_W_clone": np.array(L_Wc), "L_W_theory": np.array(L_Wt)}
