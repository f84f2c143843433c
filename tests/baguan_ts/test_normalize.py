"""Tests for the two-stage context normalisation (spec §Tests: Normalisation)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.baguan_ts import normalize as nz
from icml26_jax.baguan_ts import retrieval as R

N, M, F, H = 5, 16, 3, 4


def _data(seed=0, f=F):
    rng = np.random.default_rng(seed)
    scales = np.array([1.0, 30.0, 0.01, 5.0][: f + 1], np.float32)
    offsets = np.array([0.0, -200.0, 3.0, 50.0][: f + 1], np.float32)
    x = (rng.normal(size=(N, M, f + 1)) * scales + offsets).astype(np.float32)
    feat, targ = x[..., :f], x[..., f:]
    targ[-1, M - H :, 0] = np.nan  # the query's forecast slots
    slot = np.zeros((N, M), bool)
    slot[-1, M - H :] = True
    return feat, targ, slot


def _np_reference(feat, targ, slot):
    x = np.concatenate([feat, targ], -1).astype(np.float64)
    lo, rng_, mu, sd = [], [], [], []
    for c in range(x.shape[-1]):
        v = x[..., c][~slot]
        v = v[~np.isnan(v)]
        lo.append(v.min())
        rng_.append(v.max() - v.min())
        u = (v - v.min()) / (v.max() - v.min())
        mu.append(u.mean())
        sd.append(u.std())
    return [np.array(a) for a in (lo, rng_, mu, sd)]


def _assert_state_equal(a, b):
    for name in nz.NormState._fields:
        np.testing.assert_array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)))


def test_fit_matches_numpy_and_standardises_kept_values():
    feat, targ, slot = _data()
    st = nz.fit(feat, targ, slot)
    assert all(getattr(st, n).shape == (F + 1,) for n in nz.NormState._fields)
    for got, want in zip(st, _np_reference(feat, targ, slot)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    fn, tn = nz.apply(st, feat, targ)
    x_n = np.concatenate([np.asarray(fn), np.asarray(tn)], -1)[~slot]  # [kept, F + 1]
    np.testing.assert_allclose(x_n.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(x_n.std(0), 1.0, atol=1e-5)


def test_forecast_slots_are_excluded():
    feat, targ, slot = _data(1)
    ref = nz.fit(feat, targ, slot)
    # Any value in the slots, covariates included, leaves the state bit-identical.
    for fill in (0.0, 1e6, -1e6, np.inf):
        f2, t2 = feat.copy(), targ.copy()
        t2[slot] = fill
        f2[slot] = fill
        _assert_state_equal(nz.fit(f2, t2, slot), ref)
    # Without excluding them the (filled) slots do change it: the test can fail.
    t3 = targ.copy()
    t3[slot] = 1e6
    leaky = nz.fit(feat, t3, np.zeros_like(slot))
    assert not np.array_equal(np.asarray(leaky.rng), np.asarray(ref.rng))


def test_nans_ignored_and_preserved():
    feat, targ, slot = _data(2)
    targ[0, 3, 0] = np.nan
    feat[1, 5, 1] = np.nan
    st = nz.fit(feat, targ, slot)
    assert all(np.isfinite(np.asarray(a)).all() for a in st)
    fn, tn = nz.apply(st, feat, targ)
    np.testing.assert_array_equal(np.isnan(np.asarray(tn)), np.isnan(targ))
    np.testing.assert_array_equal(np.isnan(np.asarray(fn)), np.isnan(feat))


@pytest.mark.parametrize("f", [0, F])
def test_invert_apply_roundtrip(f):
    feat, targ, slot = _data(3, f)
    st = nz.fit(feat, targ, slot)
    fn, tn = nz.apply(st, feat, targ)
    # Relative 1e-5: float32 affine round trip on values up to |x| ~ 300.
    np.testing.assert_allclose(np.asarray(nz.invert(st, tn)), targ, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(nz.invert_feat(st, fn)), feat, rtol=1e-5, atol=1e-5)
    # invert works on quantile-shaped arrays of any shape.
    q = np.random.default_rng(0).normal(size=(2, H, 9)).astype(np.float32)
    want = q * np.asarray(st.scale)[-1] + np.asarray(st.shift)[-1]
    np.testing.assert_allclose(np.asarray(nz.invert(st, q)), want, rtol=1e-6, atol=1e-6)
    _, back = nz.apply(st, feat, np.asarray(nz.invert(st, q))[..., None])
    np.testing.assert_allclose(np.asarray(back)[..., 0], q, rtol=1e-4, atol=1e-4)


def test_constant_channels_are_finite():
    feat, targ, slot = _data(4)
    feat[..., 0] = 7.0  # constant covariate, including its (excluded) future
    feat[-1, M - H :, 0] = 9.0  # ... or a future value never seen in context
    targ[~slot] = -3.0  # constant target history
    st = nz.fit(feat, targ, slot)
    assert all(np.isfinite(np.asarray(a)).all() for a in st)
    fn, tn = nz.apply(st, feat, targ)
    assert np.isfinite(np.asarray(fn)).all()
    np.testing.assert_array_equal(np.asarray(tn)[~slot], 0.0)
    # A constant channel is only shifted (scale 1), so the unseen future value stays O(1).
    np.testing.assert_allclose(np.asarray(fn)[-1, M - H :, 0], 2.0)
    np.testing.assert_allclose(np.asarray(nz.invert(st, tn))[~slot], -3.0)
    # A fully excluded channel gets the identity map.
    st2 = nz.fit(feat, targ, np.ones_like(slot))
    np.testing.assert_array_equal(np.asarray(st2.shift), 0.0)
    np.testing.assert_array_equal(np.asarray(st2.scale), 1.0)


def test_jit_and_vmap_match_eager():
    data = [_data(s) for s in range(3)]
    feats, targs, slots = (np.stack(a) for a in zip(*data))

    def go(feat, targ, slot):
        st = nz.fit(feat, targ, slot)
        fn, tn = nz.apply(st, feat, targ)
        return st, fn, tn, nz.invert(st, tn)

    batched = jax.jit(jax.vmap(go))(feats, targs, slots)
    for b in range(3):
        eager = go(*data[b])
        jitted = jax.jit(go)(*data[b])
        leaves = zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), jax.tree.leaves(batched))
        for e, j, v in leaves:
            np.testing.assert_allclose(np.asarray(j), np.asarray(e), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(np.asarray(v)[b], np.asarray(e), rtol=1e-6, atol=1e-6)


def test_padded_supports_excluded_via_retrieval_mask():
    feat, targ, slot = _data(5)
    # Supports 2 and 3 are padding (mask False) holding junk: forecast_slot_mask drops them.
    feat[2:4] = 1e6
    targ[2:4] = -1e6
    mask = np.array([True, True, False, False])
    ctx = R.Contexts(feat, targ, np.array([0, 8, -1, -1], np.int32), np.zeros(4, np.float32), mask)
    slot_all = np.asarray(R.forecast_slot_mask(ctx, H))
    np.testing.assert_array_equal(slot_all[[0, 1, -1]], slot[[0, 1, -1]])
    assert slot_all[2:4].all()
    st = nz.fit(feat, targ, slot_all)
    keep = [0, 1, N - 1]  # valid supports + query
    ref = nz.fit(feat[keep], targ[keep], slot[keep])
    for a, b in zip(st, ref):  # equal up to summation order
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    fn, tn = nz.apply(st, feat, targ)
    assert np.isnan(np.asarray(tn)[-1, M - H :]).all()
    assert np.isfinite(np.asarray(tn)[:-1]).all()


def test_bad_shapes_raise():
    feat, targ, slot = _data()
    with pytest.raises(ValueError, match=r"slot_mask \[N, M\]"):
        nz.fit(feat, targ, slot[:, :-1])
    with pytest.raises(ValueError, match=r"targ \[N, M, 1\]"):
        nz.fit(feat, jnp.concatenate([targ, targ], -1), slot)
