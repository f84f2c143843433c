"""TRACE inference (spec §Tests, "Estimator"): exactness, baseline invariance, projections,
smoothing and Theorem 4.3's penalized least squares, against closed forms and brute force."""

import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

from icml26_jax.trace import infer


def _random_basis(rng, k=4, d=8):
    mus = rng.normal(size=(k, d))  # [K, d]
    return infer.Basis(mu0=mus[0], b=(mus[1:] - mus[0]).T, mus=mus)


def _zbar_from_alpha(basis, alpha):
    """Centroid model ``zbar_t = sum_k alpha_k mu^(k)`` (alpha rows need not be >= 0)."""
    return alpha @ basis.mus  # [T, d]


def test_centroid_basis_means_and_baseline():
    rng = np.random.default_rng(0)
    k_total, d, n = 5, 6, 40
    mus_all = rng.normal(size=(k_total, d))
    c = np.repeat(np.arange(k_total), n)
    noise = rng.normal(size=(k_total * n, d))
    # Centre the noise per domain so the sample means are exactly the chosen centroids.
    for j in range(k_total):
        noise[c == j] -= noise[c == j].mean(axis=0)
    z = mus_all[c] + noise
    perm = rng.permutation(len(c))
    basis = infer.centroid_basis(z[perm], c[perm], active=[3, 0, 4])
    np.testing.assert_allclose(basis.mus, mus_all[[3, 0, 4]], atol=1e-12)
    np.testing.assert_allclose(basis.mu0, mus_all[3], atol=1e-12)
    np.testing.assert_allclose(basis.b[:, 0], mus_all[0] - mus_all[3], atol=1e-12)
    np.testing.assert_allclose(basis.b[:, 1], mus_all[4] - mus_all[3], atol=1e-12)
    assert basis.b.shape == (d, 2) and basis.b.dtype == np.float64


def test_centroid_basis_errors():
    z = np.zeros((4, 3))
    c = np.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match="active domain 2"):
        infer.centroid_basis(z, c, active=[0, 2])
    with pytest.raises(ValueError, match="active"):
        infer.centroid_basis(z, c, active=[0, 0])
    with pytest.raises(ValueError, match="c must"):
        infer.centroid_basis(z, c[:3], active=[0, 1])


def test_sigma_min_hand_basis():
    mus = np.array([[1.0, 1.0, 0.0], [4.0, 1.0, 0.0], [1.0, 1.5, 0.0]])  # B = diag(3, 0.5)
    basis = infer.Basis(mu0=mus[0], b=(mus[1:] - mus[0]).T, mus=mus)
    assert infer.sigma_min(basis) == pytest.approx(0.5, abs=1e-14)
    # More columns than rows: no full column rank, alpha not identified.
    wide = _random_basis(np.random.default_rng(1), k=5, d=3)
    assert infer.sigma_min(wide) == 0.0


@pytest.mark.parametrize("projection", infer.PROJECTIONS)
def test_exact_alpha_for_interior_points(projection):
    rng = np.random.default_rng(2)
    basis = _random_basis(rng, k=4, d=8)
    alpha = rng.dirichlet(np.ones(4), size=20)  # [T, K], interior a.s.
    got = infer.solve_alpha(_zbar_from_alpha(basis, alpha), basis, projection)
    # Float64 least squares on a well-conditioned random B: ~1e-14, 1e-10 leaves margin.
    np.testing.assert_allclose(got, alpha, atol=1e-10)


def test_fit_is_independent_of_the_baseline():
    rng = np.random.default_rng(3)
    basis = _random_basis(rng, k=4, d=8)
    # Off the affine hull of the centroids, and partly outside the simplex.
    zbar = _zbar_from_alpha(basis, rng.normal(size=(15, 4)) + 0.25) + 0.3 * rng.normal(size=(15, 8))
    ref = infer.solve_alpha(zbar, basis, "none")
    np.testing.assert_allclose(ref.sum(axis=1), 1.0, atol=1e-12)
    assert (ref < 0).any()  # the case where invariance is not trivial
    for perm in ([1, 0, 2, 3], [3, 2, 1, 0], [2, 3, 0, 1]):
        mus = basis.mus[perm]
        permuted = infer.Basis(mu0=mus[0], b=(mus[1:] - mus[0]).T, mus=mus)
        for projection in ("none", "clip", "euclid"):
            np.testing.assert_allclose(infer.solve_alpha(zbar, permuted, projection),
                                       infer.solve_alpha(zbar, basis, projection)[:, perm],
                                       atol=1e-10)


