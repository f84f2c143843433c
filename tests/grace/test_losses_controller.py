"""GRACE's losses and controller against independent numpy references, golden values and
invariances (spec §Tests 1-4)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.grace import baselines, controller, losses

# ---------------------------------------------------------------------------------------------
# Independent float64 numpy references (Zhao et al.'s definitions, written differently from
# the library: the non-target distribution by deleting the target and renormalising, CKA with
# an explicit centring matrix H).


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _ref_dkd(zs, zt, y, T, alpha, beta):
    zs, zt = np.asarray(zs, np.float64), np.asarray(zt, np.float64)
    out = []
    for i, yi in enumerate(y):
        ps, pt = _softmax(zs[i] / T), _softmax(zt[i] / T)
        bs = np.maximum([ps[yi], 1 - ps[yi]], 1e-8)
        bt = np.maximum([pt[yi], 1 - pt[yi]], 1e-8)
        tckd = np.sum(bt * np.log(bt / bs))
        qs, qt = np.delete(ps, yi), np.delete(pt, yi)
        qs, qt = qs / qs.sum(), qt / qt.sum()
        nckd = np.sum(qt * np.log(qt / qs))
        out.append((alpha * tckd + beta * nckd) * T * T)
    return np.array(out)


def _ref_cka(ft, fs):
    def centred_gram(f):
        f = np.asarray(f, np.float64)
        f = f / np.linalg.norm(f, axis=1, keepdims=True)
        h = np.eye(len(f)) - np.ones((len(f), len(f))) / len(f)
        return h @ (f @ f.T) @ h

    kt, ks = centred_gram(ft), centred_gram(fs)
    return np.sum(kt * ks) / np.sqrt(np.sum(kt * kt) * np.sum(ks * ks))


# Jitted entry points: one compilation per shape is much cheaper than eager op-by-op dispatch
# on 2 CPU cores, and it exercises the jit path the train step uses.
dkd_j = jax.jit(losses.dkd_per_token, static_argnums=(3, 4, 5))
gdkd_j = jax.jit(losses.gated_dkd, static_argnames=("gate", "T"))
rcka_j = jax.jit(losses.rcka, static_argnames="min_tokens")
gate_j = jax.jit(losses.confidence_gate)
cka_j = jax.jit(losses.cka)
gram_j = jax.jit(losses.gram)
kd_j = jax.jit(baselines.plain_kd)


def _logits(rng, shape, scale=2.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Tests #1: DKD.

# Hand-picked logits; GOLDEN_* computed once with _ref_dkd / numpy in float64 and pasted.
ZS = np.array([[1.0, -0.5, 2.0, 0.3], [0.2, 0.1, -1.0, 1.5]], np.float32)
ZT = np.array([[0.5, 0.8, 1.5, -0.2], [1.0, -0.3, 0.0, 2.0]], np.float32)
Y = np.array([2, 3], np.int32)
GOLDEN_DKD_T2 = [1.470327754895139, 0.6751763949622449]  # (TCKD + 4 NCKD) * 2^2
GOLDEN_TCKD_T1 = [3.1514164849517273e-02, 1.6513048794592183e-06]
GOLDEN_NCKD_T1 = [0.34969574803853243, 0.14173687942657393]
GOLDEN_GATE = [0.4154660507133142, 0.4811391116500169]
GOLDEN_GDKD = 1.0436311051268172  # sum g L / sum g over both tokens


def test_dkd_golden_values():
    # The defaults are T=2, alpha=1, beta=4; the golden values include the T^2 = 4 factor.
    np.testing.assert_allclose(jax.jit(losses.dkd_per_token)(ZS, ZT, Y), GOLDEN_DKD_T2, rtol=2e-6)
    # TCKD of row 1 is ~1.7e-6, a difference of nearly equal numbers in float32 (1 - p_y):
    # absolute tolerance 1e-7 there.
    np.testing.assert_allclose(dkd_j(ZS, ZT, Y, 1.0, 1.0, 0.0), GOLDEN_TCKD_T1, rtol=2e-6,
                               atol=1e-7)
    np.testing.assert_allclose(dkd_j(ZS, ZT, Y, 1.0, 0.0, 1.0), GOLDEN_NCKD_T1, rtol=2e-6)
    np.testing.assert_allclose(gate_j(ZT), GOLDEN_GATE, rtol=2e-6)
    out = gdkd_j(ZS[None], ZT[None], Y[None], np.ones((1, 2), bool))
    np.testing.assert_allclose(out.loss, GOLDEN_GDKD, rtol=2e-6)
    np.testing.assert_allclose(out.gate_mean, np.mean(GOLDEN_GATE), rtol=2e-6)


@pytest.mark.parametrize("T,alpha,beta", [(1.0, 1.0, 1.0), (2.0, 1.0, 4.0), (3.5, 0.3, 2.0)])
def test_dkd_matches_numpy_reference(T, alpha, beta):
    rng = np.random.default_rng(1)
    zs, zt = _logits(rng, (24, 11)), _logits(rng, (24, 11))
    y = rng.integers(0, 11, 24).astype(np.int32)
    got = dkd_j(zs, zt, y, T, alpha, beta)
    assert got.shape == (24,) and got.dtype == jnp.float32
    # float32 softmax/log terms carry ~1e-7 relative error each: rtol 1e-5 on O(1) losses.
    np.testing.assert_allclose(got, _ref_dkd(zs, zt, y, T, alpha, beta), rtol=1e-5, atol=1e-6)


@functools.partial(jax.jit, static_argnums=3)
def _kl_identity_gap(zs, zt, y, T):
    tckd = losses.dkd_per_token(zs, zt, y, T, 1.0, 0.0) / T**2
    nckd = losses.dkd_per_token(zs, zt, y, T, 0.0, 1.0) / T**2
    lpt, lps = jax.nn.log_softmax(zt / T), jax.nn.log_softmax(zs / T)
    kl = jnp.sum(jnp.exp(lpt) * (lpt - lps), axis=-1)
    pt_y = jnp.take_along_axis(jnp.exp(lpt), jnp.asarray(y)[:, None], axis=-1)[:, 0]
    return kl, tckd + (1.0 - pt_y) * nckd


def test_dkd_decomposes_the_kl():
    """KL(p^t || p^s) = TCKD + (1 - p^t_y) NCKD (Zhao et al. Eq. 1-5)."""
    rng = np.random.default_rng(2)
    zs, zt = _logits(rng, (64, 32)), _logits(rng, (64, 32))
    y = rng.integers(0, 32, 64).astype(np.int32)
    # float64 (the spec's 1e-6, met with a wide margin).
    with jax.enable_x64(True):
        for T in (1.0, 2.0):
            kl, dec = _kl_identity_gap(zs.astype(np.float64), zt.astype(np.float64),
                                       y.astype(np.int64), T)
            assert kl.dtype == jnp.float64
            np.testing.assert_allclose(dec, kl, rtol=0, atol=1e-10)
    # float32: KL values up to ~6 carry ~1e-6 absolute rounding, so 1e-6 is relative here.
    kl, dec = _kl_identity_gap(zs, zt, y, 1.0)
    np.testing.assert_allclose(dec, kl, rtol=1e-6, atol=1e-6)


def test_dkd_is_finite_for_extreme_logits():
    zs = np.array([[40.0, -40.0, 0.0], [0.0, 0.0, 0.0], [-1e4, 1e4, 0.0]], np.float32)
    zt = np.array([[1e4, 0.0, 0.0], [0.0, 1e4, -1e4], [0.0, 0.0, 0.0]], np.float32)
    y = np.array([0, 1, 2], np.int32)
    # Gradients w.r.t. both logits: a -inf target mask gives NaN through 0 * (-inf - -inf).
    val, grads = jax.jit(jax.value_and_grad(
        lambda s, t: jnp.sum(losses.dkd_per_token(s, t, y)), (0, 1)))(zs, zt)
    assert np.isfinite(val) and all(np.all(np.isfinite(g)) for g in grads)


def test_gated_dkd_masks_weights_and_shift_contract():
    rng = np.random.default_rng(3)
    B, S, V = 3, 6, 9
    zs, zt = _logits(rng, (B, S, V)), _logits(rng, (B, S, V))
    labels = rng.integers(0, V, (B, S)).astype(np.int32)
    mask = rng.random((B, S)) < 0.5
    mask[0, 0] = True
    # Off-mask positions carry ignore labels and NaN logits: they must not leak.
    labels[~mask] = -100
    zs_bad = zs.copy()
    zs_bad[~mask] = np.nan
    out = gdkd_j(zs_bad, zt, labels, mask)
    L = _ref_dkd(zs[mask], zt[mask], labels[mask], 2.0, 1.0, 4.0)
    p = _softmax(zt[mask].astype(np.float64))
    g = np.exp(np.sum(p * np.log(p), axis=-1) / np.log(V))
    np.testing.assert_allclose(out.loss, np.sum(g * L) / np.sum(g), rtol=1e-5)
    np.testing.assert_allclose(out.gate_mean, g.mean(), rtol=1e-5)
    ungated = gdkd_j(zs, zt, labels, mask, gate=False)
    np.testing.assert_allclose(ungated.loss, L.mean(), rtol=1e-5)
    assert ungated.gate_mean == 1.0
    assert abs(float(out.loss) - float(ungated.loss)) > 1e-3  # the gate changes the weighting
    # All-false mask: 0, not NaN, with finite gradients.
    none = np.zeros((B, S), bool)
    val, grad = jax.jit(jax.value_and_grad(
        lambda s: losses.gated_dkd(s, zt, labels, none).loss))(zs)
    assert float(val) == 0.0 and np.all(np.isfinite(grad))
    assert float(gdkd_j(zs, zt, labels, none).gate_mean) == 0.0


def test_plain_kd_matches_reference():
    rng = np.random.default_rng(4)
    zs, zt = _logits(rng, (2, 5, 7)), _logits(rng, (2, 5, 7))
    mask = np.array([[1, 0, 1, 1, 0], [0, 0, 1, 0, 1]], bool)
    ps, pt = _softmax(zs[mask] / 2.0), _softmax(zt[mask] / 2.0)
    ref = np.mean(np.sum(pt * np.log(pt / ps), axis=-1)) * 4.0
    np.testing.assert_allclose(kd_j(zs, zt, mask), ref, rtol=1e-5)
    assert float(kd_j(zs, zt, np.zeros_like(mask))) == 0.0
    assert float(kd_j(zs, zs, mask)) == pytest.approx(0.0, abs=1e-6)


def test_loss_argument_errors():
    z = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="T must be > 0"):
        losses.dkd_per_token(z, z, np.zeros(2, np.int32), T=0.0)
    with pytest.raises(ValueError, match="zs and zt"):
        losses.dkd_per_token(z, np.zeros((2, 5), np.float32), np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="labels and mask"):
        losses.gated_dkd(z[None], z[None], np.zeros((1, 3), np.int32), np.ones((1, 2), bool))
    with pytest.raises(ValueError, match="min_tokens"):
        losses.rcka(z[None], z[None], np.ones((1, 2), bool), min_tokens=0)
    with pytest.raises(ValueError, match="V"):
        losses.confidence_gate(np.zeros((2, 1), np.float32))


# ---------------------------------------------------------------------------------------------
# Tests #2: the confidence gate.


def test_gate_range_and_extremes():
    rng = np.random.default_rng(5)
    for scale in (0.01, 1.0, 5.0, 50.0):
        g = np.asarray(gate_j(_logits(rng, (200, 13), scale)))
        assert np.all(g >= math.exp(-1) - 1e-6) and np.all(g <= 1.0 + 1e-6)
    V = 40
    one_hot = np.zeros((3, V), np.float32)
    one_hot[np.arange(3), [0, 17, 39]] = 1e4  # large finite logits: p is one-hot in fp32
    np.testing.assert_allclose(gate_j(one_hot), 1.0, rtol=1e-6)
    np.testing.assert_allclose(gate_j(np.zeros((3, V), np.float32)), math.exp(-1), rtol=1e-6)
    # Monotone in confidence: a sharper teacher gets a larger gate.
    z = _logits(rng, (1, V))
    gates = [float(gate_j(np.float32(c) * z)[0]) for c in (0.5, 1.0, 2.0, 4.0)]
    assert all(a < b for a, b in zip(gates, gates[1:]))


def test_gate_is_taken_at_temperature_one():
    rng = np.random.default_rng(6)
    zs, zt = _logits(rng, (1, 8, 10)), _logits(rng, (1, 8, 10))
    labels = rng.integers(0, 10, (1, 8)).astype(np.int32)
    out = gdkd_j(zs, zt, labels, np.ones((1, 8), bool), T=2.0)
    g1 = float(jnp.mean(gate_j(zt[0])))
    g2 = float(jnp.mean(gate_j(zt[0] / np.float32(2.0))))
    assert abs(g1 - g2) > 1e-2
    np.testing.assert_allclose(out.gate_mean, g1, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Tests #3: CKA and RCKA.


def _orthogonal(rng, d):
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


def test_cka_identity_reference_and_invariances():
    rng = np.random.default_rng(7)
    n, d = 32, 6
    ft = rng.standard_normal((n, d)).astype(np.float32)
    fs = (ft @ rng.standard_normal((d, d)) + 0.8 * rng.standard_normal((n, d))).astype(
        np.float32)
    kt = gram_j(ft)
    np.testing.assert_allclose(np.diag(kt), 1.0, rtol=1e-6)  # rows are l2-normalised
    np.testing.assert_allclose(cka_j(kt, kt), 1.0, rtol=1e-6)
    base = float(cka_j(kt, gram_j(fs)))
    assert 0.2 < base < 0.95
    np.testing.assert_allclose(base, _ref_cka(ft, fs), rtol=1e-5)
    # Isotropic scaling and orthogonal rotation of either side leave CKA unchanged ...
    moved = 3.7 * fs @ _orthogonal(rng, d)
    np.testing.assert_allclose(cka_j(kt, gram_j(moved)), base, rtol=1e-5)
    # ... also for plain linear kernels (without row normalisation), where the scale enters.
    lin = lambda f: jnp.asarray(f @ f.T)  # noqa: E731
    np.testing.assert_allclose(cka_j(lin(ft), lin(moved)), cka_j(lin(ft), lin(fs)),
                               rtol=1e-5)
    # A non-isotropic scaling is not an invariance: the check above could fail.
    aniso = fs * np.array([10.0, 1, 1, 1, 1, 0.1], np.float32)
    assert abs(float(cka_j(kt, gram_j(aniso))) - base) > 1e-2
    # centre(): zero row and column sums.
    kc = np.asarray(jax.jit(losses.center)(gram_j(fs)))
    np.testing.assert_allclose(kc.sum(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(kc.sum(1), 0.0, atol=1e-5)


def test_cka_is_small_for_independent_features():
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((2, 256, 4)).astype(np.float32)
    assert float(cka_j(gram_j(a), gram_j(b))) < 0.1
    # and large for related ones (the < 0.1 is not vacuous).
    c = a @ _orthogonal(rng, 4) + 0.1 * b
    assert float(cka_j(gram_j(a), gram_j(c))) > 0.9


def _rcka_batch(rng):
    B, S, ds, dt = 5, 14, 5, 7
    hs = rng.standard_normal((B, S, ds)).astype(np.float32)
    ht = rng.standard_normal((B, S, dt)).astype(np.float32)
    # Make the student partly aligned with the teacher, so that CKA is far from 0 and 1.
    hs[..., :5] += 1.5 * ht[..., :5]
    vis = np.zeros((B, S), bool)
    vis[0, [1, 2, 4, 7, 8, 9, 12, 13]] = True  # n = 8, scattered
    vis[1, 3:8] = True  # n = 5
    vis[2, [0, 5, 9]] = True  # n = 3 < min_tokens: skipped
    vis[3, 2:9] = True  # n = 7, student collapsed onto one direction: skipped
    hs[3, 2:9] = np.outer(np.linspace(0.5, 2.0, 7), hs[3, 2])
    vis[4, 6:12] = True  # n = 6, teacher collapsed: skipped
    ht[4, 6:12] = ht[4, 6]
    return hs, ht, vis


def test_rcka_masking_equals_slicing_and_skips_degenerate_images():
    rng = np.random.default_rng(9)
    hs, ht, vis = _rcka_batch(rng)
    ckas = [_ref_cka(ht[b, vis[b]], hs[b, vis[b]]) for b in (0, 1)]
    out = rcka_j(hs, ht, vis)
    np.testing.assert_allclose(out.loss, np.mean([1 - c for c in ckas]), rtol=1e-5)
    np.testing.assert_allclose(out.mean_cka, np.mean(ckas), rtol=1e-5)
    # Row by row, against the library's own cka on the sliced visual tokens.
    for b in (0, 1):
        row = rcka_j(hs[b:b + 1], ht[b:b + 1], vis[b:b + 1])
        sliced = cka_j(gram_j(ht[b, vis[b]]), gram_j(hs[b, vis[b]]))
        np.testing.assert_allclose(row.mean_cka, sliced, rtol=1e-5)
    # The non-visual tokens do not matter.
    hs2 = np.where(vis[..., None], hs, 100.0 * rng.standard_normal(hs.shape)).astype(np.float32)
    np.testing.assert_allclose(rcka_j(hs2, ht, vis).loss, out.loss, rtol=1e-6)
    # min_tokens is honoured: with 3 allowed, row 2 joins the mean.
    ckas3 = ckas + [_ref_cka(ht[2, vis[2]], hs[2, vis[2]])]
    np.testing.assert_allclose(rcka_j(hs, ht, vis, min_tokens=3).mean_cka,
                               np.mean(ckas3), rtol=1e-5)
    # Only skipped images: (0, 0) with finite gradients for both models.
    bad = vis.copy()
    bad[:2] = False
    loss_grad = jax.jit(jax.value_and_grad(lambda a, b, m: losses.rcka(a, b, m).loss, (0, 1)))
    val, grads = loss_grad(hs, ht, bad)
    assert float(val) == 0.0 and float(rcka_j(hs, ht, bad).mean_cka) == 0.0
    assert all(np.all(np.isfinite(g)) for g in grads)
    g = loss_grad(hs, ht, vis)[1][0]
    assert np.all(np.isfinite(g)) and np.abs(g[0]).sum() > 0
    assert np.all(np.asarray(g)[~vis] == 0.0) and np.all(np.asarray(g)[2:] == 0.0)


# ---------------------------------------------------------------------------------------------
# Tests #4: the controller.


def _ref_controller(values, tau, eta, beta0, lo, hi, d=0.99):
    """The official controller (a Python loop), skipping non-finite values."""
    beta, ema, out = beta0, None, []
    for v in values:
        if np.isfinite(v):
            ema = v if ema is None else d * ema + (1 - d) * v
            beta = min(hi, max(lo, beta + eta * (ema - tau)))
        out.append((beta, ema))
    return out


def _run(cfg, values, jit):
    upd = jax.jit(controller.ib_update, static_argnums=3) if jit else controller.ib_update
    st, trace = controller.ib_init(cfg), []
    for step, v in enumerate(values):
        st = upd(st, jnp.float32(v), step, cfg)
        trace.append(st)
    return trace


def test_controller_ema_and_dual_ascent_match_reference():
    cfg = controller.IBConfig(tau=1.0, eta=0.05, beta_init=0.5, beta_min=0.1, beta_max=1.0)
    st = controller.ib_update(controller.ib_init(cfg), jnp.float32(3.0), 0, cfg)
    assert float(st.ema) == 3.0 and int(st.count) == 1  # the EMA starts at the first value
    np.testing.assert_allclose(st.beta, 0.5 + 0.05 * (3.0 - 1.0), rtol=1e-6)
    st = controller.ib_update(st, jnp.float32(5.0), 1, cfg)
    np.testing.assert_allclose(st.ema, 0.99 * 3.0 + 0.01 * 5.0, rtol=1e-6)

    rng = np.random.default_rng(10)
    values = np.concatenate([np.full(60, 3.0), np.zeros(400), 1.0 + rng.random(60)])
    values[[5, 100, 300]] = [np.nan, np.inf, -np.inf]  # skipped steps
    trace = _run(cfg, values, jit=True)
    ref = _ref_controller(values, 1.0, 0.05, 0.5, 0.1, 1.0)
    np.testing.assert_allclose([float(s.beta) for s in trace], [r[0] for r in ref], atol=1e-5)
    np.testing.assert_allclose([float(s.ema) for s in trace], [r[1] for r in ref], rtol=1e-5)
    assert int(trace[-1].count) == len(values) - 3
    assert all(np.isfinite(float(x)) for s in trace for x in s)


def test_beta_rises_iff_ema_above_tau_and_is_clamped():
    cfg = controller.IBConfig(tau=1.0, eta=0.05, beta_init=0.5, beta_min=0.1, beta_max=1.0)
    values = np.concatenate([np.full(60, 3.0), np.zeros(400)])
    trace = _run(cfg, values, jit=False)
    beta = np.array([0.5] + [float(s.beta) for s in trace])
    ema = np.array([float(s.ema) for s in trace])
    diff = np.diff(beta)
    lo = float(np.float32(0.1))  # beta is float32: its lower bound is f32(0.1) > 0.1
    inside = (beta > lo) & (beta < 1.0)
    free = inside[1:] & inside[:-1]
    assert free.sum() > 20
    # While L_bar is already 0 the EMA is still above tau for a while: beta follows the EMA.
    assert np.any((values > 1.0) != (ema > 1.0))
    assert np.all(np.sign(diff[free]) == np.sign(ema[free] - 1.0))
    assert beta.min() == lo and beta.max() == 1.0  # clamped exactly, both bounds reached
    assert beta[-1] == lo


def test_controller_same_under_jit_and_eager():
    for cfg in (controller.IBConfig(tau=0.7, qat_steps=80),
                controller.IBConfig(tau="auto", auto_steps=5, qat_steps=40)):
        values = 0.5 + np.random.default_rng(11).random(40)
        values[7] = np.nan
        a, b = _run(cfg, values, jit=True), _run(cfg, values, jit=False)
        for sa, sb in zip(a, b):
            for xa, xb in zip(sa, sb):
                assert xa.dtype == xb.dtype
                np.testing.assert_allclose(xa, xb, rtol=1e-6)


def test_auto_tau_is_set_at_step_50_and_beta_held_before():
    cfg = controller.IBConfig(qat_steps=200)  # tau='auto', eta by the rule
    assert cfg.tau == "auto" and cfg.auto_steps == 50 and cfg.auto_frac == 0.5
    values = 2.0 + np.sin(np.arange(120, dtype=np.float64))
    trace = _run(cfg, values, jit=True)
    for s in trace[:50]:
        assert float(s.beta) == 0.5 and float(s.tau) == 0.0
    s50 = trace[50]
    np.testing.assert_allclose(s50.tau, 0.5 * float(s50.ema), rtol=1e-6)
    eta = (1.0 - 0.1) / (0.25 * 200 * float(s50.tau))
    np.testing.assert_allclose(s50.eta, eta, rtol=1e-6)
    np.testing.assert_allclose(s50.beta, 0.5 + eta * (float(s50.ema) - float(s50.tau)),
                               rtol=1e-5)
    assert all(float(s.tau) == float(s50.tau) for s in trace[50:])  # set once
    assert float(trace[60].beta) > 0.5  # the dual ascent runs after tau is set
    # A non-finite value at step 50 defers tau to the next finite step.
    values[50] = np.nan
    trace = _run(cfg, values, jit=False)
    assert float(trace[50].tau) == 0.0 and float(trace[50].beta) == 0.5
    np.testing.assert_allclose(trace[51].tau, 0.5 * float(trace[51].ema), rtol=1e-6)


def test_numeric_tau_eta_rule_and_skipped_first_value():
    cfg = controller.IBConfig(tau=2.0, qat_steps=100)
    st = controller.ib_init(cfg)
    np.testing.assert_allclose(st.eta, 0.9 / (0.25 * 100 * 2.0), rtol=1e-6)
    st = controller.ib_update(st, jnp.float32(np.nan), 0, cfg)
    assert int(st.count) == 0 and float(st.beta) == 0.5
    st = controller.ib_update(st, jnp.float32(4.0), 1, cfg)
    assert float(st.ema) == 4.0  # the EMA starts at the first *finite* value
    np.testing.assert_allclose(st.beta, 0.5 + 0.9 / 50.0 * 2.0, rtol=1e-6)


@pytest.mark.parametrize("kwargs,match", [
    (dict(tau=0.0, eta=0.1), "tau"),
    (dict(tau="fixed", eta=0.1), "tau"),
    (dict(tau=1.0, eta=0.0), "eta"),
    (dict(tau=1.0, eta=-1.0), "eta"),
    (dict(tau=1.0, eta=0.1, beta_min=1.0, beta_max=0.5, beta_init=0.7), "beta_min < beta_max"),
    (dict(tau=1.0, eta=0.1, beta_init=2.0), "beta_init"),
    (dict(tau=1.0, eta=0.1, ema_decay=1.0), "ema_decay"),
    (dict(tau="auto"), "qat_steps"),
    (dict(tau="auto", qat_steps=0), "qat_steps"),
    (dict(tau="auto", qat_steps=10, auto_steps=-1), "auto_steps"),
])
def test_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        controller.IBConfig(**kwargs)
