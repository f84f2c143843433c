"""FML manifolds (spec §Tests "Manifolds"): k-means against scikit-learn, masses and caps,
MML against a brute-force reference and its invariances, re-compression, and both local losses
against numpy formulas with finite-difference gradients (float64).

Tolerances: float32 k-means centres agree with scikit-learn's float64 centres to ~1e-6 on
unit vectors (1e-5 used); the losses are compared in float64 (1e-10), and central differences
with step 1e-6 in float64 have truncation + rounding error ~1e-9 on O(1) gradients (1e-6
used), while a wrong mask or a missing log-mass moves values by O(0.1).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from icml26_jax.fml import manifolds as M
from tests import x64

# Jitted once per module: eager k-means would dispatch (and compile) op by op.
compress = jax.jit(M.compress, static_argnames=("k_m", "n_classes", "method", "iters"))
kmeans = jax.jit(M.kmeans, static_argnames=("k", "iters"))
mml = jax.jit(M.mml, static_argnames=("iters",))
recompress = jax.jit(M.recompress, static_argnames=("k_g", "iters"))
union = jax.jit(M.union)


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _sphere_blobs(rng, sizes, p, spread=0.05):
    centres = _unit(rng.normal(size=(len(sizes), p)))
    labels = np.repeat(np.arange(len(sizes)), sizes)
    x = _unit(centres[labels] + spread * rng.normal(size=(len(labels), p)))
    return x.astype(np.float32), labels


def _assign(x, centres):
    return np.argmax(_unit(x) @ np.asarray(centres).T, axis=1)


def test_kmeans_matches_sklearn_on_separated_clusters():
    rng = np.random.default_rng(0)
    sizes = [10, 15, 20, 15]
    x, truth = _sphere_blobs(rng, sizes, p=8)
    centres, mass = kmeans(x, jnp.ones(len(x)), 4, jax.random.key(3))
    ours = _assign(x, centres)
    sk = KMeans(4, n_init=10, random_state=0).fit(x.astype(np.float64))
    assert adjusted_rand_score(sk.labels_, ours) == 1.0
    assert adjusted_rand_score(truth, ours) == 1.0
    # same centres (sklearn's Euclidean means, normalised) up to relabelling
    for j in range(4):
        ref = _unit(sk.cluster_centers_[np.bincount(sk.labels_[ours == j]).argmax()])
        np.testing.assert_allclose(np.asarray(centres[j]), ref, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(centres), axis=1), 1.0, atol=1e-6)
    frac = np.bincount(ours, minlength=4) / len(x)
    np.testing.assert_allclose(np.asarray(mass), frac, atol=1e-6)


def test_kmeans_ignores_zero_weight_points():
    rng = np.random.default_rng(1)
    x, truth = _sphere_blobs(rng, [12, 12, 12, 12], p=8)
    w = (truth != 2).astype(np.float32)  # a whole cluster masked out
    for seed in range(4):
        centres, mass = kmeans(jnp.asarray(x), jnp.asarray(w), 3, jax.random.key(seed))
        ours = _assign(x, centres)
        keep = truth != 2
        assert adjusted_rand_score(truth[keep], ours[keep]) == 1.0
        np.testing.assert_allclose(np.asarray(mass), np.full(3, 1 / 3), atol=1e-6)


def test_kmeans_weights_give_weighted_masses_and_means():
    rng = np.random.default_rng(2)
    x, truth = _sphere_blobs(rng, [16, 16, 16], p=8)  # the shapes of the test above: no compile
    w = rng.uniform(0.1, 2.0, size=48).astype(np.float32)
    centres, mass = kmeans(jnp.asarray(x), jnp.asarray(w), 3, jax.random.key(0))
    ours = _assign(x, centres)
    assert adjusted_rand_score(truth, ours) == 1.0
    for j in range(3):
        sel = ours == j
        np.testing.assert_allclose(float(mass[j]), w[sel].sum() / w.sum(), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(centres[j]), _unit(w[sel] @ x[sel]), atol=1e-5)


def _client_data(rng, n=80, p=16):
    """Classes 0-6 common, class 7: 2 samples, class 8: 1 sample, class 9 only in padding."""
    y = rng.integers(0, 7, size=n)
    y[:2] = 7
    y[2] = 8
    mask = rng.random(n) < 0.8
    mask[:3] = True
    y[3:8], mask[3:8] = 9, False  # padded rows with label 9: class 9 is absent
    y[8:11], mask[8:11] = 7, False  # padded rows of class 7 must not count
    h = rng.normal(size=(n, p)).astype(np.float32)
    return jnp.asarray(h), jnp.asarray(y, jnp.int32), jnp.asarray(mask)


def test_compress_masses_absent_classes_and_cap():
    h, y, mask = _client_data(np.random.default_rng(3))
    man = compress(h, y, mask, 4, jax.random.key(0))
    a, m = np.asarray(man.anchors), np.asarray(man.mass)
    assert a.shape == (10, 4, 16) and m.shape == (10, 4)
    assert np.isfinite(a).all() and np.isfinite(m).all() and (m >= 0).all()
    np.testing.assert_allclose(m[:9].sum(1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(m[9], 0.0)
    np.testing.assert_allclose(np.linalg.norm(a[m > 0], axis=-1), 1.0, atol=1e-6)
    # class 7 has 2 valid samples and k_m = 4: two anchors (the points) of mass 1/2
    np.testing.assert_allclose(np.sort(m[7]), [0, 0, 0.5, 0.5], atol=1e-6)
    pts = _unit(np.asarray(h)[:2])
    got = a[7][m[7] > 0]
    assert np.abs(got @ pts.T).max(axis=1).min() > 1 - 1e-6
    assert np.abs(got[0] @ got[1]) < 1 - 1e-3  # two distinct anchors
    # class 8 has one sample: one anchor of mass 1
    np.testing.assert_allclose(np.sort(m[8]), [0, 0, 0, 1], atol=1e-6)
    # the other classes have >= 4 samples, so 4 non-empty clusters are expected here
    assert ((m[:7] > 0).sum(1) >= 3).all()


def test_compress_k1_is_normalised_class_mean():
    h, y, mask = _client_data(np.random.default_rng(4))
    man = compress(h, y, mask, 1, jax.random.key(1))
    hh, yy, mm = _unit(np.asarray(h)), np.asarray(y), np.asarray(mask)
    for c in range(9):
        ref = _unit(hh[(yy == c) & mm].mean(0))
        np.testing.assert_allclose(np.asarray(man.anchors[c, 0]), ref, atol=1e-5)
        assert float(man.mass[c, 0]) == pytest.approx(1.0)
    assert float(man.mass[9, 0]) == 0.0


def test_compress_pca_anchors():
    h, y, mask = _client_data(np.random.default_rng(5))
    man = compress(h, y, mask, 5, jax.random.key(0), method="pca")
    hh, yy, mm = _unit(np.asarray(h, np.float64)), np.asarray(y), np.asarray(mask)
    x = hh[(yy == 0) & mm]
    mu = x.mean(0)
    lam, u = np.linalg.eigh((x - mu).T @ (x - mu) / len(x))
    d1, d2 = np.sqrt(lam[-1]) * u[:, -1], np.sqrt(lam[-2]) * u[:, -2]
    ref = _unit(np.stack([mu, mu + d1, mu - d1, mu + d2, mu - d2]))
    got = np.asarray(man.anchors[0], np.float64)
    np.testing.assert_allclose(got[0], ref[0], atol=1e-5)
    for pair in ((1, 2), (3, 4)):  # eigenvector sign is arbitrary: compare the {+, -} pair
        g, r = got[list(pair)], ref[list(pair)]
        err = min(np.abs(g - r).max(), np.abs(g[::-1] - r).max())
        assert err < 1e-4
    np.testing.assert_allclose(np.asarray(man.mass[:9]), 0.2, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(man.mass[9]), 0.0)
    with pytest.raises(ValueError, match="k_m"):
        M.compress(h, y, mask, 4, jax.random.key(0), method="pca")


def _random_manifolds(rng, N=3, C=4, K=3, p=6):
    a = _unit(rng.normal(size=(N, C, K, p))).astype(np.float32)
    m = rng.uniform(0.1, 1.0, size=(N, C, K)).astype(np.float32)
    m[0, 0, 2] = 0.0  # a capped anchor
    m[1, 1] = 0.0  # client 1 lacks class 1
    m[:, 2] = 0.0
    m[2, 2] = [0.5, 0.5, 0.0]  # class 2 only at client 2: nothing to attend to
    m[:, 3] = 0.0  # class 3 nowhere
    m = m / np.maximum(m.sum(-1, keepdims=True), 1e-30)
    return a, m


def _mml_reference(a, m, beta, tau):
    """Loops over (i, c, k), keys (j, l) with j != i and pi > 0, float64."""
    a, m = np.asarray(a, np.float64), np.asarray(m, np.float64)
    N, C, K, _ = a.shape
    out = a.copy()
    for i in range(N):
        for c in range(C):
            keys = [(j, l) for j in range(N) for l in range(K) if j != i and m[j, c, l] > 0]
            if not keys:
                continue
            for k in range(K):
                if m[i, c, k] == 0:
                    continue
                lg = np.array([a[i, c, k] @ a[j, c, l] / tau + np.log(m[j, c, l])
                               for j, l in keys])
                att = np.exp(lg - lg.max())
                att /= att.sum()
                fused = sum(t * a[j, c, l] for t, (j, l) in zip(att, keys))
                out[i, c, k] = _unit((1 - beta) * a[i, c, k] + beta * fused)
    return out


def test_mml_matches_bruteforce_reference():
    a, m = _random_manifolds(np.random.default_rng(6))
    got = np.asarray(mml(jnp.asarray(a), jnp.asarray(m), 0.5, 0.1))
    np.testing.assert_allclose(got, _mml_reference(a, m, 0.5, 0.1), atol=2e-6)
    # class 2 (one holder) and class 3 (none) are unchanged; class 0 moved
    np.testing.assert_array_equal(got[:, 2:], a[:, 2:])
    assert np.abs(got[:, 0] - a[:, 0]).max() > 1e-2
    twice = mml(mml(jnp.asarray(a), jnp.asarray(m)), jnp.asarray(m))
    np.testing.assert_allclose(np.asarray(mml(jnp.asarray(a), jnp.asarray(m), iters=2)),
                               np.asarray(twice), atol=1e-6)


def test_mml_identity_cases():
    a, m = _random_manifolds(np.random.default_rng(7))
    np.testing.assert_allclose(np.asarray(mml(jnp.asarray(a), jnp.asarray(m), 0.0)), a,
                               atol=1e-6)
    one = mml(jnp.asarray(a[:1]), jnp.asarray(m[:1]), 0.5, 0.1, iters=2)
    np.testing.assert_array_equal(np.asarray(one), a[:1])


def test_mml_never_attends_to_own_or_massless_anchors():
    rng = np.random.default_rng(8)
    a, m = _random_manifolds(rng)
    base = np.asarray(mml(jnp.asarray(a), jnp.asarray(m)))
    # perturbing mass-0 anchors changes nothing else (they are not keys, and not moved)
    b = a.copy()
    b[m == 0] = _unit(rng.normal(size=b[m == 0].shape))
    out = np.asarray(mml(jnp.asarray(b), jnp.asarray(m)))
    np.testing.assert_allclose(out[m > 0], base[m > 0], atol=1e-7)
    np.testing.assert_array_equal(out[m == 0], b[m == 0])
    # two clients, the other one has no class-0 mass: client 0's own class-0 anchors are
    # not keys, so they stay put (self-attention would move them toward each other)
    m2 = m[:2].copy()
    m2[1, 0] = 0.0
    out2 = np.asarray(mml(jnp.asarray(a[:2]), jnp.asarray(m2)))
    np.testing.assert_array_equal(out2[0, 0], a[0, 0])


def test_union_and_recompress_masses():
    a, m = _random_manifolds(np.random.default_rng(9))
    u = union(jnp.asarray(a), jnp.asarray(m))
    assert u.anchors.shape == (4, 9, 6) and u.mass.shape == (4, 9)
    np.testing.assert_allclose(np.asarray(u.mass.sum(1)), [1, 1, 1, 0], atol=1e-6)
    np.testing.assert_allclose(np.asarray(u.mass[1, :3]), m[0, 1] / 2, atol=1e-7)  # N_1 = 2
    np.testing.assert_allclose(np.asarray(u.anchors[1, 3:6]), a[1, 1])
    # k_g = N*K = 9: one compile covers the cap and the reproduction of the union
    g = recompress(jnp.asarray(a), jnp.asarray(m), 9, jax.random.key(0))
    ga, gm = np.asarray(g.anchors), np.asarray(g.mass)
    assert ga.shape == (4, 9, 6) and np.isfinite(ga).all()
    np.testing.assert_allclose(gm.sum(1), [1, 1, 1, 0], atol=1e-6)
    np.testing.assert_array_equal(gm[3], 0.0)
    # class 2: two weighted anchors < k_g -> exactly those two anchors, mass 1/2 each
    np.testing.assert_allclose(np.sort(gm[2])[-3:], [0, 0.5, 0.5], atol=1e-6)
    kept = ga[2][gm[2] > 0]
    assert np.abs(kept @ a[2, 2, :2].T).max(axis=0).min() > 1 - 1e-6
    # class 0: 8 distinct weighted anchors, k_g = 9 -> the union itself (as a weighted set)
    ua, um = np.asarray(u.anchors[0]), np.asarray(u.mass[0])
    assert (gm[0] > 0).sum() == (um > 0).sum() == 8  # the 9th anchor is a massless duplicate
    for j in np.flatnonzero(um > 0):
        hit = np.argmax(np.where(gm[0] > 0, ga[0] @ ua[j], -np.inf))
        assert ga[0, hit] @ ua[j] > 1 - 1e-6 and gm[0, hit] == pytest.approx(um[j], abs=1e-6)


def _loss_problem(rng, B=12, C=4, K=3, p=5):
    a = _unit(rng.normal(size=(C, K, p)))
    m = rng.uniform(0.1, 1.0, size=(C, K))
    m[0, 1] = 0.0
    m[3] = 0.0  # class 3 has no global anchor
    m = m / np.maximum(m.sum(1, keepdims=True), 1e-30)
    h = rng.normal(size=(B, p))
    y = rng.integers(0, C, size=B)
    y[:2] = 3
    w = (rng.random(B) < 0.75).astype(np.float64)
    w[2] = 1.0
    return a, m, h, y, w


def _np_losses(a, m, h, y, w, tau, T):
    hh = _unit(h)
    app, sep = [], []
    for b in range(len(h)):
        s = a @ hh[b]  # [C, K]
        ok = m > 0
        if ok[y[b]].any():
            app.append(-tau * np.log(np.sum(m[y[b]][ok[y[b]]] * np.exp(s[y[b]][ok[y[b]]] / tau))))
            sep.append(-np.log(np.exp(s[y[b]][ok[y[b]]] / T).sum() / np.exp(s[ok] / T).sum()))
        else:
            app.append(0.0)
            sep.append(0.0)
    app, sep = np.array(app), np.array(sep)
    return (w @ app) / w.sum(), (w @ sep) / w.sum(), app.mean(), sep.mean()


def test_losses_match_numpy_and_finite_differences():
    with x64.enabled():
        a, m, h, y, w = _loss_problem(np.random.default_rng(10))
        g = M.GlobalManifold(jnp.asarray(a), jnp.asarray(m))
        hj, yj, wj = jnp.asarray(h), jnp.asarray(y, jnp.int32), jnp.asarray(w)
        ref = _np_losses(a, m, h, y, w, tau=0.1, T=0.07)

        def losses(x):  # [4]: weighted app, weighted sep, plain app, plain sep
            return jnp.stack([M.approx_loss(x, yj, g, 0.1, wj), M.sep_loss(x, yj, g, 0.07, wj),
                              M.approx_loss(x, yj, g, 0.1), M.sep_loss(x, yj, g, 0.07)])

        f = jax.jit(losses)
        np.testing.assert_allclose(np.asarray(f(hj)), ref, rtol=1e-10)
        jac = np.asarray(jax.jit(jax.jacrev(losses))(hj))  # [4, B, p]
        # padded samples and samples of a class without anchors get no gradient
        assert np.abs(jac[:2][:, w == 0]).max() == 0.0 and np.abs(jac[:, :2]).max() == 0.0
        rng = np.random.default_rng(11)
        eps = 1e-6
        for _ in range(3):
            v = rng.normal(size=h.shape)
            fd = (np.asarray(f(hj + eps * v)) - np.asarray(f(hj - eps * v))) / (2 * eps)
            np.testing.assert_allclose(fd, np.einsum("kbp,bp->k", jac, v), rtol=1e-6, atol=1e-9)


def test_losses_finite_on_empty_target():
    """Round 1's placeholder target has no mass at all: losses and gradients are 0, not NaN."""
    h = jnp.asarray(np.random.default_rng(12).normal(size=(6, 5)), jnp.float32)
    y = jnp.arange(6, dtype=jnp.int32) % 3
    g = M.GlobalManifold(jnp.zeros((3, 2, 5)), jnp.zeros((3, 2)))
    f = lambda x: M.approx_loss(x, y, g) + M.sep_loss(x, y, g, w=jnp.ones(6))
    val, grad = jax.jit(jax.value_and_grad(f))(h)
    assert float(val) == 0.0 and np.all(np.asarray(grad) == 0.0)


def test_errors_name_the_argument():
    h, y, mask = _client_data(np.random.default_rng(13))
    a, m = _random_manifolds(np.random.default_rng(14))
    g = M.GlobalManifold(jnp.asarray(a[0]), jnp.asarray(m[0]))
    cases = [
        ("k_m", lambda: M.compress(h, y, mask, 0, jax.random.key(0))),
        ("method", lambda: M.compress(h, y, mask, 4, jax.random.key(0), method="svd")),
        ("k_g", lambda: M.recompress(jnp.asarray(a), jnp.asarray(m), 0, jax.random.key(0))),
        ("tau_a", lambda: M.mml(jnp.asarray(a), jnp.asarray(m), 0.5, 0.0)),
        ("beta_m", lambda: M.mml(jnp.asarray(a), jnp.asarray(m), 1.5, 0.1)),
        ("tau", lambda: M.approx_loss(h[:4, :6], y[:4] % 4, g, tau=0.0)),
        ("T", lambda: M.sep_loss(h[:4, :6], y[:4] % 4, g, T=-1.0)),
    ]
    for name, fn in cases:
        with pytest.raises(ValueError, match=name):
            fn()
