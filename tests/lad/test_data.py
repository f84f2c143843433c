"""The training episodes built in bulk (``train.train_batches``, ``data.draw_episodes``,
``data.episodes_from_draws``, ``data.tokenize_mixed``) are exactly the per-step construction
they replace: the code below marked REFERENCE is that construction as it stood before issue 43
(one ``make_episodes`` call per (N, mode) group, a Python loop over episodes), kept verbatim."""

import numpy as np
import pytest

from icml26_jax.core.flags import as_tuple
from icml26_jax.lad import configs, data, train


def _reference_make_episodes(pool, split, n_cand, n, mode, pos_probs, rng):
    """REFERENCE: ``data.make_episodes`` before issue 43 (argument checks dropped)."""
    pos_probs = np.asarray(pos_probs, np.float64)
    ids = np.flatnonzero(pool.split == data.SPLITS.index(split))
    labels = pool.labels[ids]
    flat = pool.images[ids].reshape(len(ids), -1)
    unit = flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)
    out_ids = np.empty((n, n_cand), np.int64)
    gts = rng.choice(n_cand, size=n, p=pos_probs)
    anchors = rng.integers(0, len(ids), size=n)
    for e in range(n):
        a = anchors[e]
        c = labels[a]
        if mode == "random":
            others = np.flatnonzero(labels != c)
            distract = rng.choice(others, size=n_cand - 1, replace=False)
        else:
            sim = unit @ unit[a]
            sim[labels == c] = -np.inf
            distract, seen = [], set()
            for j in np.argsort(-sim, kind="stable"):
                if labels[j] not in seen:
                    seen.add(labels[j])
                    distract.append(j)
                    if len(distract) == n_cand - 1:
                        break
            distract = rng.permutation(np.asarray(distract))
        row = np.insert(distract, gts[e], a)
        out_ids[e] = ids[row]
    return data.Episodes(pool.images[out_ids], out_ids,
                         pool.labels[out_ids[np.arange(n), gts]], gts.astype(np.int32))


def _reference_train_batch(c, pool, step):
    """REFERENCE: ``train.train_batch`` before issue 43 (one step's batch)."""
    rng = np.random.default_rng((int(c.seed), int(step)))
    B = int(c.batch)
    ns = rng.choice(as_tuple(c.train_n, int), size=B)
    adv = rng.random(B) < float(c.train_adversarial_frac)
    parts, targets = [], []
    for n in np.unique(ns):
        for mode, sel in (("random", ~adv), ("adversarial", adv)):
            k = int(np.sum((ns == n) & sel))
            if k:
                ep = _reference_make_episodes(pool, "train", int(n), k, mode,
                                              data.position_probs(int(n), c.pos_skew), rng)
                parts.append(data.tokenize(ep))
                targets.append(data.INDEX0 + ep.gt)
    cat = lambda i: np.concatenate([p[i] for p in parts])  # noqa: E731
    return data.Batch(cat(0), cat(1), cat(2), cat(3), None), np.concatenate(targets)


@pytest.fixture(scope="module")
def pool():
    return data.load_pool(0)


@pytest.fixture(scope="module")
def train_tables(pool):
    return data.split_tables(pool, "train")


def _same(a, b):
    """Equal shape, dtype and bytes (not only values)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("overrides", [
    {},  # the default run's batches
    {"seed": 3, "train_adversarial_frac": 1.0, "train_n": (2, 8), "pos_skew": "none",
     "batch": 24},
    {"seed": 1, "train_adversarial_frac": 0.0, "train_n": (3, 5, 5, 7), "batch": 16},
])
def test_train_batches_equal_the_per_step_construction(pool, train_tables, overrides):
    c = configs.get_config("default")
    c.update(overrides)
    train.normalise_config(c)
    s0, n = 57, 4
    got = train.train_batches(c, pool, s0, n, train_tables)
    ref = [_reference_train_batch(c, pool, s) for s in range(s0, s0 + n)]
    want = [np.stack([b[0][i] for b in ref]) for i in range(4)] + [np.stack([b[1] for b in ref])]
    for name, x, y in zip(("tokens", "patches", "is_patch", "last_idx", "targets"), got, want):
        assert _same(x, y), name
    # The tables built inside (none given) are the same tables.
    assert all(_same(x, y[:1]) for x, y in zip(train.train_batches(c, pool, s0, 1), got))


@pytest.mark.parametrize("split,n_cand,mode", [
    ("train", 8, "random"), ("train", 2, "adversarial"), ("cal", 8, "adversarial"),
    ("test", 5, "random"), ("test", 6, "adversarial"), ("cal", 2, "random")])
def test_draws_rebuild_make_episodes_and_leave_the_generator_in_its_state(
        pool, train_tables, split, n_cand, mode):
    tables = train_tables if split == "train" else data.split_tables(pool, split)
    probs = data.position_probs(n_cand)
    ref_rng, rng, new_rng = (np.random.default_rng(11) for _ in range(3))
    want = _reference_make_episodes(pool, split, n_cand, 9, mode, probs, ref_rng)
    gts, anchors, draws = data.draw_episodes(rng, tables, n_cand, 9, mode, probs)
    ep = data.episodes_from_draws(pool, tables, np.full(9, n_cand), np.full(9, mode != "random"),
                                  gts, anchors, draws)
    for name, x, y in zip(data.Episodes._fields, ep, want):
        assert _same(np.asarray(x)[:, :n_cand] if x.ndim > 1 else x, y), name
    assert np.all(ep.image_ids[:, n_cand:] == -1) and np.all(ep.images[:, n_cand:] == 0)
    # Same generator state afterwards (the buffered half of a 32-bit draw included).
    assert rng.bit_generator.state == ref_rng.bit_generator.state
    # make_episodes (refactored) is still the reference too.
    assert all(_same(x, y) for x, y in zip(
        data.make_episodes(pool, split, n_cand, 9, mode, probs, new_rng), want))


def test_tokenize_mixed_rows_equal_tokenize(pool, train_tables):
    rng = np.random.default_rng(0)
    eps, ns = [], (2, 8, 5, 3)
    for n in ns:
        g, a, d = data.draw_episodes(rng, train_tables, n, 2, "random", data.position_probs(n))
        eps.append(data.episodes_from_draws(pool, train_tables, [n] * 2, [False] * 2, g, a, d))
    mixed = data.Episodes(*(np.concatenate(x) for x in zip(*eps)))
    got = data.tokenize_mixed(mixed, np.repeat(ns, 2))
    for i, (n, ep) in enumerate(zip(ns, eps)):
        ep = data.Episodes(ep.images[:, :n], ep.image_ids[:, :n], ep.query, ep.gt)
        want = data.tokenize(ep)
        for x, y in zip(got[:4], want[:4]):
            assert _same(x[2 * i:2 * i + 2], y)
    assert got.spans is None


def test_bulk_path_errors_name_the_argument(pool, train_tables):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="split"):
        data.split_tables(pool, "val")
    with pytest.raises(ValueError, match="mode"):
        data.draw_episodes(rng, train_tables, 4, 2, "hard", np.full(4, 0.25))
    with pytest.raises(ValueError, match="pos_probs"):
        data.draw_episodes(rng, train_tables, 4, 2, "random", np.full(3, 1 / 3))
    with pytest.raises(ValueError, match="t_max"):
        ep = data.episodes_from_draws(pool, train_tables, [8], [True], [0], [0],
                                      np.zeros((1, data.MAX_DRAWS), np.int64))
        data.tokenize_mixed(ep, [8], t_max=20)
