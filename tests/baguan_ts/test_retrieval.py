"""Tests for Y-space RBfcst and the naive context kinds (spec §Tests: Retrieval, No leakage)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.baguan_ts import retrieval as R

P = 12  # sinusoid period
L, M, H, K = 204, 48, 12, 6  # L - M + H = 168 = 14 P: the query is phase-aligned with s = 0
# Every eager test shares the shapes above (each new shape costs one compile per op). The
# short-history cases that need other shapes run in one jitted function (one compile):
# LS - M + 1 = 10 candidates, fewer than KS.
LS, KS = M + 9, 12


def _sinusoid(n):
    t = np.arange(n, dtype=np.float64)
    return np.sin(2 * np.pi * t / P).astype(np.float32)


def _covariates(seed, n, f=2):
    return np.random.default_rng(seed).normal(size=(n, f)).astype(np.float32)


def _np_similarities(y, L, M, H, l_on_znorm):
    """Independent float64 reference: explicit loop over candidates."""
    y = np.asarray(y, np.float64)
    q = y[L - M + H : L]

    def z(v):
        return (v - v.mean()) / (v.std() + 1e-8)

    s, c, l2 = [], [], []
    for start in range(L - M + 1):
        w = y[start : start + M - H]
        s.append(np.dot(z(w), z(q)) / len(q))
        c.append(np.dot(w, q) / (np.linalg.norm(w) * np.linalg.norm(q)))
        a, b = (z(w), z(q)) if l_on_znorm else (w, q)
        l2.append(np.tanh(-np.linalg.norm(a - b)))
    s = np.array(s)
    s = s / (s.max() - s.min())
    return (s + np.array(c) + np.array(l2)) / 3


def _all_kinds(y, X, L=L, M=M, H=H, K=K, period=P):
    return {
        "rbfcst": R.rbfcst(y, X, L, M, H, K, period),
        "rbfcst_lz": R.rbfcst(y, X, L, M, H, K, period, l_on_znorm=True),
        "recent": R.recent_contexts(y, X, L, M, H, K, period),
        "random": R.random_contexts(jax.random.key(3), y, X, L, M, H, K, period),
        "nonoverlap": R.nonoverlap_contexts(y, X, L, M, H, K, period),
        "nonoverlap_official": R.nonoverlap_contexts(
            y, X, L, M, H, K, period, anchor="official"
        ),
    }


def _assert_contexts_equal(a, b):
    for name in R.Contexts._fields:
        np.testing.assert_array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)))


@pytest.mark.parametrize("l_on_znorm", [False, True])
def test_similarities_match_numpy_reference(l_on_znorm):
    rng = np.random.default_rng(0)
    # Scale 0.05 keeps the raw 'l' away from tanh saturation so it actually matters.
    y = (0.05 * rng.normal(size=L + H)).astype(np.float32)
    got = np.asarray(R.similarities(y, L, M, H, l_on_znorm=l_on_znorm))
    want = _np_similarities(y, L, M, H, l_on_znorm)
    assert got.shape == (L - M + 1,) and got.dtype == np.float32
    # float32 vs float64 on windows of 36 values of O(1): errors are ~1e-6.
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_l_variants_differ_and_znorm_l_is_affine_invariant():
    rng = np.random.default_rng(1)
    y = (_sinusoid(L + H) + 0.05 * rng.normal(size=L + H)).astype(np.float32)
    big = (1000.0 * y + 50.0).astype(np.float32)
    _, _, l_raw = R.similarity_components(big, L, M, H)
    _, _, l_z = R.similarity_components(big, L, M, H, l_on_znorm=True)
    _, _, l_z_small = R.similarity_components(y, L, M, H, l_on_znorm=True)
    # Raw 'l' saturates at -1 on a large-scale series (the spec's pitfall) ...
    np.testing.assert_allclose(np.asarray(l_raw), -1.0)
    # ... the z-normalised one does not (phase-aligned windows score well above -1), and it
    # ignores scale and offset.
    assert np.ptp(np.asarray(l_z)) > 0.2
    np.testing.assert_allclose(np.asarray(l_z), np.asarray(l_z_small), atol=1e-4)
    s_raw = R.similarities(big, L, M, H)
    s_z = R.similarities(big, L, M, H, l_on_znorm=True)
    assert not np.allclose(np.asarray(s_raw), np.asarray(s_z))


@pytest.mark.parametrize(
    "series_period, period, l_on_znorm",
    [
        (P, P, False),  # grouping period = series period
        (P, P, True),
        (P, 5, False),  # grouping finer than the period
        (P, 2 * P, True),  # grouping coarser: two aligned starts per bin, one kept
        (10, 5, True),  # L - M + H = 168 = 8 (mod 10): aligned starts are not multiples
        (10, 20, False),
    ],
)
def test_sinusoid_retrieves_phase_aligned_windows(series_period, period, l_on_znorm):
    t = np.arange(L + H, dtype=np.float64)
    y = np.sin(2 * np.pi * t / series_period).astype(np.float32)
    X = _covariates(0, L + H)
    ctx = R.rbfcst(y, X, L, M, H, K, period, l_on_znorm=l_on_znorm)
    starts = np.asarray(ctx.starts)
    assert np.asarray(ctx.mask).all()
    # Phase-aligned with the query history [L-M+H, L): for P = 12, multiples of P.
    np.testing.assert_array_equal((starts - (L - M + H)) % series_period, 0)
    if series_period == P:
        np.testing.assert_array_equal(starts % P, 0)
    assert len(set((starts // period).tolist())) == K  # one start per bin
    assert np.all(starts >= 0) and np.all(starts + M <= L)  # no window crosses the origin
    sims = np.asarray(ctx.sims)
    assert np.all(np.diff(sims) <= 0)  # best first
    # A misaligned window is strictly worse than the retrieved ones.
    all_sims = np.asarray(R.similarities(y, L, M, H, l_on_znorm))
    misaligned = (np.arange(L - M + 1) - (L - M + H)) % series_period != 0
    assert all_sims[misaligned].max() < sims.min() - 1e-3


def test_contexts_content_and_query_layout():
    y = np.random.default_rng(2).normal(size=L + H).astype(np.float32)
    X = _covariates(1, L + H)
    for kind, ctx in _all_kinds(y, X).items():
        assert ctx.feat.shape == (K + 1, M, 2) and ctx.targ.shape == (K + 1, M, 1), kind
        assert ctx.starts.dtype == jnp.int32 and ctx.sims.dtype == jnp.float32
        assert ctx.mask.dtype == jnp.bool_
        feat, targ = np.asarray(ctx.feat), np.asarray(ctx.targ)[..., 0]
        # Query last: known history then H NaN slots; covariates known over all M steps.
        np.testing.assert_array_equal(targ[-1, : M - H], y[L - M + H : L])
        assert np.isnan(targ[-1, M - H :]).all()
        np.testing.assert_array_equal(feat[-1], X[L - M + H : L + H])
        for k, (s, m) in enumerate(zip(np.asarray(ctx.starts), np.asarray(ctx.mask))):
            if m:
                np.testing.assert_array_equal(targ[k], y[s : s + M])
                np.testing.assert_array_equal(feat[k], X[s : s + M])
        assert np.isfinite(targ[:-1]).all() and np.isfinite(feat).all()


def test_sims_are_similarities_at_starts():
    y = np.random.default_rng(4).normal(size=L + H).astype(np.float32)
    X = _covariates(2, L + H)
    sims = np.asarray(R.similarities(y, L, M, H))
    sims_z = np.asarray(R.similarities(y, L, M, H, l_on_znorm=True))
    for kind, ctx in _all_kinds(y, X).items():
        mask = np.asarray(ctx.mask)
        ref = sims_z if kind == "rbfcst_lz" else sims
        np.testing.assert_array_equal(np.asarray(ctx.sims)[mask], ref[np.asarray(ctx.starts)[mask]])
    # RBfcst picks the best of each bin and the best bins.
    ctx = R.rbfcst(y, X, L, M, H, K, P)
    n_groups = (L - M) // P + 1
    best = np.array([sims[g * P : (g + 1) * P].max() for g in range(n_groups)])
    np.testing.assert_allclose(np.asarray(ctx.sims), np.sort(best)[::-1][:K])


def test_covariates_do_not_change_retrieval():
    y = np.random.default_rng(5).normal(size=L + H).astype(np.float32)
    a = R.rbfcst(y, _covariates(10, L + H), L, M, H, K, 5)
    b = R.rbfcst(y, 100.0 * _covariates(11, L + H), L, M, H, K, 5)
    c = R.rbfcst(y, np.zeros((L + H, 0), np.float32), L, M, H, K, 5)
    for other in (b, c):
        np.testing.assert_array_equal(np.asarray(a.starts), np.asarray(other.starts))
        np.testing.assert_array_equal(np.asarray(a.sims), np.asarray(other.sims))
        np.testing.assert_array_equal(np.asarray(a.targ), np.asarray(other.targ))
    assert c.feat.shape == (K + 1, M, 0)
    assert not np.array_equal(np.asarray(a.feat), np.asarray(b.feat))


def test_future_of_y_never_influences_outputs():
    rng = np.random.default_rng(6)
    hist = _sinusoid(L) + 0.1 * rng.normal(size=L).astype(np.float32)
    X = _covariates(3, L + H)
    variants = [
        hist,  # length L
        np.concatenate([hist, np.full(H, np.nan, np.float32)]),
        np.concatenate([hist, 1e6 * rng.normal(size=H).astype(np.float32)]),
        np.concatenate([hist, hist[L - M : L - M + H]]),  # a "perfect" future
        np.concatenate([hist, rng.normal(size=3 * H).astype(np.float32)]),  # longer still
    ]
    ref_sims = R.similarities(variants[0], L, M, H)
    ref = _all_kinds(variants[0], X)
    for yv in variants[1:]:
        np.testing.assert_array_equal(np.asarray(R.similarities(yv, L, M, H)), np.asarray(ref_sims))
        for kind, ctx in _all_kinds(yv, X).items():
            _assert_contexts_equal(ctx, ref[kind])
    # Also under jit: one compiled program, different futures.
    f = jax.jit(R.rbfcst, static_argnames=("L", "M", "H", "K", "period"))
    out1 = f(variants[1], X, L=L, M=M, H=H, K=K, period=P)
    out2 = f(variants[2], X, L=L, M=M, H=H, K=K, period=P)
    _assert_contexts_equal(out1, out2)


def test_nan_in_history_is_ranked_last():
    y = np.random.default_rng(7).normal(size=L + H).astype(np.float32)
    y[100] = np.nan
    ctx = R.rbfcst(y, _covariates(0, L + H), L, M, H, K, 1)
    starts = np.asarray(ctx.starts)
    # No retrieved window's scored part y[s : s+M-H] contains the NaN.
    assert not np.any((starts <= 100) & (100 < starts + M - H))
    assert np.isfinite(np.asarray(ctx.sims)).all()


def test_degenerate_series_give_finite_moderate_scores():
    # A linear trend: every candidate has correlation 1 with the query (range 0 over
    # candidates); a constant series: zero std everywhere. Both must stay finite and the
    # guards must keep 'c' and 'l' resolvable next to 's'.
    trend = np.linspace(0.0, 5.0, L + H).astype(np.float32)
    const = np.full(L + H, 2.0, np.float32)
    X = _covariates(0, L + H)
    for y in (trend, const):
        sims = np.asarray(R.similarities(y, L, M, H))
        assert np.isfinite(sims).all() and np.abs(sims).max() < 1e4
        ctx = R.rbfcst(y, X, L, M, H, K, 1)
        assert np.isfinite(np.asarray(ctx.sims)).all() and np.asarray(ctx.mask).all()
    # On the trend, 'l' decides: the most recent windows (closest in level) come first.
    ctx = R.rbfcst(trend, X, L, M, H, K, 1)
    np.testing.assert_array_equal(np.asarray(ctx.starts), L - M - np.arange(K))


@functools.cache
def _short_contexts():
    """Contexts for a short history: ``(random, nonoverlap origin, nonoverlap official)``."""
    rng = np.random.default_rng(10)
    y = rng.normal(size=LS + H).astype(np.float32)
    X = _covariates(10, LS + H)

    @jax.jit
    def go(key, y, X):
        return (
            R.random_contexts(key, y, X, LS, M, H, KS, P),
            R.nonoverlap_contexts(y, X, LS, M, H, KS, 1),
            R.nonoverlap_contexts(y, X, LS, M, H, KS, 1, anchor="official"),
        )

    return go(jax.random.key(2), y, X)


def test_rbfcst_pads_and_masks_when_fewer_groups_than_k():
    y = np.random.default_rng(8).normal(size=L + H).astype(np.float32)
    X = _covariates(8, L + H)
    ctx = R.rbfcst(y, X, L, M, H, K, 60)  # s = 0..156 in bins {0, 1, 2}: 3 groups < K
    mask, starts = np.asarray(ctx.mask), np.asarray(ctx.starts)
    np.testing.assert_array_equal(mask, np.arange(K) < 3)
    np.testing.assert_array_equal(starts[3:], -1)
    assert sorted((starts[:3] // 60).tolist()) == [0, 1, 2]
    # Padded supports copy the first (best) support: finite and inside the history.
    for k in range(3, K):
        np.testing.assert_array_equal(np.asarray(ctx.targ)[k], np.asarray(ctx.targ)[0])
        np.testing.assert_array_equal(np.asarray(ctx.feat)[k], np.asarray(ctx.feat)[0])
        assert np.asarray(ctx.sims)[k] == np.asarray(ctx.sims)[0]
    # The exclusion mask for normalisation covers padded supports and the query's slots.
    slot = np.asarray(R.forecast_slot_mask(ctx, H))
    assert slot.shape == (K + 1, M)
    assert slot[3:K].all() and not slot[:3].any()
    np.testing.assert_array_equal(slot[K], np.arange(M) >= M - H)


def test_recent_contexts_starts_and_masks():
    y = np.random.default_rng(9).normal(size=L + H).astype(np.float32)
    X = _covariates(5, L + H)
    ctx = R.recent_contexts(y, X, L, M, H, K, 7)
    np.testing.assert_array_equal(np.asarray(ctx.starts), L - M - 7 * np.arange(K))
    assert np.asarray(ctx.mask).all()
    # History too short for K steps of 60: s = 156, 96, 36 valid; -1 afterwards.
    short = R.recent_contexts(y, X, L, M, H, K, 60)
    np.testing.assert_array_equal(np.asarray(short.starts), [156, 96, 36, -1, -1, -1])
    np.testing.assert_array_equal(np.asarray(short.mask), np.arange(K) < 3)
    np.testing.assert_array_equal(np.asarray(short.targ)[3], np.asarray(short.targ)[0])


def test_nonoverlap_contexts_both_anchors():
    y = np.random.default_rng(10).normal(size=L + H).astype(np.float32)
    X = _covariates(6, L + H)
    ctx = R.nonoverlap_contexts(y, X, L, M, H, K, P)
    # s = L - M, L - 2M, ...: 156, 108, 60, 12, then < 0 -> masked.
    np.testing.assert_array_equal(np.asarray(ctx.starts), [156, 108, 60, 12, -1, -1])
    np.testing.assert_array_equal(np.asarray(ctx.mask), np.arange(K) < 4)
    off = R.nonoverlap_contexts(y, X, L, M, H, K, P, anchor="official")
    # rag.py: n = (L + H - M) // M = 3 windows tiled from 0, most recent first.
    np.testing.assert_array_equal(np.asarray(off.starts), [96, 48, 0, -1, -1, -1])
    starts = np.asarray(off.starts)[np.asarray(off.mask)]
    assert np.all(starts + M <= L - M + H)  # no overlap with the query window
    # Each pair of valid windows is disjoint.
    for s in (np.asarray(ctx.starts)[np.asarray(ctx.mask)], starts):
        assert np.all(np.abs(np.diff(s)) >= M)
    # Short history: one origin-anchored window; the official anchor has no room at all, so
    # every support is padding, and the content stays finite.
    _, short, none = _short_contexts()
    np.testing.assert_array_equal(np.asarray(short.starts), [LS - M] + [-1] * (KS - 1))
    assert not np.asarray(none.mask).any()
    assert np.isfinite(np.asarray(none.targ)[:-1]).all()


def test_random_contexts_distinct_valid_deterministic():
    y = np.random.default_rng(11).normal(size=L + H).astype(np.float32)
    X = _covariates(7, L + H)
    a = R.random_contexts(jax.random.key(0), y, X, L, M, H, K, P)
    b = R.random_contexts(jax.random.key(0), y, X, L, M, H, K, P)
    c = R.random_contexts(jax.random.key(1), y, X, L, M, H, K, P)
    _assert_contexts_equal(a, b)
    assert not np.array_equal(np.asarray(a.starts), np.asarray(c.starts))
    for ctx in (a, c):
        s = np.asarray(ctx.starts)
        assert len(set(s.tolist())) == K and np.all(s >= 0) and np.all(s + M <= L)
        assert np.asarray(ctx.mask).all()
    # Fewer candidates (10) than KS: every start used once, the rest padded.
    short, _, _ = _short_contexts()
    s, m = np.asarray(short.starts), np.asarray(short.mask)
    assert sorted(s[m].tolist()) == list(range(10))
    np.testing.assert_array_equal(m, np.arange(KS) < 10)


def test_jit_and_vmap_match_eager():
    B = 3
    rng = np.random.default_rng(12)
    Y = (_sinusoid(L + H)[None] + 0.3 * rng.normal(size=(B, L + H))).astype(np.float32)
    XX = rng.normal(size=(B, L + H, 2)).astype(np.float32)

    def every_kind(y, x):  # one compile for all kinds keeps the test fast
        return _all_kinds(y, x), R.similarities(y, L, M, H)

    # jit(vmap(.)) against per-series eager calls checks both transformations at once.
    batched = jax.jit(jax.vmap(every_kind))(Y, XX)
    for b in range(B):
        eager = (_all_kinds(Y[b], XX[b]), R.similarities(Y[b], L, M, H))
        for e, v in zip(jax.tree.leaves(eager), jax.tree.leaves(batched)):
            e = np.asarray(e)
            # Retrieved starts and masks are discrete and must agree exactly; float contents
            # may differ by XLA fusion rounding only.
            if e.dtype.kind in "bi":
                np.testing.assert_array_equal(np.asarray(v)[b], e)
            np.testing.assert_allclose(np.asarray(v)[b], e, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(L=40, M=48), r"L must be >= M.*L=40, M=48"),
        (dict(H=48), r"H must be < M.*H=48, M=48"),
        (dict(H=60), r"H must be < M.*H=60"),
        (dict(K=0), r"K must be >= 1.*K=0"),
        (dict(period=0), r"period must be >= 1.*period=0"),
        (dict(H=0), r"H must be >= 1.*H=0"),
        (dict(K=2.5), r"K must be a static Python int"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    args = dict(L=L, M=M, H=H, K=K, period=P) | kwargs
    y = np.zeros(L + H, np.float32)
    X = np.zeros((L + H, 1), np.float32)
    with pytest.raises(ValueError, match=match):
        R.rbfcst(y, X, **args)
    with pytest.raises(ValueError, match=match):
        R.recent_contexts(y, X, **args)


def test_bad_series_and_anchor_raise():
    y = np.zeros(L + H, np.float32)
    X = np.zeros((L + H, 1), np.float32)
    with pytest.raises(ValueError, match=r"X must cover the horizon"):
        R.rbfcst(y, X[:L], L, M, H, K, P)
    with pytest.raises(ValueError, match=r"y must have length >= L"):
        R.rbfcst(y[: L - 1], X, L, M, H, K, P)
    with pytest.raises(ValueError, match=r"anchor must be"):
        R.nonoverlap_contexts(y, X, L, M, H, K, P, anchor="end")
    with pytest.raises(ValueError, match=r"L must be >= M"):
        R.similarities(y, 10, M, H)
