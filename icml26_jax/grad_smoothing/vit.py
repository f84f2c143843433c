"""ViT classification of the ``full`` variant (spec §Data, claim 7): digits, 5-fold CV.

Data: ``sklearn.datasets.load_digits`` (1,797 8x8 images shipped inside the scikit-learn
wheel, 2x2 patches -> 16 tokens); without scikit-learn, procedural 16x16 shape/texture
images (:func:`procedural_images`, 4x4 patches -> 16 tokens). Users with CIFAR-100 built
for TFDS can pass :func:`tfds_images` arrays to :func:`run_vit` instead.

Protocol: per-arm learning rate chosen on a held-out fifth of fold 0's training part
(``selection_seed``), then every (seed, fold) trains base and smoothed from the same init
on the same batch order (paired); the fold's test part gives the test accuracy. All replicas
of a stage are one vmapped program, checkpointed every ``log_every_epochs`` epochs.
"""

from __future__ import annotations

import copy
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import nnx

from icml26_jax.core import checkpoint
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.optim import promotion_safe
from icml26_jax.grad_smoothing import model
from icml26_jax.lm import train as lm_train

ARMS = ("base", "smoothed")
SPLIT_SEED = 0


# --------------------------------------------------------------------------- data


def procedural_images(n: int, seed: int, size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """``n`` seeded ``size x size`` images of 10 classes: 5 shapes (disk, square, triangle,
    cross, ring) x 2 textures (solid, diagonal stripes), random centre and radius, plus
    Gaussian pixel noise (std 0.3). Returns ``(images [n, size, size] float32, labels [n])``."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    yy, xx = np.mgrid[:size, :size].astype(np.float32)
    c = rng.uniform(0.35 * size, 0.65 * size, (n, 2)).astype(np.float32)
    r = rng.uniform(0.2 * size, 0.3 * size, n).astype(np.float32)
    dx = xx[None] - c[:, 0, None, None]
    dy = yy[None] - c[:, 1, None, None]
    R = r[:, None, None]
    dist = np.sqrt(dx ** 2 + dy ** 2)
    shapes = np.stack([
        dist <= R,
        np.maximum(np.abs(dx), np.abs(dy)) <= 0.8 * R,
        (dy >= -R) & (dy <= R) & (np.abs(dx) <= (dy + R) / 2),
        ((np.abs(dx) <= 1) | (np.abs(dy) <= 1)) & (np.maximum(np.abs(dx), np.abs(dy)) <= R),
        np.abs(dist - R) <= 1.0,
    ])  # [5, n, size, size]
    mask = shapes[y % 5, np.arange(n)]
    stripes = ((xx + yy) // 2 % 2).astype(np.float32)
    texture = np.where((y // 5)[:, None, None] == 1, stripes[None], 1.0)
    img = mask * texture + 0.3 * rng.standard_normal((n, size, size))
    return img.astype(np.float32), y.astype(np.int32)


def digits_data() -> tuple[np.ndarray, np.ndarray, str]:
    """``(images, labels, source)``: standardised ``load_digits`` (or the procedural
    fallback with 12,000 images when scikit-learn is missing)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        logging.warning("scikit-learn is not installed: using procedural 16x16 images")
        x, y = procedural_images(12_000, seed=0)
        source = "procedural 16x16 shapes x textures (seed 0)"
    else:
        d = load_digits()
        x, y = d.images.astype(np.float32), d.target.astype(np.int32)
        source = "sklearn.datasets.load_digits"
    x = (x - x.mean()) / x.std()
    return x.astype(np.float32), y, source


def tfds_images(name: str = "cifar100", split: str = "train", data_dir: str | None = None):
    """Real-data path: ``(images [N, H, W, C] float32 in [0, 1], labels [N])`` of a TFDS
    dataset the user has already built (``tfds.data_source``; nothing is downloaded)."""
    import tensorflow_datasets as tfds

    src = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    ex = [src[i] for i in range(len(src))]
    x = np.stack([e["image"] for e in ex]).astype(np.float32) / 255.0
    y = np.asarray([e["label"] for e in ex], np.int32)
    return x, y


def folds(n: int, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``k`` (train, test) index splits of a fixed permutation (seed ``SPLIT_SEED``)."""
    if not 2 <= k <= n:
        raise ValueError(f"folds must be in [2, {n}], got {k}")
    perm = np.random.default_rng(SPLIT_SEED).permutation(n)
    out = []
    for i in range(k):
        test = np.sort(perm[i::k])
        out.append((np.setdiff1d(np.arange(n), test), test))
    return out


def selection_split(train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every fifth index of a training part held out for learning-rate selection."""
    return np.delete(train, np.s_[::5]), train[::5]


# --------------------------------------------------------------------------- training


def vit_loss(graphdef, params, rest, batch: dict):
    logits = nnx.merge(graphdef, params, rest).forward_patches(batch["patches"])
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
    acc = (jnp.argmax(logits, -1) == batch["labels"]).astype(jnp.float32)
    return jnp.mean(nll), {"loss": jnp.mean(nll), "accuracy": jnp.mean(acc)}


def _build(v, seeds, image_size, num_classes, channels):
    ps, rs, graphdef = [], [], None
    for s in seeds:
        m = model.ViT(v.depth, v.d_model, v.num_heads, v.patch, image_size, num_classes,
                      rngs=nnx.Rngs(s), channels=channels)
        g, p, r = nnx.split(m, nnx.Param, ...)
        graphdef = graphdef or g
        ps.append(p)
        rs.append(r)
    stack = lambda *xs: jnp.stack(xs)  # noqa: E731
    return graphdef, jax.tree.map(stack, *ps), jax.tree.map(stack, *rs)


def _programs(cv, graphdef, steps: int):
    """(train program, eval program) of the ViT replicas, compiled once per (model,
    optimiser, schedule) and reused across calls (see ``train._memo``)."""
    from icml26_jax.grad_smoothing import train as gtrain

    def make():
        cfg = copy.deepcopy(cv)

        def one_train(params, rest, opt_state, lr, matrix, chunk_batches):
            step = lm_train.make_train_step(graphdef, gtrain.make_tx(cfg, lr, matrix, steps),
                                            loss=vit_loss)

            def body(carry, batch):
                p, o = carry
                p, o, m = step(p, rest, o, batch)
                return (p, o), m["loss"]

            (params, opt_state), loss = jax.lax.scan(body, (params, opt_state),
                                                     chunk_batches)
            return params, opt_state, loss

        def one_eval(params, rest, patches, labels, mask):
            logits = nnx.merge(graphdef, params, rest).forward_patches(patches)
            nll = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            acc = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
            tot = jnp.maximum(mask.sum(), 1.0)
            return (nll * mask).sum() / tot, (acc * mask).sum() / tot

        return (jax.jit(jax.vmap(one_train, in_axes=(0, 0, 0, 0, 0, 1)),
                        donate_argnums=(0, 2)),
                jax.jit(jax.vmap(one_eval)))

    return gtrain._memo(("vit",) + gtrain._tx_key(cv, graphdef, steps), make)


def train_vit_replicas(c, x, y, splits, seeds, arms, lrs, *, ckpt_dir: str, name: str) -> dict:
    """Trains ViT replicas ``n = (seeds[n], splits[n] = (train_idx, test_idx), arms[n],
    lrs[n])`` for ``full.vit.epochs`` epochs; batch order is a function of (seed, split).

    Returns ``{"epochs": [K], "train_loss": [K, R] (mean over the logged epochs),
    "test_loss": [K, R], "test_acc": [K, R]}``.
    """
    from icml26_jax.grad_smoothing import train as gtrain

    v = c.full.vit
    R = len(seeds)
    B = v.batch_size
    spe = min(len(tr) for tr, _ in splits) // B
    if spe < 1:
        raise ValueError(f"full.vit.batch_size={B} exceeds the smallest training split")
    steps = v.epochs * spe
    chunk = v.log_every_epochs * spe
    K = -(-v.epochs // v.log_every_epochs)
    image_size, channels = x.shape[1], (x.shape[3] if x.ndim == 4 else 1)
    num_classes = int(y.max()) + 1
    graphdef, params, rest = _build(v, seeds, image_size, num_classes, channels)
    cv = gtrain._with(c, base="adamw", mode=v.mode, depth=v.depth)
    mats = np.stack([np.eye(v.depth) if a == "base" else gtrain.arm_matrix(cv, "smoothed", v.alpha)
                     for a in arms]).astype(np.float32)
    xp = model.patchify(x, v.patch)  # [N, tokens, patch * patch * C], on the host
    nt = max(len(te) for _, te in splits)
    test_idx = np.stack([np.pad(te, (0, nt - len(te))) for _, te in splits])
    test_mask = np.stack([np.arange(nt) < len(te) for _, te in splits]).astype(np.float32)
    split_ids = [int(tr[:64].sum() + 7919 * len(tr)) % 2**31 for tr, _ in splits]  # data order

    def batches(s0, n):
        xs, ys = [], []
        for t in range(s0, s0 + n):
            e, j = divmod(t, spe)
            idx = [np.random.default_rng((s, sid, e)).permutation(tr)[j * B:(j + 1) * B]
                   for s, sid, (tr, _) in zip(seeds, split_ids, splits)]
            xs.append(xp[np.stack(idx)])
            ys.append(y[np.stack(idx)])
        return {"patches": np.stack(xs), "labels": np.stack(ys)}

    program, evaluate = _programs(cv, graphdef, steps)
    logs = {"epochs": np.minimum(np.arange(1, K + 1) * v.log_every_epochs, v.epochs),
            "train_loss": np.zeros((K, R), np.float32),
            "test_loss": np.zeros((K, R), np.float32),
            "test_acc": np.zeros((K, R), np.float32)}
    mesh = mesh_lib.runs_mesh(R)  # replicas padded to the mesh, dropped by to_host(., R)
    shard = lambda t, dim=0: mesh_lib.shard_replicas(t, mesh, R, dim)  # noqa: E731
    fp = checkpoint.config_fingerprint({"v": v.to_dict(), "opt": c.opt.to_dict(),
                                        "seeds": list(seeds), "arms": list(arms),
                                        "lrs": [float(a) for a in lrs], "ids": split_ids,
                                        "n": int(len(x))})
    with jax.set_mesh(mesh):
        params, rest = shard(params), shard(rest)
        tx0 = gtrain.make_tx(cv, 1.0, np.eye(v.depth, dtype=np.float32), steps)
        opt_state = jax.jit(jax.vmap(promotion_safe(tx0).init),
                            out_shardings=jax.NamedSharding(mesh, jax.P(mesh_lib.RUNS)))(params)
        mats_s, lr_s = shard(mats), shard(np.asarray(lrs, np.float32))
        test = shard({"patches": xp[test_idx], "labels": y[test_idx], "mask": test_mask})

        def advance(state, logs, s0, n):
            p, o = state
            p, o, loss = program(p, rest, o, lr_s, mats_s, shard(batches(s0, n), 1))
            k = s0 // chunk
            tl, ta = evaluate(p, rest, test["patches"], test["labels"], test["mask"])
            loss, tl, ta = mesh_lib.to_host((loss, tl, ta), R)
            logs["train_loss"][k] = loss[:, -spe:].mean(1)
            logs["test_loss"][k], logs["test_acc"][k] = tl, ta
            return (p, o), (f"epoch {min((s0 + n) // spe, v.epochs)}: test acc "
                            f"{np.round(logs['test_acc'][k], 3)}")

        _, logs = checkpoint.run_chunks(ckpt_dir, fingerprint=fp, state=(params, opt_state),
                                        logs=logs, steps=steps, chunk=chunk, advance=advance,
                                        place=shard, name=name)
    return logs


def run_vit(c, ckpt_root: str, data=None) -> dict:
    """The ViT protocol of the ``full`` variant; ``data = (images, labels, source)``
    (default :func:`digits_data`).

    Returns per-pair test accuracy / final train loss of both arms, the selected lrs and the
    selection sweep.
    """
    v = c.full.vit
    x, y, source = data or digits_data()
    fs = folds(len(x), v.folds)
    lrs = [float(a) for a in v.lrs]
    sel_arms = [a for a in ARMS for _ in lrs]
    sel_lrs = lrs * len(ARMS)
    sel_split = selection_split(fs[0][0])
    logging.info("vit selection: %d replicas (%s x lr %s), %d epochs", len(sel_arms), ARMS,
                 lrs, v.epochs)
    s1 = train_vit_replicas(c, x, y, [sel_split] * len(sel_arms),
                            [v.selection_seed] * len(sel_arms), sel_arms, sel_lrs,
                            ckpt_dir=os.path.join(ckpt_root, "selection"),
                            name="vit selection")
    final = s1["test_loss"][-1]
    best = {a: sel_lrs[min((i for i, b in enumerate(sel_arms) if b == a),
                           key=lambda i: final[i])] for a in ARMS}
    logging.info("vit selected lr: %s", best)
    pairs = [(s, f) for s in v.seeds for f in range(v.folds)]
    arms = [a for a in ARMS for _ in pairs]
    s2 = train_vit_replicas(c, x, y, [fs[f] for _ in ARMS for _, f in pairs],
                            [s for _ in ARMS for s, _ in pairs], arms,
                            [best[a] for a in arms], ckpt_dir=os.path.join(ckpt_root, "eval"),
                            name="vit eval")
    P = len(pairs)
    acc, tl = s2["test_acc"][-1], s2["train_loss"][-1]
    return {"source": source, "num_images": int(len(x)), "pairs": [list(p) for p in pairs],
            "selected_lr": best,
            "selection_sweep": {f"{a}@{lr:g}": float(final[i])
                                for i, (a, lr) in enumerate(zip(sel_arms, sel_lrs))},
            "test_acc": {a: acc[i * P:(i + 1) * P].tolist() for i, a in enumerate(ARMS)},
            "train_loss": {a: tl[i * P:(i + 1) * P].tolist() for i, a in enumerate(ARMS)},
            "test_acc_curves": {a: s2["test_acc"][:, i * P:(i + 1) * P].T.tolist()
                                for i, a in enumerate(ARMS)},
            "epochs_logged": s2["epochs"].tolist()}
