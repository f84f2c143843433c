"""DGPs, splits, perturbed oracles, the CSV path, and the stage-1 / DR fits (stacked ==
per replica, sharded == unsharded, cross-fitting out of fold)."""

import jax
import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import testing
from icml26_jax.rank_learner import data, fitting, nuisance

FAST = fitting.FitConfig(lr=5e-3, batch=32, epochs=3, patience=2)


def test_synthetic_dgp_structure():
    d = data.synthetic(np.random.default_rng(0), n=5000)
    assert d.x.shape == (5000, 10) and d.x.dtype == np.float32
    z = data.synthetic_parts(d.x.astype(np.float64))
    np.testing.assert_allclose(d.tau, z["s"] + 0.5 * np.tanh(z["s"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.mu1 - d.mu0, d.tau, atol=1e-5)
    assert 0.2 <= d.pi.min() and d.pi.max() <= 0.8
    # Confounding: the effect driver also drives treatment.
    assert np.corrcoef(d.tau, d.pi)[0, 1] > 0.5
    resid = d.y - np.where(d.t > 0, d.mu1, d.mu0)
    assert abs(resid.std() - 0.6) < 0.03
    again = data.synthetic(np.random.default_rng(0), n=5000)
    np.testing.assert_array_equal(d.y, again.y)


@pytest.mark.parametrize("name,d", [("randhie", 10), ("fair", 8)])
def test_semisynthetic_on_bundled_covariates(name, d):
    out = data.semisynthetic(name, np.random.default_rng(1), n=3000)
    assert out.x.shape == (3000, d)
    assert 0.1 <= out.pi.min() and out.pi.max() <= 0.8
    assert np.isfinite(out.y).all() and out.tau.std() > 0.3
    with pytest.raises(ValueError, match="semi-synthetic"):
        data.semisynthetic("cps", np.random.default_rng(0))


def test_make_splits_disjoint_and_sized():
    sp = data.make_splits(np.random.default_rng(2), 11000)
    parts = [np.asarray(p) for p in sp]
    assert [len(p) for p in parts] == [800, 200, 800, 200, 1000]
    allrows = np.concatenate(parts)
    assert len(np.unique(allrows)) == len(allrows)
    np.testing.assert_array_equal(sp.test, np.arange(10000, 11000))
    with pytest.raises(ValueError, match="exceeds"):
        data.make_splits(np.random.default_rng(0), 2500)
    with pytest.raises(ValueError, match="val_frac"):
        data.make_splits(np.random.default_rng(0), 11000, val_frac=1.0)


def test_perturb_oracle():
    d = data.synthetic(np.random.default_rng(3), n=500)
    exact = data.perturb_oracle(d, 0.0, "mu")
    np.testing.assert_allclose(exact.mu1, d.mu1, atol=1e-6)
    np.testing.assert_allclose(exact.pi, d.pi, atol=1e-6)
    p = data.perturb_oracle(d, 1.0, "mu")
    b = data.perturbation_direction(d.x.astype(np.float64))
    np.testing.assert_allclose((p.mu1 - p.mu0) - d.tau, 1.5 * b, atol=1e-4)
    both = data.perturb_oracle(d, 2.0, "both")
    assert both.pi.min() >= 0.02 and both.pi.max() <= 0.98
    assert np.abs(both.pi - d.pi).max() > 0.1
    with pytest.raises(ValueError, match="perturb mode"):
        data.perturb_oracle(d, 1.0, "pi")


def test_load_csv(tmp_path):
    path = tmp_path / "obs.csv"
    path.write_text("a,b,treat,out\n1,2,0,0.5\n3,5,1,1.5\n2,2,1,0.0\n")
    d = data.load_csv(str(path), ["a", "b"], "treat", "out")
    assert d.x.shape == (3, 2) and np.allclose(d.x.mean(0), 0, atol=1e-6)
    np.testing.assert_array_equal(d.t, [0, 1, 1])
    assert np.isnan(d.tau).all()
    with pytest.raises(ValueError, match="no column"):
        data.load_csv(str(path), ["a", "zzz"], "treat", "out")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,treat,out\n1,2,0\n")
    with pytest.raises(ValueError, match="only 0 and 1"):
        data.load_csv(str(bad), ["a"], "treat", "out")


def _problem(R=4, n=96, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(R, n, 3)).astype(np.float32)
    y = (x[..., 0] - 0.5 * x[..., 1] ** 2).astype(np.float32)
    w = np.zeros((R, n), bool)
    w[:, : int(0.8 * n)] = True
    # Replicas of different sizes: the last one trains on half its rows.
    w[-1, n // 2:] = False
    return x, y, w, ~np.pad(w[:, : int(0.8 * n)], ((0, 0), (0, n - int(0.8 * n))),
                            constant_values=False)


def test_fit_stack_equals_per_replica_and_learns():
    x, y, w, wv = _problem()
    kind = np.zeros(4)
    g, p, h = mesh_lib.to_host(nuisance.fit_stack([0, 1, 2, 3], x, y, w, wv, kind, FAST))
    for r in (0, 3):
        _, p1, h1 = mesh_lib.to_host(nuisance.fit_stack(
            [r], x[r:r + 1], y[r:r + 1], w[r:r + 1], wv[r:r + 1], kind[:1], FAST))
        testing.tree_allclose(jax.tree.map(lambda a: a[r], p), jax.tree.map(lambda a: a[0], p1),
                              rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(h.val)[r], np.asarray(h1.val)[0], rtol=1e-5)
    val = np.asarray(h.val)
    assert (val[:, -1] > val[:, 0]).all()  # minus the validation loss improves


def test_fit_stack_sharded_equals_unsharded():
    # 5 replicas, one per device on 5 of the 8 devices (runs_mesh(5)), against one device.
    x, y, w, wv = _problem(R=5)
    kind = np.array([0, 1, 0, 1, 1])
    yb = np.where(kind[:, None] == 1, (y > 0).astype(np.float32), y)
    seeds = [5, 6, 7, 8, 9]
    one = mesh_lib.make_mesh((1,), (mesh_lib.RUNS,))
    g, p1, h1 = nuisance.fit_stack(seeds, x, yb, w, wv, kind, FAST, mesh=one)
    _, p8, h8 = nuisance.fit_stack(seeds, x, yb, w, wv, kind, FAST)
    leaf = jax.tree.leaves(p8)[0]
    assert leaf.shape[0] == 5 and len(leaf.sharding.device_set) == 5
    assert h8.epochs.shape == (5,) and isinstance(h8.epochs, np.ndarray)
    testing.tree_allclose(mesh_lib.to_host(p1, 5), mesh_lib.to_host(p8, 5), rtol=1e-5,
                          atol=1e-6)
    np.testing.assert_array_equal(h1.epochs, h8.epochs)
    # Predictions from the padded device params equal those from host params.
    np.testing.assert_allclose(nuisance.predict_stack(g, p8, x),
                               nuisance.predict_stack(g, mesh_lib.to_host(p1, 5), x, mesh=one),
                               rtol=1e-5, atol=1e-6)


def test_crossfit_is_out_of_fold():
    rng = np.random.default_rng(4)
    n, k = 120, 3
    x = rng.normal(size=(n, 4)).astype(np.float32)
    t = (rng.random(n) < 0.5).astype(np.float32)
    y = (x[:, 0] + t).astype(np.float32)
    a, _ = nuisance.crossfit(0, x, t, y, k, FAST)
    fold = np.random.default_rng(0).permutation(np.arange(n) % k)
    y2 = y.copy()
    y2[fold == 0] += 10.0  # only the models that trained on fold 0 see this
    b, _ = nuisance.crossfit(0, x, t, y2, k, FAST)
    np.testing.assert_allclose(a.mu1[fold == 0], b.mu1[fold == 0], rtol=1e-5, atol=1e-5)
    # ... while the other folds' predictions come from models trained on fold 0.
    assert np.abs(a.mu1[fold != 0] - b.mu1[fold != 0]).mean() > 0.01
    with pytest.raises(ValueError, match="k >= 2"):
        nuisance.crossfit(0, x, t, y, 1, FAST)


def test_fit_config_errors():
    with pytest.raises(ValueError, match="lr"):
        fitting.FitConfig(lr=0.0).validate()
    with pytest.raises(ValueError, match="patience"):
        fitting.FitConfig(patience=0).validate()