def test_clip_and_euclid_by_hand():
    mus = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    basis = infer.Basis(mu0=mus[0], b=(mus[1:] - mus[0]).T, mus=mus)
    zbar = _zbar_from_alpha(basis, np.array([[0.7, 0.5, -0.2], [1.3, -0.1, -0.2]]))
    np.testing.assert_allclose(infer.solve_alpha(zbar, basis, "none"),
                               [[0.7, 0.5, -0.2], [1.3, -0.1, -0.2]], atol=1e-14)
    # clip: positive parts over their sum; euclid: threshold theta = 0.1, then 0.3.
    np.testing.assert_allclose(infer.solve_alpha(zbar, basis, "clip"),
                               [[0.7 / 1.2, 0.5 / 1.2, 0.0], [1.0, 0.0, 0.0]], atol=1e-14)
    np.testing.assert_allclose(infer.solve_alpha(zbar, basis, "euclid"),
                               [[0.6, 0.4, 0.0], [1.0, 0.0, 0.0]], atol=1e-14)


def test_solve_alpha_errors():
    basis = _random_basis(np.random.default_rng(4), k=3, d=5)
    with pytest.raises(ValueError, match="projection.*'clip'"):
        infer.solve_alpha(np.zeros((2, 5)), basis, projection="softmax")
    with pytest.raises(ValueError, match="zbar"):
        infer.solve_alpha(np.zeros((2, 4)), basis)


def _brute_force_projection(v):
    """Enumerate supports S: the KKT point on S is v_S - (sum v_S - 1) / |S|; keep the
    feasible one closest to v."""
    k = v.shape[0]
    best, best_dist = None, np.inf
    for size in range(1, k + 1):
        for support in itertools.combinations(range(k), size):
            s = list(support)
            w = np.zeros(k)
            w[s] = v[s] - (v[s].sum() - 1.0) / size
            if (w >= -1e-15).all():
                dist = np.sum((w - v) ** 2)
                if dist < best_dist:
                    best, best_dist = w, dist
    return best


def test_project_simplex_matches_brute_force():
    rng = np.random.default_rng(5)
    for k in (1, 2, 3, 5, 6):
        v = rng.normal(scale=2.0, size=(30, k))
        got = infer.project_simplex(v)
        want = np.stack([_brute_force_projection(row) for row in v])
        np.testing.assert_allclose(got, want, atol=1e-12)
    # Leading batch axes and an SLSQP cross-check on one point.
    v = rng.normal(size=(2, 3, 4))
    got = infer.project_simplex(v)
    assert got.shape == v.shape
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-12)
    res = minimize(lambda w: np.sum((w - v[1, 2]) ** 2), np.full(4, 0.25), method="SLSQP",
                   bounds=[(0, None)] * 4, constraints={"type": "eq", "fun": lambda w: w.sum() - 1},
                   options={"ftol": 1e-15, "maxiter": 500})
    np.testing.assert_allclose(got[1, 2], res.x, atol=1e-6)  # SLSQP's own accuracy
    np.testing.assert_allclose(infer.project_simplex(got), got, atol=1e-14)  # idempotent


def test_clip_and_euclid_agree_inside_the_simplex():
    rng = np.random.default_rng(6)
    basis = _random_basis(rng, k=3, d=6)
    alpha = rng.dirichlet(np.ones(3), size=25)
    zbar = _zbar_from_alpha(basis, alpha)
    clip = infer.solve_alpha(zbar, basis, "clip")
    euclid = infer.solve_alpha(zbar, basis, "euclid")
    np.testing.assert_allclose(clip, euclid, atol=1e-12)
    # Outside the simplex they differ (see the hand example), so the agreement is informative.
    outside = _zbar_from_alpha(basis, np.array([[0.7, 0.5, -0.2]]))
    assert not np.allclose(infer.solve_alpha(outside, basis, "clip"),
                           infer.solve_alpha(outside, basis, "euclid"), atol=1e-3)


def test_smooth_constants_identity_and_truncation():
    rng = np.random.default_rng(7)
    const = np.tile([0.2, 0.3, 0.5], (17, 1))
    np.testing.assert_allclose(infer.smooth(const, 5), const, atol=1e-15)
    x = rng.normal(size=(12, 3))
    np.testing.assert_array_equal(infer.smooth(x, 0), x)
    ramp = np.arange(10.0)[:, None]  # [T, 1]
    out = infer.smooth(ramp, 2)[:, 0]
    assert out[0] == pytest.approx((0 + 1 + 2) / 3)  # only 3 taps exist at t = 0
    assert out[1] == pytest.approx((0 + 1 + 2 + 3) / 4)
    assert out[5] == pytest.approx(5.0)  # interior: 5 centred taps
    assert out[9] == pytest.approx((7 + 8 + 9) / 3)
    # The release's loop, literally: mean over [max(0, t - w), min(T, t + w + 1)).
    for w in (1, 5, 11, 30):
        want = np.stack([x[max(0, t - w):min(12, t + w + 1)].mean(axis=0) for t in range(12)])
        np.testing.assert_allclose(infer.smooth(x, w), want, atol=1e-14)
    with pytest.raises(ValueError, match="window"):
        infer.smooth(x, -1)
    with pytest.raises(ValueError, match="window"):
        infer.smooth(x, 1.5)


