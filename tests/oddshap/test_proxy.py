"""The oblivious-GBT proxy (spec §Tests 8): exact spectrum, fitting rule, padding,
determinism, vmap, support selection.

Tolerances: the spectrum identities are exact up to float64 rounding of sums of a few
thousand O(1) terms, hence 1e-10 (the spec's threshold); a fit compared with a fit of the same
rows in another layout (padding, vmap, a numpy loop) differs only in the summation order of
the mean and the residual sums, hence 1e-12 relative on leaves with identical features.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.oddshap import fourier, proxy

_fit = jax.jit(proxy.fit_oblivious_gbt, static_argnames=("trees", "depth"))
_spectrum = jax.jit(proxy.tree_spectrum, static_argnums=1)
_predict = jax.jit(proxy.predict)
_select = jax.jit(proxy.select_support, static_argnums=(3, 4))


def _data(n: int, m: int, seed: int, noise: float = 0.1):
    """Random coalitions and a game with 1-, 2- and 3-way terms (numpy)."""
    rng = np.random.default_rng(seed)
    z = rng.random((m, n)) < 0.5
    zf = z.astype(np.float64)
    y = (1.5 * zf[:, 0] * zf[:, 1] * zf[:, 2] - 2.0 * zf[:, 3] * zf[:, 4] * zf[:, n - 1]
         + zf[:, 1] - 0.7 * zf[:, 2] * zf[:, 3] + noise * rng.normal(size=m))
    return z, y


def _reconstruct(masks, coefs, valid, z):
    """``sum_T coef_T chi_T(S)`` for the rows of ``z`` (valid entries only)."""
    chi = fourier.parity_f(fourier.pack(jnp.asarray(z)), masks)  # [m, K]
    return np.asarray(chi @ jnp.where(valid, coefs, 0.0))


def _numpy_gbt(z, y, valid, trees, depth, lr, lam):
    """Plain-loop reference of the fitting rule (valid rows only)."""
    zv, yv = z[valid], y[valid]
    n = z.shape[1]
    d = max(1, min(depth, n - 1))
    base = yv.mean()
    pred = np.full(len(yv), base)
    feats, leaves = [], []
    for _ in range(trees):
        r = yv - pred
        node = np.zeros(len(yv), np.int64)
        used = []
        for level in range(d):
            best, best_f = -np.inf, -1
            for f in range(n):
                if f in used:
                    continue
                gain = 0.0
                for j in range(2 ** level):
                    inside = node == j
                    right, left = inside & zv[:, f], inside & ~zv[:, f]
                    gain += (r[right].sum() ** 2 / (right.sum() + lam)
                             + r[left].sum() ** 2 / (left.sum() + lam)
                             - r[inside].sum() ** 2 / (inside.sum() + lam))
                if gain > best:  # strict: ties keep the lowest index
                    best, best_f = gain, f
            used.append(best_f)
            node = node + (2 ** level) * zv[:, best_f]
        leaf = np.array([lr * r[node == u].sum() / ((node == u).sum() + lam)
                         for u in range(2 ** d)])
        pred = pred + leaf[node]
        feats.append(used)
        leaves.append(leaf)
    return np.array(feats), np.array(leaves), base


def _assert_same_model(a, b, rtol=1e-12):
    np.testing.assert_array_equal(np.asarray(a.features), np.asarray(b.features))
    np.testing.assert_allclose(np.asarray(a.leaves), np.asarray(b.leaves), rtol=rtol,
                               atol=1e-14)
    np.testing.assert_allclose(np.asarray(a.base), np.asarray(b.base), rtol=rtol)


@pytest.fixture(scope="module")
def padded_fit():
    """n = 10: 200 valid rows + 56 padding rows carrying huge targets, and the same 200 rows
    without padding."""
    n, m, pad = 10, 200, 56
    z, y = _data(n, m, seed=1)
    rng = np.random.default_rng(2)
    zp = np.concatenate([z, rng.random((pad, n)) < 0.5])
    yp = np.concatenate([y, 1e6 * (1.0 + rng.random(pad))])
    valid = np.arange(m + pad) < m
    perm = rng.permutation(m + pad)  # padding interleaved with the real rows
    zp, yp, valid = zp[perm], yp[perm], valid[perm]
    kw = dict(trees=40, depth=6)
    model_pad = _fit(jnp.asarray(zp), jnp.asarray(yp), jnp.asarray(valid), **kw)
    model = _fit(jnp.asarray(z), jnp.asarray(y), jnp.ones((m,), bool), **kw)
    return dict(n=n, z=z, y=y, zp=zp, yp=yp, valid=valid, kw=kw, model_pad=model_pad,
                model=model)


@pytest.mark.parametrize("n,depth", [(5, 6), (10, 6)])
def test_spectrum_reproduces_predict_on_all_coalitions(n, depth, padded_fit):
    if n == 10:
        model = padded_fit["model_pad"]
    else:  # depth 6 > n - 1 = 4: clamped to D = 4
        z, y = _data(n, 120, seed=0)
        model = _fit(jnp.asarray(z), jnp.asarray(y), jnp.ones((120,), bool), trees=30,
                     depth=depth)
    d = min(depth, n - 1)
    assert model.features.shape == (model.leaves.shape[0], d)
    assert model.leaves.shape[1] == 2 ** d
    feats = np.asarray(model.features)
    assert all(len(set(row)) == d for row in feats), "features repeat within a tree"
    masks, coefs, valid = _spectrum(model, n)
    zall = fourier.index_bits(n)
    pred = np.asarray(_predict(model, jnp.asarray(zall)))
    np.testing.assert_allclose(_reconstruct(masks, coefs, valid, zall), pred, rtol=0,
                               atol=1e-10)
    # predict is far from constant, so the identity above is not vacuous.
    assert np.ptp(pred) > 0.5
    # Merged: one entry per distinct subset of some tree's features, then empty slots.
    subsets = {frozenset(row[list(u)]) for row in feats
               for r in range(d + 1) for u in itertools.combinations(range(d), r)}
    num = int(np.sum(np.asarray(valid)))
    assert num == len(subsets)
    assert np.all(np.asarray(valid)[:num]) and not np.any(np.asarray(valid)[num:])
    got = {frozenset(np.flatnonzero(row)) for row in np.asarray(fourier.unpack(masks, n))[:num]}
    assert got == subsets
    assert np.all(np.asarray(masks)[num:] == 0) and np.all(np.asarray(coefs)[num:] == 0)


def test_padding_rows_change_nothing(padded_fit):
    """Rows with valid=False (targets ~1e6) give the model of the valid rows alone."""
    _assert_same_model(padded_fit["model_pad"], padded_fit["model"])
    ref_feats, ref_leaves, ref_base = _numpy_gbt(
        padded_fit["zp"], padded_fit["yp"], padded_fit["valid"], lr=0.1, lam=1.0,
        **padded_fit["kw"])
    np.testing.assert_array_equal(np.asarray(padded_fit["model_pad"].features), ref_feats)
    np.testing.assert_allclose(np.asarray(padded_fit["model_pad"].leaves), ref_leaves,
                               rtol=1e-10, atol=1e-13)
    assert abs(float(padded_fit["model_pad"].base) - ref_base) < 1e-12


def test_boosting_reduces_training_mse(padded_fit):
    z, y = padded_fit["z"], padded_fit["y"]
    pred = np.asarray(_predict(padded_fit["model"], jnp.asarray(z)))
    mse_mean = np.mean((y - y.mean()) ** 2)
    mse_fit = np.mean((y - pred) ** 2)
    assert mse_fit < 0.1 * mse_mean, (mse_fit, mse_mean)


def test_hand_made_single_tree():
    """All 8 coalitions of 3 players, y = 4 z1 + z0 (+ a little z2): level 0 must split on
    player 1, level 1 on player 0; leaves = lr * sum r / (count + lam)."""
    z = fourier.index_bits(3)  # [8, 3]
    y = 4.0 * z[:, 1] + 1.0 * z[:, 0] + 0.25 * z[:, 2]
    lr, lam = 0.3, 0.5
    model = _fit(jnp.asarray(z), jnp.asarray(y), jnp.ones((8,), bool), trees=1, depth=2,
                 lr=lr, lam=lam)
    np.testing.assert_array_equal(np.asarray(model.features), [[1, 0]])
    r = y - y.mean()
    leaf = z[:, 1] * 1 + z[:, 0] * 2
    want = [lr * r[leaf == u].sum() / ((leaf == u).sum() + lam) for u in range(4)]
    np.testing.assert_allclose(np.asarray(model.leaves)[0], want, rtol=1e-13)
    assert float(model.base) == pytest.approx(y.mean(), abs=1e-14)
    # predict: base + leaf of each row.
    np.testing.assert_allclose(np.asarray(_predict(model, jnp.asarray(z))),
                               y.mean() + np.asarray(want)[leaf], rtol=1e-13)


def test_ties_go_to_the_lowest_feature():
    """Players 0 and 2 carry identical columns (equal gains): player 0 is chosen."""
    z = fourier.index_bits(3)
    z[:, 0] = z[:, 2]
    y = 2.0 * z[:, 2] + 0.1 * z[:, 1]
    model = _fit(jnp.asarray(z), jnp.asarray(y), jnp.ones((8,), bool), trees=1, depth=1)
    assert int(model.features[0, 0]) == 0
    # ... and without the copy, player 2 is the best split.
    z2 = fourier.index_bits(3)
    model2 = _fit(jnp.asarray(z2), jnp.asarray(y), jnp.ones((8,), bool), trees=1, depth=1)
    assert int(model2.features[0, 0]) == 2


def test_matches_numpy_reference():
    z, y = _data(6, 40, seed=3, noise=0.5)
    valid = np.ones(40, bool)
    valid[[3, 17, 30]] = False
    model = _fit(jnp.asarray(z), jnp.asarray(y), jnp.asarray(valid), trees=3, depth=3,
                 lr=0.5, lam=2.0)
    feats, leaves, base = _numpy_gbt(z, y, valid, trees=3, depth=3, lr=0.5, lam=2.0)
    np.testing.assert_array_equal(np.asarray(model.features), feats)
    np.testing.assert_allclose(np.asarray(model.leaves), leaves, rtol=1e-12, atol=1e-14)
    assert float(model.base) == pytest.approx(base, rel=1e-14)


def test_deterministic_and_vmap_equals_loop():
    problems = [_data(6, 40, seed=s, noise=0.5) for s in (10, 11, 12)]
    zs = np.stack([p[0] for p in problems])
    ys = np.stack([p[1] for p in problems])
    valid = np.ones((3, 40), bool)
    valid[1, :5] = False
    kw = dict(trees=3, depth=3, lr=0.5, lam=2.0)
    first = _fit(jnp.asarray(zs[0]), jnp.asarray(ys[0]), jnp.asarray(valid[0]), **kw)
    again = _fit(jnp.asarray(zs[0].copy()), jnp.asarray(ys[0].copy()),
                 jnp.asarray(valid[0].copy()), **kw)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    batched = jax.jit(jax.vmap(lambda z, y, v: proxy.fit_oblivious_gbt(z, y, v, **kw)))(
        jnp.asarray(zs), jnp.asarray(ys), jnp.asarray(valid))
    assert batched.leaves.shape == (3, 3, 8)
    for i in range(3):
        one = _fit(jnp.asarray(zs[i]), jnp.asarray(ys[i]), jnp.asarray(valid[i]), **kw)
        _assert_same_model(jax.tree.map(lambda x, i=i: x[i], batched), one)
    # The three problems really differ (the comparison above is not vacuous).
    assert not np.array_equal(np.asarray(batched.leaves[0]), np.asarray(batched.leaves[2]))


def test_sign_convention_hand_built_model():
    """One depth-1 tree on player 2 with leaves (a, b): g = base + a (absent) or b
    (present), so g_hat(empty) = base + (a + b) / 2 and g_hat({2}) = (a - b) / 2."""
    a, b, base = 1.25, -0.5, 3.0
    model = proxy.ObliviousGBT(features=jnp.asarray([[2]], jnp.int32),
                               leaves=jnp.asarray([[a, b]], jnp.float64),
                               base=jnp.asarray(base, jnp.float64))
    masks, coefs, valid = _spectrum(model, 3)
    np.testing.assert_array_equal(np.asarray(masks), [[0], [4]])
    np.testing.assert_allclose(np.asarray(coefs), [base + (a + b) / 2, (a - b) / 2])
    np.testing.assert_array_equal(np.asarray(valid), [True, True])


def test_multiword_spectrum_n40():
    n = 40
    z, y = _data(n, 300, seed=4)
    y = y + 1.2 * z[:, 35] * z[:, 38] * z[:, 0]  # interactions across the two words
    model = _fit(jnp.asarray(z), jnp.asarray(y), jnp.ones((300,), bool), trees=20, depth=6)
    masks, coefs, valid = _spectrum(model, n)
    assert masks.shape == (20 * 64, 2) and masks.dtype == jnp.uint32
    assert np.any(np.asarray(masks)[np.asarray(valid), 1] != 0), "no set in the second word"
    zs = np.random.default_rng(5).random((200, n)) < 0.5
    pred = np.asarray(_predict(model, jnp.asarray(zs)))
    np.testing.assert_allclose(_reconstruct(masks, coefs, valid, zs), pred, rtol=0,
                               atol=1e-10)
    assert np.std(pred) > 0.1


def _random_spectrum(n, num, seed):
    """Distinct random sets of every size (singletons, even, odd), some invalid, and |coef|
    ties of opposite sign."""
    rng = np.random.default_rng(seed)
    sets = set()
    while len(sets) < num:
        size = int(rng.integers(1, 7))
        sets.add(tuple(sorted(rng.choice(n, size, replace=False).tolist())))
    sets = sorted(sets, key=lambda s: rng.random())
    member = np.zeros((num, n), bool)
    for i, s in enumerate(sets):
        member[i, list(s)] = True
    coefs = rng.normal(size=num)
    coefs[5::7] = -coefs[2::7][:len(coefs[5::7])]  # exact |coef| ties
    valid = rng.random(num) < 0.85
    return member, coefs, valid


def _numpy_support(member, coefs, valid, n, k):
    size = member.sum(1)
    cand = np.flatnonzero(valid & (size >= 3) & (size % 2 == 1))
    ranked = sorted(cand, key=lambda i: (-abs(coefs[i]), i))[:k - n]
    rows = [np.eye(n, dtype=bool)[i] for i in range(n)] + [member[i] for i in ranked]
    mask = [True] * len(rows)
    while len(rows) < k:
        rows.append(np.zeros(n, bool))
        mask.append(False)
    return np.array(rows), np.array(mask)


@pytest.mark.parametrize("k_extra", [0, 10, 1000])
def test_select_support_matches_numpy(k_extra):
    n, num = 12, 120
    member, coefs, valid = _random_spectrum(n, num, seed=7)
    k = n + k_extra
    masks = fourier.pack(jnp.asarray(member))
    a, col_mask = _select(masks, jnp.asarray(coefs), jnp.asarray(valid), n, k)
    assert a.shape == (k, 1) and a.dtype == jnp.uint32 and col_mask.shape == (k,)
    want_rows, want_mask = _numpy_support(member, coefs, valid, n, k)
    np.testing.assert_array_equal(np.asarray(fourier.unpack(a, n)), want_rows)
    np.testing.assert_array_equal(np.asarray(col_mask), want_mask)
    size = np.asarray(fourier.popcount(a))
    assert np.all(size[:n] == 1)
    chosen = np.asarray(col_mask)[n:]
    assert np.all(size[n:][chosen] % 2 == 1) and np.all(size[n:][chosen] >= 3)
    if k_extra == 1000:  # more slots than candidates (and than entries): the rest empty
        assert 0 < chosen.sum() < k_extra
        assert np.all(np.asarray(a)[n:][~chosen] == 0)


def test_select_support_multiword():
    """n = 40 (two words): the picked sets are the top odd |coef| sets, size >= 3."""
    n = 40
    member = np.zeros((6, n), bool)
    for i, s in enumerate([(0, 33, 39), (1,), (2, 3), (4, 5, 6, 7, 34), (8, 9, 10), ()]):
        member[i, list(s)] = True
    coefs = np.array([0.5, 9.0, 8.0, -2.0, 0.1, 7.0])
    a, col_mask = _select(fourier.pack(jnp.asarray(member)), jnp.asarray(coefs),
                          jnp.ones(6, bool), n, n + 4)
    got = np.asarray(fourier.unpack(a, n))[n:]
    np.testing.assert_array_equal(got[:3], member[[3, 0, 4]])
    np.testing.assert_array_equal(np.asarray(col_mask)[n:], [True, True, True, False])
    assert not got[3].any()


def test_errors():
    z = jnp.zeros((4, 3), bool)
    y = jnp.zeros((4,), jnp.float64)
    v = jnp.ones((4,), bool)
    with pytest.raises(ValueError, match="z must be bool"):
        proxy.fit_oblivious_gbt(z.astype(jnp.int32), y, v)
    with pytest.raises(ValueError, match="y must be"):
        proxy.fit_oblivious_gbt(z, jnp.zeros((5,), jnp.float64), v)
    with pytest.raises(ValueError, match="valid must be bool"):
        proxy.fit_oblivious_gbt(z, y, jnp.ones((4,), jnp.float64))
    with pytest.raises(ValueError, match="depth"):
        proxy.fit_oblivious_gbt(z, y, v, depth=0)
    with pytest.raises(ValueError, match="trees"):
        proxy.fit_oblivious_gbt(z, y, v, trees=0)
    with pytest.raises(ValueError, match="lam"):
        proxy.fit_oblivious_gbt(z, y, v, lam=0.0)
    with pytest.raises(ValueError, match="lr"):
        proxy.fit_oblivious_gbt(z, y, v, lr=-0.1)
    masks = jnp.zeros((5, 1), jnp.uint32)
    with pytest.raises(ValueError, match=r"k .*k = 3, n = 4"):
        proxy.select_support(masks, jnp.zeros((5,), jnp.float64), jnp.ones((5,), bool), 4, 3)
    with pytest.raises(ValueError, match="masks must be uint32"):
        proxy.select_support(masks.astype(jnp.int32), jnp.zeros((5,), jnp.float64),
                             jnp.ones((5,), bool), 4, 6)
    bad = proxy.ObliviousGBT(jnp.asarray([[5]], jnp.int32), jnp.zeros((1, 2), jnp.float64),
                             jnp.asarray(0.0, jnp.float64))
    with pytest.raises(ValueError, match="features"):
        proxy.tree_spectrum(bad, 3)
