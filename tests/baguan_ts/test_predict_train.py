"""Baguan-TS forecaster, training batches, pretraining stages and config checks (spec §Tests:
shapes, no leakage, anti-symmetry, resuming, determinism, errors).

A tiny untrained model is enough for every property here: none depends on the weights.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.baguan_ts import batches, configs, model, predict, prior, train
from icml26_jax.core import mesh as mesh_lib

ICFG = predict.InferenceConfig(M=32, K=4, period=3, mF=2, context_len=64)


def _tiny_config():
    c = configs.get_config("smoke")
    c.model.update(d=16, heads=2, layers=1, ffn=32, bins=32, head_hidden=32)
    c.M, c.K, c.period, c.mF, c.context_len = 32, 4, 3, 2, 64
    c.train.update(trunk_steps=4, branch_steps=0, batch=2, chunk=2, warmup=1,
                   horizons=(8,), frac_2d=0.0)  # one compiled step
    c.bank_size = 8
    return c


@pytest.fixture(scope="module")
def tiny():
    m = model.BaguanTS(model.ModelConfig(d=16, heads=2, layers=1, ffn=32, bins=32,
                                         head_hidden=32), rngs=nnx.Rngs(0))
    return nnx.split(m, nnx.Param)


def _series(n=90, F=2, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n + 8)
    X = rng.normal(size=(n + 8, F)).astype(np.float32)
    y = (np.sin(2 * np.pi * t / 6) + 0.5 * X[:, 0] + 0.1 * rng.normal(size=n + 8)).astype(
        np.float32)
    return y[:n], X[:n], X[n:]


def test_series_sharded_over_every_device_equal_one_device(tiny):
    # 5 series on the 8-device DATA mesh: padded to 8, one series per device, the padding
    # dropped; the same forecasts as the single-device call (float32 rounding of other
    # batch shapes aside)
    g, p = tiny
    series = [_series(seed=s) for s in range(5)]
    ref = predict.forecast_many(g, p, series, 8, ICFG, jax.random.key(0), m=6)
    mesh = mesh_lib.data_mesh()
    assert mesh.devices.size == jax.device_count() == 8
    got = predict.forecast_many(g, p, series, 8, ICFG, jax.random.key(0), m=6, mesh=mesh)
    for a, b in zip(got, ref):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["3d", "2d"])
def test_forecast_shapes_sorted_quantiles_and_determinism(tiny, mode):
    g, p = tiny
    cfg = dataclasses.replace(ICFG, mode=mode)
    series = [_series(seed=s) for s in range(3)]
    mean, q = predict.forecast_many(g, p, series, 8, cfg, jax.random.key(0), m=6)
    assert mean.shape == (3, 8) and q.shape == (3, 8, 9)
    assert np.all(np.isfinite(mean)) and np.all(np.diff(q, axis=-1) >= 0)
    mean2, q2 = predict.forecast_many(g, p, series, 8, cfg, jax.random.key(0), m=6)
    np.testing.assert_array_equal(mean, mean2)
    np.testing.assert_array_equal(q, q2)
    # The single-series API gives the first row of the batched one (same key split).
    y, X, Xs = series[0]
    m1, q1 = predict.forecast(g, p, X, y, Xs, cfg, jax.random.key(0), m=6)
    assert m1.shape == (8,) and q1.shape == (8, 9)


def test_antisymmetric_ensemble_is_odd(tiny):
    """ensemble(-y) = -ensemble(y) with shared masks; quantiles mirror (Q_q <-> -Q_{1-q})."""
    g, p = tiny
    y, X, Xs = _series()
    key = jax.random.key(3)
    m_pos, q_pos = predict.forecast(g, p, X, y, Xs, ICFG, key)
    m_neg, q_neg = predict.forecast(g, p, X, -y, Xs, ICFG, key)
    scale = np.abs(y).max()
    np.testing.assert_allclose(m_neg, -m_pos, atol=1e-5 * scale)
    np.testing.assert_allclose(q_neg, -q_pos[..., ::-1], atol=1e-5 * scale)


def test_no_leakage_from_the_future(tiny):
    """Outputs are bit-identical whatever sits in y after the origin."""
    g, p = tiny
    y, X, Xs = _series()
    yp, Xp, fm, t0 = predict.prepare(y, X, Xs, 8, 64)
    m = nnx.merge(g, p)
    borders = predict.losses.bar_borders(32)
    fn = jax.jit(lambda yy: predict.forecast_normalised(m, yy, jnp.asarray(Xp), fm, t0, 64, 8,
                                                        6, ICFG, jax.random.key(0), borders))
    a = fn(jnp.asarray(yp))
    junk = yp.copy()
    junk[64:] = 1e6
    b = fn(jnp.asarray(junk))
    for u, v in zip(a, b):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_k0_ignores_support_content(tiny):
    """With K = 0 neither the model nor the normalisation sees the retrieved windows."""
    g, p = tiny
    y, X, Xs = _series()
    cfg = dataclasses.replace(ICFG, K=0)
    a = predict.forecast(g, p, X, y, Xs, cfg, jax.random.key(0))
    y2 = y.copy()
    y2[:60] = y2[:60] * 3.0 + 1.0  # every support window changes, the query history not
    b = predict.forecast(g, p, X, y2, Xs, cfg, jax.random.key(0))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = predict.forecast(g, p, X, y2, Xs, ICFG, jax.random.key(0))  # K = 4 does see them
    assert np.abs(c[0] - a[0]).max() > 1e-6


def test_make_batch_layout_labels_and_keff():
    bank = prior.make_bank(0, 8)
    dev = train.bank_to_device(bank)
    cfg = batches.BatchConfig(batch=16, M=32, K=4, period=3, context_len=64, p_k0=0.25)
    fn = jax.jit(batches.make_batch, static_argnames=("cfg", "H"))
    b = fn(jax.random.key(1), dev, cfg=cfg, H=8)
    assert b.feat.shape == (16, 5, 32, 3) and b.targ.shape == (16, 5, 32, 1)
    assert b.labels.shape == (16, 8) and b.support_mask.shape == (16, 5)
    assert not np.any(np.asarray(b.support_mask[:, -1]))  # the query is never a support
    # The query's forecast slots are masked; the labels are finite and clipped.
    assert np.all(np.isnan(np.asarray(b.targ[:, -1, -8:, 0])))
    assert np.all(np.abs(np.asarray(b.labels)) <= predict.CLIP)
    keff = np.asarray(b.support_mask[:, :-1]).sum(1)
    assert keff.min() >= 0 and keff.max() <= 4
    # Supports are a prefix of the retrieval order (the best K_eff are kept).
    sm = np.asarray(b.support_mask[:, :-1])
    assert np.all(np.diff(sm.astype(int), axis=1) <= 0)
    b2 = fn(jax.random.key(1), dev, cfg=cfg, H=8)  # same key, same batch
    np.testing.assert_array_equal(np.asarray(b.labels), np.asarray(b2.labels))
    b3 = fn(jax.random.key(2), dev, cfg=cfg, H=8)
    assert np.abs(np.asarray(b3.labels) - np.asarray(b.labels)).max() > 0


def test_co_inject_copies_the_query_future_into_a_support():
    bank = prior.make_bank(1, 8)
    dev = train.bank_to_device(bank)
    cfg = batches.BatchConfig(batch=32, M=32, K=4, period=3, context_len=64, p_k0=0.0,
                              drop_p=0.0, co_inject_p=1.0)
    make = jax.jit(batches.make_batch, static_argnums=(2, 3))
    b = make(jax.random.key(2), dev, cfg, 8)
    # An active support holds the query window shifted back by s in {0, 1, 2} steps: its
    # positions M - H + s + i are the (jittered, noisy) future labels i.
    targ = np.asarray(b.targ[:, :-1, :, 0])  # [B, K, M]
    lab = np.asarray(b.labels)  # [B, 8]
    act = np.asarray(b.support_mask[:, :-1])
    best = np.zeros(lab.shape[0])
    for i in range(lab.shape[0]):
        for k in np.flatnonzero(act[i]):
            for sh in range(3):
                u, v = targ[i, k, 32 - 8 + sh:], lab[i, :8 - sh]
                if np.std(u) > 0 and np.std(v) > 0:
                    best[i] = max(best[i], np.corrcoef(u, v)[0, 1])
    assert np.mean(best > 0.9) > 0.8, best
    # Without injection no support tracks the future that closely as often.
    b0 = make(jax.random.key(2), dev, dataclasses.replace(cfg, co_inject_p=0.0), 8)
    assert not np.allclose(np.asarray(b0.targ), np.asarray(b.targ))


def test_pretrain_resumes_to_the_same_parameters(tmp_path, monkeypatch):
    """Killed after the first chunk and resumed == uninterrupted (stream = fold_in(key, t))."""
    c = _tiny_config()
    bank = prior.make_bank(0, 8, train.prior_config(c))
    full = train.pretrain(c, str(tmp_path / "a"), bank=bank)
    step, calls = train.train_step, []

    def dies_at_third_step(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed")
        return step(*args, **kw)

    monkeypatch.setattr(train, "train_step", dies_at_third_step)
    with pytest.raises(KeyboardInterrupt):
        train.pretrain(c, str(tmp_path / "b"), bank=bank)
    monkeypatch.setattr(train, "train_step", step)
    resumed = train.pretrain(c, str(tmp_path / "b"), bank=bank)  # restarts at step 2
    for u, v in zip(jax.tree.leaves(full["params"]["trunk"]),
                    jax.tree.leaves(resumed["params"]["trunk"])):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    np.testing.assert_array_equal(resumed["loss"]["trunk"], full["loss"]["trunk"])
    assert np.all(np.isfinite(full["loss"]["trunk"]))


def test_saved_model_reloads_and_forecasts_identically(tmp_path, tiny):
    c = _tiny_config()
    g, p = tiny
    train.save_model(str(tmp_path), g, p, c)
    g2, p2, cfg = train.load_model(str(tmp_path))
    assert cfg.d == 16 and cfg.bins == 32
    for u, v in zip(jax.tree.leaves(p), jax.tree.leaves(p2)):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))  # bit-exact round trip
    y, X, Xs = _series()
    a = predict.forecast(g, p, X, y, Xs, ICFG, jax.random.key(0))
    b = predict.forecast(g2, p2, X, y, Xs, ICFG, jax.random.key(0))
    # A new graphdef compiles a new program: equal up to float reassociation.
    np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("field, value, match", [
    ("rag", "knn", "rag must be one of"),
    ("mode", "4d", "mode must be one of"),
    ("loss", "mse", "loss must be one of"),
    ("co_inject_p", 1.5, r"co_inject_p must be in \[0, 1\]"),
    ("K", -1, "K must be an int >= 0"),
    ("real_tasks", ("nile", "mars"), "real_tasks must be a subset"),
])
def test_bad_config_values_raise(field, value, match):
    c = configs.get_config("smoke")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        train.normalise_config(c)
        train.validate_config(c)


def test_bad_forecast_inputs_raise(tiny):
    g, p = tiny
    y, X, Xs = _series()
    with pytest.raises(ValueError, match="fewer than the window M=32"):
        predict.forecast(g, p, X[:20], y[:20], Xs, ICFG, jax.random.key(0))
    with pytest.raises(ValueError, match="X_train must be"):
        predict.forecast(g, p, X[:, :1], y, Xs, ICFG, jax.random.key(0))
    with pytest.raises(ValueError, match="at most 3 covariates"):
        z = np.zeros((90, 4), np.float32)
        predict.forecast(g, p, z, y, np.zeros((8, 4), np.float32), ICFG, jax.random.key(0))
    with pytest.raises(ValueError, match="rag must be one of"):
        predict.InferenceConfig(rag="nearest")
