"""Frequency tables against the spec's golden values; AdaRoPE at init == RoPE / YaRN."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.adarope import baselines, rope
from icml26_jax.lm.transformer import Rope

D, P, B0, L0, S = 16, 8, 100.0, 64, 4.0
GOLDEN_THETA = [1, .56234, .31623, .17783, .1, .05623, .03162, .01778]
GOLDEN_YARN_LAM = [2.1176, 2.7443, 3.2923, 3.7088, 3.9928, 4, 4, 4]


def test_rope_frequencies_golden():
    theta = rope.rope_frequencies(D, B0)
    np.testing.assert_allclose(theta, GOLDEN_THETA, atol=1e-4)
    unseen = 2 * math.pi / theta > L0
    assert list(np.nonzero(unseen)[0]) == [5, 6, 7]
    # LLaMA-2 (b = 1e4, D = 128, L = 4096) has 18 of 64 unseen pairs; b = 1e4 here: 5 of 8.
    assert (2 * math.pi / rope.rope_frequencies(128, 1e4) > 4096).sum() == 18
    assert (2 * math.pi / rope.rope_frequencies(D, 1e4) > L0).sum() == 5


def test_yarn_golden():
    lam, mult = rope.yarn_factors(rope.rope_frequencies(D, B0), L0, S)
    np.testing.assert_allclose(lam, GOLDEN_YARN_LAM, atol=1e-4)
    np.testing.assert_allclose(mult, 1.2965, atol=1e-4)
    np.testing.assert_allclose(math.log(mult), 0.2597, atol=1e-4)
    # Hand-computed check of pair 0: r = 64 / 2 pi, gamma = (r - 1) / 31.
    r = L0 / (2 * math.pi)
    g = (r - 1) / 31
    np.testing.assert_allclose(lam[0], 1 / ((1 - g) / S + g), rtol=1e-12)


def test_ntk_partial_prope_tables():
    ntk = rope.ntk_frequencies(D, B0, S)
    base = B0 * S ** (D / (D - 2))
    np.testing.assert_allclose(base, 487.605, atol=1e-3)
    np.testing.assert_allclose(ntk, base ** (-np.arange(P) / P), rtol=1e-12)
    part = rope.partial_frequencies(D, B0, 0.25)
    np.testing.assert_allclose(part[:2], [1.0, 0.1], rtol=1e-12)
    assert (part[2:] == 0).all()
    pr = rope.prope_frequencies(D, B0, 0.75)
    np.testing.assert_array_equal(pr[:6], rope.rope_frequencies(D, B0)[:6])
    assert (pr[6:] == 0).all()
    assert (rope.prope_frequencies(D, B0, 0.25)[2:] == 0).all()
    # p = 1 is RoPE exactly, for both; NoPE is all zeros.
    np.testing.assert_array_equal(rope.partial_frequencies(D, B0, 1.0),
                                  rope.rope_frequencies(D, B0))
    np.testing.assert_array_equal(rope.prope_frequencies(D, B0, 1.0),
                                  rope.rope_frequencies(D, B0))
    nope, _ = baselines.nope_table(2, 4, D)
    assert (nope == 0).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="head_dim"):
        rope.rope_frequencies(15, B0)
    with pytest.raises(ValueError, match="base"):
        rope.rope_frequencies(D, 1.0)
    with pytest.raises(ValueError, match="kind='alibi'"):
        rope.RopeConfig(kind="alibi")
    with pytest.raises(ValueError, match="ext='longrope'"):
        rope.RopeConfig(ext="longrope")
    with pytest.raises(ValueError, match="ext_factor"):
        rope.RopeConfig(ext="yarn")
    with pytest.raises(ValueError, match="beta"):
        rope.yarn_factors(np.ones(3), 64, 4.0, alpha=5.0, beta=2.0)


def _qk(seed=0, B=2, T=40, H=4):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(k1, (B, T, H, D)), jax.random.normal(k2, (B, T, H, D)))


def _logits(q, k):
    return jnp.einsum("bthd,bshd->bhts", q, k)


def _module(**kw):
    return rope.RotaryPositional(rope.RopeConfig(head_dim=D, num_heads=4, base=B0,
                                                 train_len=L0, **kw))


def _positions(B, T, offset=0):
    return jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32) + offset, (B, T))


def test_adarope_at_init_equals_rope():
    q, k = _qk()
    pos = _positions(*q.shape[:2])
    ref = _logits(*Rope(D, B0)(q, k, pos))
    for kw in ({}, {"share_heads": True}, {"learn_base_only": True}):
        got = _logits(*_module(kind="adarope", **kw)(q, k, pos))
        np.testing.assert_allclose(got, ref, atol=1e-6 * float(jnp.abs(ref).max()), rtol=0)
    np.testing.assert_allclose(_logits(*_module(kind="rope")(q, k, pos)), ref, atol=2e-5)


def _explicit(q, k, pos, theta, mult):
    """Reference: rotate with an explicit [H, P] table, then scale the logits."""
    angles = pos.astype(jnp.float32)[..., None, None] * jnp.asarray(theta, jnp.float32)
    qr, kr = rope.apply_rotary(q, angles), rope.apply_rotary(k, angles)
    return _logits(qr, kr) * jnp.asarray(mult, jnp.float32)[None, :, None, None]


@pytest.mark.parametrize("ext", ["yarn", "yarn_learned", "adarope", "pi", "ntk"])
def test_extension_at_init_equals_baseline_table(ext):
    """AdaRoPE-ext (and YaRN-learned-uniform) at init == YaRN, for every head."""
    q, k = _qk(1, T=256)
    pos = _positions(*q.shape[:2])
    cfg = rope.RopeConfig(kind="rope", head_dim=D, num_heads=4, base=B0, train_len=L0,
                          ext=ext, ext_factor=S)
    theta, mult = baselines.table(cfg, 1)
    ref = _explicit(q, k, pos, theta[0], mult[0])
    got = _logits(*rope.RotaryPositional(cfg)(q, k, pos))
    # The module forms θ' = exp(log θ - ρ) in float32, the reference θ / λ in float64: angles
    # m θ' at m < 256 then differ by ~m * 2^-24 rad, so logits agree to ~1e-5 relative.
    np.testing.assert_allclose(got, ref, atol=2e-5 * float(jnp.abs(ref).max()), rtol=0)
    if ext in ("yarn_learned", "adarope"):
        yarn = rope.RopeConfig(kind="rope", head_dim=D, num_heads=4, base=B0, train_len=L0,
                               ext="yarn", ext_factor=S)
        ref = _logits(*rope.RotaryPositional(yarn)(q, k, pos))
        np.testing.assert_allclose(got, ref, atol=1e-6 * float(jnp.abs(ref).max()), rtol=0)


@pytest.mark.parametrize("kind,fraction", [("rope", 1.0), ("nope", 1.0), ("partial", 0.25),
                                           ("prope", 0.75), ("adarope", 1.0)])
def test_module_tables_match_baselines(kind, fraction):
    cfg = rope.RopeConfig(kind=kind, fraction=fraction, head_dim=D, num_heads=4, base=B0)
    theta, _ = baselines.table(cfg, 1)
    np.testing.assert_allclose(rope.RotaryPositional(cfg).frequencies(), theta[0], rtol=1e-6)


def test_nope_is_identity():
    q, k = _qk()
    q2, k2 = _module(kind="nope")(q, k, _positions(*q.shape[:2]))
    np.testing.assert_array_equal(q2, q)
    np.testing.assert_array_equal(k2, k)


@pytest.mark.parametrize("kind,ext", [("rope", "none"), ("nope", "none"), ("partial", "none"),
                                      ("prope", "none"), ("adarope", "none"), ("rope", "yarn"),
                                      ("rope", "adarope"), ("rope", "pi"), ("rope", "ntk")])
def test_relative_position_invariance(kind, ext):
    """q.k logits depend on m - n only: shifting every position by +17 changes nothing."""
    q, k = _qk(2, T=30)
    m = rope.RotaryPositional(rope.RopeConfig(
        kind=kind, fraction=0.25 if kind == "partial" else 0.75, head_dim=D, num_heads=4,
        base=B0, train_len=L0, ext=ext, ext_factor=1.0 if ext == "none" else S))
    a = _logits(*m(q, k, _positions(2, 30)))
    b = _logits(*m(q, k, _positions(2, 30, 17)))  # positions < L0: length term inactive
    np.testing.assert_allclose(a, b, atol=1e-5 * float(jnp.abs(a).max()))


def _pe_loss(module, q, k, pos):
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)

    def loss(p):
        m = nnx.merge(graphdef, p, rest)
        logits = _logits(*m(q, k, pos))
        wave = jnp.cos(jnp.arange(logits.shape[-1], dtype=jnp.float32) / 3.0)
        return jnp.sum(jnp.tanh(logits) * wave)

    return params, jax.grad(loss)(params)


def test_gradients_reach_pe_params():
    q, k = _qk(3, T=128)
    pos = _positions(2, 128)
    _, g = _pe_loss(_module(kind="adarope"), q, k, pos)
    for name in ("log_freq", "log_temp"):
        v = np.asarray(g[name][...])
        assert np.isfinite(v).all() and np.abs(v).max() > 0, name
    _, g = _pe_loss(_module(kind="rope", ext="adarope", ext_factor=S), q, k, pos)
    for name in ("log_interp", "log_temp", "len_slope"):
        v = np.asarray(g[name][...])
        assert np.isfinite(v).all() and np.abs(v).max() > 0, name
    # Kinds that do not learn a parameter give it exactly zero gradient.
    _, g = _pe_loss(_module(kind="rope"), q, k, pos)
    assert all(float(jnp.abs(v[...]).max()) == 0 for v in jax.tree.leaves(g))


def test_share_heads_ties_gradients():
    q, k = _qk(4, T=64)
    _, g = _pe_loss(_module(kind="adarope", share_heads=True), q, k, _positions(2, 64))
    gf = np.asarray(g["log_freq"][...])
    np.testing.assert_allclose(gf, np.broadcast_to(gf[:1], gf.shape), rtol=1e-6)
    assert np.abs(gf).max() > 0


def test_clip_keeps_phi_below_log_pi():
    m = _module(kind="adarope")
    m.log_freq[...] = m.log_freq[...] + 5.0
    lf = m.log_frequencies()
    assert float(lf.max()) <= math.log(math.pi) + 1e-6
    np.testing.assert_allclose(m.frequencies()[:, 0], math.pi, rtol=1e-6)


def test_temperature_is_folded_into_q_only():
    """Scaling q by s_h equals scaling the logits; v (not touched by the encoder) is intact."""
    q, k = _qk(5, T=200)
    pos = _positions(2, 200)
    m = _module(kind="rope", ext="adarope", ext_factor=S)
    m.len_slope[...] = jnp.array([0.0, 0.5, -0.2, 1.0])
    q2, k2 = m(q, k, pos)
    s = m.temperature(pos)  # [B, T, H]
    m0 = _module(kind="rope", ext="adarope", ext_factor=S)
    m0.log_temp[...] = jnp.zeros(4)
    q0, k0 = m0(q, k, pos)
    np.testing.assert_allclose(k2, k0, atol=1e-6)
    np.testing.assert_allclose(_logits(q2, k2), _logits(q0, k0) * jnp.transpose(
        s, (0, 2, 1))[..., None], rtol=1e-5, atol=1e-5)
    # The length term is zero inside L0 and grows as log(m + 1) / L0 beyond.
    np.testing.assert_allclose(s[0, :L0, 1], math.exp(math.log(1.2965)), rtol=1e-4)
    np.testing.assert_allclose(s[0, 199, 1], 1.2965 * (1 + 0.5 * math.log(200 / 64)), rtol=1e-4)
