"""gp2Scale spec §Tests 1-3 and 11: Wendland coefficients and smoothness, PSD of every kernel,
compact support, patterns (kdtree == cells, symmetric CSR with diagonal, padding 0, covers
every non-zero), assembly against the dense kernel, the bump operator and the determinant
lemma, clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.gp2scale import kernels as K
from icml26_jax.gp2scale import neighbors as nb
from icml26_jax.gp2scale import sparse_cov as sc


def params_for(kind, dim, rng):
    return K.example_params(kind, dim, rng)


def test_wendland_phi33_coefficients_and_smoothness():
    d = jnp.linspace(0.0, 1.2, 13)
    # phi_{5,3} = phi_{3,3} = (1-d)^8 (32 d^3 + 25 d^2 + 8 d + 1): guards fvGP's "35" typo
    ref = jnp.where(d < 1, (1 - d) ** 8 * (32 * d ** 3 + 25 * d ** 2 + 8 * d + 1), 0.0)
    np.testing.assert_allclose(K.wendland(d), ref, rtol=1e-14, atol=1e-16)
    assert float(K.wendland(jnp.asarray(0.0))) == 1.0
    for l in (5, 8, 36):
        f = lambda x, l=l: K.wendland(x, l)  # noqa: E731
        g1, g2, g3 = jax.grad(f), jax.grad(jax.grad(f)), jax.grad(jax.grad(jax.grad(f)))
        for g in (f, g1, g2, g3):
            assert abs(float(g(jnp.asarray(1.0)))) < 1e-12
        assert float(f(jnp.asarray(0.0))) == pytest.approx(1.0, abs=1e-14)
        assert float(g1(jnp.asarray(0.0))) == pytest.approx(0.0, abs=1e-12)  # C^2 at 0 too
    assert K.wendland_order(3) == 5 and K.wendland_order(64) == 36


def _min_rel_eig(k):
    ev = np.linalg.eigvalsh(np.asarray(k))
    return ev[0] / ev[-1]


@pytest.mark.parametrize("kind", K.KINDS)
@pytest.mark.parametrize("dim", (1, 2, 3))
def test_every_kernel_is_psd(kind, dim):
    rng = np.random.default_rng(dim)
    x = jnp.asarray(rng.uniform(0, 1, (500, dim)))
    k = K.k_dense(kind, params_for(kind, dim, rng), x, x)
    np.testing.assert_allclose(k, k.T, atol=1e-14)
    assert _min_rel_eig(k) >= -1e-10


def test_generalised_wendland_psd_on_digits_and_phi33_rejected_beyond_3d():
    from sklearn.datasets import load_digits

    x = jnp.asarray(load_digits().data[:500] / 16.0)
    # support at about the median inter-digit distance (3.0): about half the pairs are cut
    p = K.WendlandParams(jnp.asarray(1.0), jnp.full((64,), 3.0), jnp.asarray(0.0))
    k = K.k_dense("wendland", p, x, x)  # l = 36 chosen from D = 64
    assert _min_rel_eig(k) >= -1e-10
    assert 0.2 < float(jnp.mean(k > 0)) < 0.8  # the support really cuts
    with pytest.raises(ValueError, match="not positive definite"):
        K.k_dense("wendland", p, x, x, order=5)


def test_compact_support_zero_beyond_and_pattern_holds_every_nonzero():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (2000, 2))
    x = x[nb.morton_order(x)]
    p = params_for("wendland", 2, rng)
    k = np.asarray(K.k_dense("wendland", p, jnp.asarray(x), jnp.asarray(x)))
    d = np.sqrt(np.sum(((x[:, None] - x[None]) / np.asarray(p.ls)) ** 2, -1))
    assert np.all(k[d >= 1.0] == 0.0)
    pat = nb.build_pattern(x, np.asarray(p.ls))
    dense_pat = np.zeros_like(k, bool)
    valid = pat.valid()
    dense_pat[pat.rows[valid], pat.cols[valid]] = True
    assert np.all(dense_pat[k != 0.0])
    # kernel 2: pairs under a shared bump are non-zero far beyond r0 (far field)
    pb = params_for("bump", 2, rng)
    kb = np.asarray(K.k_dense("bump", pb, jnp.asarray(x), jnp.asarray(x)))
    assert np.mean(kb[d >= 1.0] != 0) > 0.05


def test_pattern_csr_kdtree_equals_cells_symmetric_with_diagonal_and_padding():
    rng = np.random.default_rng(1)
    for dim, ls in ((1, 0.01), (2, [0.05, 0.08]), (3, 0.15)):
        x = rng.uniform(0, 1, (1500, dim))
        x = x[nb.morton_order(x)]
        a = nb.build_pattern(x, ls)
        b = nb.build_pattern(x, ls, method="cells")
        for f in a._fields:
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        n, nnz, cap = a.n, int(a.nnz), a.capacity
        assert cap >= nnz and cap & (cap - 1) == 0  # power-of-two bucket
        assert a.indptr[-1] == cap and a.rows.dtype == np.int32
        r, c = a.rows[:nnz].astype(np.int64), a.cols[:nnz].astype(np.int64)
        key = r * n + c
        assert np.all(np.diff(key) > 0)  # row-major, sorted, unique
        assert set(key.tolist()) == set((c * n + r).tolist())  # symmetric
        np.testing.assert_array_equal(r[a.diag], np.arange(n))
        np.testing.assert_array_equal(c[a.diag], np.arange(n))
        np.testing.assert_array_equal(np.diff(a.indptr[:-1]), np.bincount(r, minlength=n)[:-1])
        p = K.WendlandParams(jnp.asarray(1.0), jnp.broadcast_to(jnp.asarray(ls, jnp.float64),
                                                                (dim,)), jnp.asarray(0.1))
        vals = sc.pattern_values("wendland", p, jnp.asarray(x), a)
        assert np.all(np.asarray(vals)[nnz:] == 0.0)


def test_assembly_equals_dense_and_bump_operator_and_determinant_lemma():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, (400, 2))
    x = x[nb.morton_order(x)]
    xj = jnp.asarray(x)
    for kind in ("wendland", "risser"):
        p = params_for(kind, 2, rng)
        groups = ()
        if kind == "risser":
            groups = [np.flatnonzero(np.asarray(K.bump_support_mask(xj, g)))
                      for g in (p.g1, p.g2)]
        pat = nb.build_pattern(x, np.asarray(K.support(kind, p)), groups=groups)
        a = sc.assemble(kind, p, xj, pat).todense()
        ref = K.k_dense(kind, p, xj, xj) + p.noise * jnp.eye(400)
        np.testing.assert_allclose(a, ref, atol=1e-14)
        np.testing.assert_allclose(sc.to_scipy(sc.assemble(kind, p, xj, pat)).toarray(), ref,
                                   atol=1e-14)
    p = params_for("bump", 2, rng)
    pat = nb.build_pattern(x, float(p.r0))
    op = sc.assemble("bump", p, xj, pat)
    full = K.k_dense("bump", p, xj, xj) + p.noise * jnp.eye(400)
    b = jnp.asarray(rng.normal(size=(400, 5)))
    np.testing.assert_allclose(op.matmat(b), full @ b, atol=1e-10)
    np.testing.assert_allclose(op.diag(), jnp.diag(full), atol=1e-12)
    s = op.S.todense()
    g = op.G
    lemma = (jnp.linalg.slogdet(s)[1]
             + jnp.linalg.slogdet(jnp.eye(2) + g.T @ jnp.linalg.solve(s, g))[1])
    np.testing.assert_allclose(lemma, jnp.linalg.slogdet(full)[1], rtol=1e-8)


def test_grid_neighbor_count_is_exact():
    x = np.stack(np.meshgrid(np.arange(20.0), np.arange(13.0), indexing="ij"), -1).reshape(-1, 2)
    ls = np.array([3.5, 2.2])
    d2 = np.sum(((x[:, None] - x[None]) / ls) ** 2, -1)
    assert nb.grid_neighbor_count((20, 13), ls) == int(np.sum(d2 < 1.0))
    assert nb.grid_neighbor_count((5, 5), 0.5) == 25  # diagonal only


def test_clear_errors():
    x = np.random.default_rng(0).uniform(size=(50, 2))
    with pytest.raises(ValueError, match="ls_eff must be > 0"):
        nb.build_pattern(x, [0.1, 0.0])
    with pytest.raises(ValueError, match="method must be"):
        nb.build_pattern(x, 0.1, method="brute")
    with pytest.raises(ValueError, match="noise must be >= 0"):
        K.validate_params("wendland", K.WendlandParams(1.0, np.array([0.1, 0.1]), -1.0))
    with pytest.raises(ValueError, match="must be > 0"):
        K.validate_params("wendland", K.WendlandParams(1.0, np.array([0.1, -0.1]), 0.1))
    with pytest.raises(ValueError, match="kind must be one of"):
        K.k_dense("matern", None, jnp.asarray(x), jnp.asarray(x))
    small = nb.build_pattern(x, 0.05)
    with pytest.raises(ValueError, match="smaller support"):
        nb.check_covers(small, x, 0.2)
    nb.check_covers(nb.build_pattern(x, 0.2), x, 0.2)  # covering pattern passes
    p = K.WendlandParams(jnp.asarray(1.0), jnp.asarray([0.1, 0.1]), jnp.asarray(0.1))
    with pytest.raises(ValueError, match="N=49 points but the pattern is for N=50"):
        sc.pattern_values("wendland", p, jnp.asarray(x[:49]), small)