def _constrained_qp(objective, t_len, k, x0):
    cons = [{"type": "eq", "fun": (lambda a, t=t: a.reshape(t_len, k)[t].sum() - 1.0)}
            for t in range(t_len)]
    res = minimize(objective, x0.ravel(), method="SLSQP", bounds=[(0.0, None)] * (t_len * k),
                   constraints=cons, options={"ftol": 1e-15, "maxiter": 1000})
    return res.x.reshape(t_len, k)


def _outside_problem(seed, t_len, k=3, d=5):
    rng = np.random.default_rng(seed)
    basis = _random_basis(rng, k=k, d=d)
    # Rows sum to 1, about half of them with a negative entry (outside the simplex).
    alpha = 1.8 * rng.dirichlet(np.ones(k), size=t_len) - 0.8 / k
    return basis, _zbar_from_alpha(basis, alpha) + 0.2 * rng.normal(size=(t_len, d))


def test_penalized_ls_at_zero_lambda_is_the_per_t_constrained_ls():
    basis, zbar = _outside_problem(8, t_len=6)
    got = infer.penalized_ls(zbar, basis, lam=0.0)
    want = np.stack([
        _constrained_qp(lambda a, t=t: infer.penalized_objective(a[None], zbar[t:t + 1], basis,
                                                                 0.0),
                        1, 3, np.full(3, 1 / 3))[0]
        for t in range(6)])
    # SLSQP converges to ~1e-8 here; the accelerated solver to machine precision.
    np.testing.assert_allclose(got, want, atol=1e-6)
    # It is the B-metric projection, not the Euclidean projection of the raw coordinates.
    assert not np.allclose(got, infer.solve_alpha(zbar, basis, "euclid"), atol=1e-3)


def test_penalized_ls_matches_the_joint_qp():
    basis, zbar = _outside_problem(9, t_len=6)
    lam = infer.lambda_of(0.5, 6)
    got = infer.penalized_ls(zbar, basis, lam=lam)
    want = _constrained_qp(lambda a: infer.penalized_objective(a.reshape(6, 3), zbar, basis, lam),
                           6, 3, np.full((6, 3), 1 / 3))
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)
    assert (got >= 0).all()
    init = infer.solve_alpha(zbar, basis, "clip")
    assert (infer.penalized_objective(got, zbar, basis, lam)
            < infer.penalized_objective(init, zbar, basis, lam))


def test_penalized_ls_tends_to_a_constant_path():
    rng = np.random.default_rng(10)
    basis = _random_basis(rng, k=3, d=5)
    t = np.linspace(0, 1, 40)[:, None]
    alpha = np.concatenate([1 - t, t * 0.5, t * 0.5], axis=1)  # a moving path
    zbar = _zbar_from_alpha(basis, alpha)
    free = infer.penalized_ls(zbar, basis, lam=1e-3)
    assert np.abs(free - free.mean(axis=0)).max() > 0.4
    stiff = infer.penalized_ls(zbar, basis, lam=1e6)
    # Deviations are O(1 / lam) at the minimiser; 1e-3 bounds the solver's residual too.
    assert np.abs(stiff - stiff.mean(axis=0)).max() < 1e-3


def test_penalized_ls_accelerated_beats_plain_steps():
    """At T = 40 and lam = 1e3 the smooth modes contract by only ~1 - 1e-3 per plain step:
    500 plain steps stop short of the minimiser, 500 accelerated ones do not (why
    ``accelerated=True`` is the default). The reference is 20,000 accelerated steps."""
    basis, zbar = _outside_problem(11, t_len=40)
    lam = 1e3
    ref = infer.penalized_ls(zbar, basis, lam, steps=20000)
    fast = infer.penalized_ls(zbar, basis, lam)
    plain = infer.penalized_ls(zbar, basis, lam, accelerated=False)
    # Measured: 6e-6 (accelerated) against 3e-2 (plain).
    assert np.abs(fast - ref).max() < 1e-4
    assert np.abs(plain - ref).max() > 1e-2
    assert (infer.penalized_objective(fast, zbar, basis, lam)
            < infer.penalized_objective(plain, zbar, basis, lam))


def test_penalized_ls_errors_and_lambda_of():
    basis = _random_basis(np.random.default_rng(12), k=3, d=4)
    with pytest.raises(ValueError, match="lam"):
        infer.penalized_ls(np.zeros((3, 4)), basis, lam=-1.0)
    with pytest.raises(ValueError, match="steps"):
        infer.penalized_ls(np.zeros((3, 4)), basis, lam=1.0, steps=-2)
    assert infer.lambda_of(2.0, 27) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="T"):
        infer.lambda_of(1.0, 0)
