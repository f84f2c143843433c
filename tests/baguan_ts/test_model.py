"""Tests of the Baguan-TS network (spec §Tests: shapes, no leakage, invariances, RoPE).

Budget: the file must stay well under 25 s on 2 shared cores, and XLA compilation is what
costs there. So every 3D check runs through ONE jitted program (:func:`_step`: logits, the
token grid and the parameter gradient of the mean logit, all at the same input shapes),
plus one 2D, one F = 1 and one parameter-init program. They are compiled with
``xla_backend_optimization_level=0`` (about half the compile time; the optimisation level
changes fusion and code generation, not the model's semantics). Shapes of the other
(mode, F, H) combinations are checked with ``jax.eval_shape`` (tracing only).

Tolerances: "bit-identical" checks use exact equality (masked keys get weight exactly 0 and
zeroed values, so nothing of them reaches the query); the permutation check uses the spec's
1e-5 (float32 sums taken in another order).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.baguan_ts import model as M

CFG = M.ModelConfig(d=16, heads=2, layers=2, ffn=32, patch=8, feat_id_dim=4, bins=32,
                    max_features=8, reliability_bias=True)
B, K, S, F = 2, 3, 20, 3  # S = 20: 3 patches, the last one padded
N = K + 1
H3 = 5  # the horizon of the shared 3D program: not a multiple of 8, spans 2 patch tokens
ALPHA = (0.8, -0.6)  # a non-zero reliability scale per layer, so the bias is exercised
_FAST = {"xla_backend_optimization_level": 0}
GRAPHDEF = nnx.graphdef(nnx.eval_shape(lambda: M.BaguanTS(CFG, rngs=nnx.Rngs(0))))


@functools.partial(jax.jit, compiler_options=_FAST)
def _init(key, alpha):
    model = M.BaguanTS(CFG, rngs=nnx.Rngs(key))
    model.layers.ctx_attn.alpha[...] = alpha
    return nnx.state(model, nnx.Param)


def _params(seed=0, alpha=ALPHA):
    return _init(jax.random.key(seed), jnp.asarray(alpha, jnp.float32))


@functools.partial(jax.jit, compiler_options=_FAST)
def _step(params, feat, targ, support_mask, sims, feat_mask):
    """(logits [B, H3, bins], token grid, d mean(logits) / d params), one pure function."""

    def f(p):
        model = nnx.merge(GRAPHDEF, p)
        x = model.tokens(feat, targ, support_mask, sims, H=H3, feat_mask=feat_mask)
        logits = model.readout(x, S=feat.shape[2], H=H3)
        return jnp.mean(logits), (logits, x)

    (_, (logits, x)), grads = jax.value_and_grad(f, has_aux=True)(params)
    return logits, x, grads


@functools.partial(jax.jit, static_argnames=("H", "mode"), compiler_options=_FAST)
def _apply(params, feat, targ, support_mask, sims=None, feat_mask=None, *, H, mode="3d"):
    return nnx.merge(GRAPHDEF, params)(feat, targ, support_mask, sims, H=H, mode=mode,
                                       feat_mask=feat_mask)


def _batch(seed=0, b=B, n=N, s=S, f=F):
    """numpy inputs (edits in numpy: eager ``.at[]`` updates would each compile)."""
    rng = np.random.default_rng(seed)
    feat = rng.normal(size=(b, n, s, f)).astype(np.float32)
    targ = rng.normal(size=(b, n, s, 1)).astype(np.float32)
    sims = rng.uniform(-1, 1, size=(b, n)).astype(np.float32)
    smask = np.ones((b, n), bool)
    smask[0, 1] = False  # one masked support in the first sample
    fmask = np.ones((b, f), bool)
    fmask[1, f - 1] = False  # the second sample has a padded covariate
    return feat, targ, smask, sims, fmask


def _with(a, idx, value, add=False):
    """A numpy copy of ``a`` with ``a[idx]`` set to (or, with ``add``, increased by) value."""
    a = np.array(a, copy=True)
    if add:
        a[idx] += value
    else:
        a[idx] = value
    return a


@pytest.fixture(scope="module")
def params():
    return _params()


def _layer0(params, name):
    """(graphdef, state) of layer 0's submodule ``name`` (the layers are stacked [L, ...])."""
    gd, st = nnx.split(getattr(nnx.merge(GRAPHDEF, params).layers, name))
    return gd, jax.tree.map(lambda v: v[0], st)


def _run3d(params, feat, targ, smask, sims, fmask):
    return np.asarray(_step(params, feat, targ, smask, sims, fmask)[0])


# ----------------------------------------------------------------------------- shapes

@pytest.mark.parametrize("mode", ["3d", "2d"])
@pytest.mark.parametrize("f", [0, 3])
@pytest.mark.parametrize("H", [8, 5])
def test_shapes(params, mode, f, H):
    """(B, K+1, M, F+1) inputs -> logits (B, H, bins) in 3D, and (B, rows, 1, F+1) in 2D."""
    n, s = (K + 1, 21) if mode == "3d" else (12 + H, 1)  # 3D: S = 21, last patch padded
    feat, targ = np.zeros((B, n, s, f), np.float32), np.zeros((B, n, s, 1), np.float32)

    def run(p, feat, targ):
        model = nnx.merge(GRAPHDEF, p)
        return (model(feat, targ, np.ones((B, n), bool), H=H, mode=mode),
                model.tokens(feat, targ, None, H=H, mode=mode))

    out, grid = jax.eval_shape(run, params, feat, targ)  # tracing only: no compilation
    assert out.shape == (B, H, CFG.bins) and out.dtype == jnp.float32
    assert grid.shape == (B, n, -(-s // CFG.patch), f + 1, CFG.d)


def test_forward_values(params):
    feat, targ, smask, sims, fmask = _batch()
    out = _run3d(params, feat, targ, smask, sims, fmask)
    assert out.shape == (B, H3, CFG.bins) and np.all(np.isfinite(out))
    assert np.std(out) > 1e-3  # not a constant


def test_head_reads_query_target_tokens_at_the_right_offset(params):
    """Step j of the forecast is time t = S - H + j, decoded from patch t // 8, slot t % 8."""
    feat, targ, smask, sims, fmask = _batch(1)
    logits, x, _ = _step(params, feat, targ, smask, sims, fmask)
    assert x.shape == (B, N, 3, F + 1, CFG.d)
    head = nnx.merge(GRAPHDEF, params).head
    per_token = np.asarray(head(x[:, -1, :, -1, :]))  # [B, P * 8, bins], step-major
    expect = np.stack([per_token[:, (t // 8) * 8 + t % 8] for t in range(S - H3, S)], 1)
    np.testing.assert_allclose(np.asarray(logits), expect, rtol=1e-5, atol=1e-5)
    assert (S - H3) // 8 == 1 and (S - 1) // 8 == 2  # the horizon spans two patch tokens


# ----------------------------------------------------------------------------- no leakage

def test_query_future_is_masked_inside_the_model(params):
    feat, targ, smask, sims, fmask = _batch(2)
    base = _run3d(params, feat, targ, smask, sims, fmask)
    future = _with(targ, np.s_[:, -1, S - H3:], 123.0)  # any values in the forecast slots
    np.testing.assert_array_equal(_run3d(params, feat, future, smask, sims, fmask), base)
    nan = _with(targ, np.s_[:, -1, S - H3:], np.nan)
    np.testing.assert_array_equal(_run3d(params, feat, nan, smask, sims, fmask), base)
    # ...whereas the history just before the origin does matter.
    past = _with(targ, np.s_[:, -1, S - H3 - 1], 1.0, add=True)
    assert not np.array_equal(_run3d(params, feat, past, smask, sims, fmask), base)


def test_masked_support_has_no_influence(params):
    feat, targ, smask, sims, fmask = _batch(3)
    base = _run3d(params, feat, targ, smask, sims, fmask)
    assert not bool(smask[0, 1])
    f2 = _with(_with(feat, np.s_[0, 1], 50.0), np.s_[0, 1, 3], np.nan)  # garbage, even NaN
    t2 = _with(_with(targ, np.s_[0, 1], -7.0), np.s_[0, 1, 5:9], np.inf)
    s2 = _with(sims, np.s_[0, 1], np.nan)
    f2 = _with(f2, np.s_[1, :, :, F - 1], np.nan)  # ...also in a padded covariate
    logits, _, grads = _step(params, f2, t2, smask, s2, fmask)
    np.testing.assert_array_equal(np.asarray(logits), base)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
    # The same change to a valid support does change the forecast.
    assert not np.array_equal(_run3d(params, _with(feat, np.s_[0, 2], 50.0), targ, smask, sims,
                                     fmask)[0], base[0])


def test_padded_covariates_have_no_influence(params):
    feat, targ, smask, sims, fmask = _batch(4)
    base = _run3d(params, feat, targ, smask, sims, fmask)
    assert not bool(fmask[1, F - 1])
    changed = _with(feat, np.s_[1, :, :, F - 1], 9.0)
    np.testing.assert_array_equal(_run3d(params, changed, targ, smask, sims, fmask), base)
    # A real covariate does matter.
    assert not np.array_equal(_run3d(params, _with(feat, np.s_[1, :, :, 0], 9.0), targ, smask,
                                     sims, fmask)[1], base[1])


def test_padded_covariates_equal_fewer_covariates(params):
    """F = 3 with covariates 1, 2 padded (mask False) equals the same model on F = 1."""
    feat, targ, smask, sims, _ = _batch(5)
    pad = np.tile([True, False, False], (B, 1))
    full = _run3d(params, feat, targ, smask, sims, pad)
    one = np.asarray(_apply(params, feat[..., :1], targ, smask, sims, H=H3))
    np.testing.assert_allclose(full, one, rtol=1e-5, atol=1e-5)


def test_2d_mode_and_queries_do_not_see_each_other(params):
    """2D (tabular) mode with the same weights: S = 1, the last H rows are the queries."""
    rng = np.random.default_rng(6)
    n, H = 12, 4
    feat = rng.normal(size=(B, n, 1, F)).astype(np.float32)
    targ = rng.normal(size=(B, n, 1, 1)).astype(np.float32)

    def run(f, t):
        return np.asarray(_apply(params, f, t, np.ones((B, n), bool), H=H, mode="2d"))

    base = run(feat, targ)
    assert base.shape == (B, H, CFG.bins) and np.all(np.isfinite(base))
    # Query targets are forecast slots: their values are masked.
    np.testing.assert_array_equal(run(feat, _with(targ, np.s_[:, n - H:], 3.0)), base)
    # Changing query row n-1's covariates leaves the other queries' logits untouched.
    out = run(_with(feat, np.s_[:, n - 1], 2.0, add=True), targ)
    np.testing.assert_array_equal(out[:, :H - 1], base[:, :H - 1])
    assert not np.array_equal(out[:, H - 1], base[:, H - 1])


# ----------------------------------------------------------------------------- invariances

@pytest.mark.parametrize("alpha", [ALPHA, (0.0, 0.0)], ids=["reliability_bias", "no_bias"])
def test_support_permutation_invariance(alpha):
    params = _params(alpha=alpha)
    feat, targ, smask, sims, fmask = _batch(7)
    base = _run3d(params, feat, targ, smask, sims, fmask)
    perm = np.array([2, 0, 1, 3])  # supports permuted, the query stays last
    out = _run3d(params, feat[:, perm], targ[:, perm], smask[:, perm], sims[:, perm], fmask)
    np.testing.assert_allclose(out, base, rtol=0, atol=1e-5)
    # The permutation is not a no-op for the inputs: moving the query breaks invariance.
    swap = np.array([0, 1, 3, 2])
    moved = _run3d(params, feat[:, swap], targ[:, swap], np.ones((B, N), bool),
                   sims[:, swap], fmask)
    assert np.max(np.abs(moved - base)) > 1e-3


def test_reliability_bias_uses_sims(params):
    feat, targ, smask, sims, fmask = _batch(8)
    base = _run3d(params, feat, targ, smask, sims, fmask)
    flipped = _run3d(params, feat, targ, smask, -sims, fmask)
    assert np.max(np.abs(flipped - base)) > 1e-4
    # Standardisation: an affine change of the sims (scale > 0) does not matter.
    affine = _run3d(params, feat, targ, smask, 3.0 * sims + 1.0, fmask)
    np.testing.assert_allclose(affine, base, rtol=0, atol=1e-4)


def test_no_valid_support_gives_zero_context_output(params):
    ctx_def, ctx0 = _layer0(params, "ctx_attn")
    rng = np.random.default_rng(9)
    x = rng.normal(size=(B, 3, 2, N, CFG.d)).astype(np.float32)  # [B, P, V, N, d]
    sims = rng.normal(size=(B, N)).astype(np.float32)
    call = jax.jit(lambda s, x, m: nnx.merge(ctx_def, s)(x, m, 1, sims), compiler_options=_FAST)
    out = np.asarray(call(ctx0, x, np.zeros((B, N), bool)))
    assert np.all(out == 0.0)  # K_eff = 0: exactly zero, queries and supports alike
    some = np.asarray(call(ctx0, x, np.array([[True, False, False, False]] * B)))
    assert np.all(np.abs(some[..., -1, :]).max(-1) > 0)
    # ...and then the model's logits do not depend on the supports at all.
    feat, targ, _, sims, fmask = _batch(10)
    none = np.zeros((B, N), bool)
    base = _run3d(params, feat, targ, none, sims, fmask)
    changed = _run3d(params, _with(feat, np.s_[:, :K], 4.0), _with(targ, np.s_[:, :K], 5.0),
                     none, _with(sims, np.s_[:, :K], 0.3), fmask)
    np.testing.assert_array_equal(changed, base)


def test_context_attention_masks(params):
    """Queries (last 2 rows) see neither each other nor themselves; supports never see the
    queries; a masked support is no key for anyone."""
    gd, st = _layer0(params, "ctx_attn")
    call = jax.jit(lambda s, x, m: nnx.merge(gd, s)(x, m, 2), compiler_options=_FAST)
    x = np.random.default_rng(11).normal(size=(1, 5, CFG.d)).astype(np.float32)
    valid = np.ones((1, 5), bool)
    base = np.asarray(call(st, x, valid))
    out = np.asarray(call(st, _with(x, np.s_[:, 4], 1.0, add=True), valid))
    np.testing.assert_array_equal(out[:, :4], base[:, :4])
    out = np.asarray(call(st, _with(x, np.s_[:, 0], 1.0, add=True), valid))
    assert np.all(np.abs(out - base).max(-1) > 0)  # a valid support reaches every row
    masked = _with(valid, np.s_[0, 1], False)
    base = np.asarray(call(st, x, masked))
    out = np.asarray(call(st, _with(x, np.s_[:, 1], 1.0, add=True), masked))
    keep = np.array([0, 2, 3, 4])
    np.testing.assert_array_equal(out[:, keep], base[:, keep])


def test_feature_id_table_is_fixed():
    """The identity vectors come from a fixed key: identical across calls and instances."""
    t1 = M.feature_id_table(8, 4)
    t2 = M.feature_id_table(8, 4)
    M.feature_id_table.cache_clear()
    t3 = M.feature_id_table(8, 4)
    np.testing.assert_array_equal(t1, t2)
    np.testing.assert_array_equal(t1, t3)
    ref = jax.random.normal(jax.random.key(M.FEATURE_ID_SEED), (8, 4), jnp.float32)
    np.testing.assert_array_equal(t1, np.asarray(ref))
    assert abs(float(np.std(M.feature_id_table(64, 16))) - 1.0) < 0.1  # N(0, 1)
    # Two instances (different seeds) share the table; only the projection is learned.
    m0, m1 = nnx.merge(GRAPHDEF, _params(0)), nnx.merge(GRAPHDEF, _params(1))
    e0 = np.asarray(m0.feat_id(3))
    np.testing.assert_array_equal(e0, np.asarray(m0.feat_id(3)))  # identical across calls
    proj = m0.feat_id.proj
    np.testing.assert_allclose(e0, t1[:3] @ np.asarray(proj.kernel[...])
                               + np.asarray(proj.bias[...]), rtol=1e-5, atol=1e-5)
    assert not np.array_equal(e0, np.asarray(m1.feat_id(3)))  # different learned Linear
    nnx.update(m1.feat_id, nnx.state(m0.feat_id, nnx.Param))
    np.testing.assert_array_equal(e0, np.asarray(m1.feat_id(3)))  # ...but the same table
    assert M.count_params(m0.feat_id) == 4 * 16 + 16  # the table is not a parameter


# ----------------------------------------------------------------------------- RoPE

def test_rope_relative_positions():
    rng = np.random.default_rng(12)
    q = jnp.asarray(rng.normal(size=(1, 1, 8)), jnp.float32)  # [T, heads, dh]
    k = jnp.asarray(rng.normal(size=(1, 1, 8)), jnp.float32)

    def dot(m, n):
        rq = M.rope(q, jnp.asarray([m], jnp.float32))
        rk = M.rope(k, jnp.asarray([n], jnp.float32))
        return float(jnp.sum(rq * rk))

    for delta in (0, 1, 3, -5):
        vals = [dot(m, m - delta) for m in (0, 2, 7, 40)]
        np.testing.assert_allclose(vals, vals[0], rtol=1e-4, atol=1e-4)
    assert abs(dot(3, 2) - dot(3, 0)) > 1e-3  # ...and it does depend on m - n
    # Position 0 is the identity; rotations preserve norms.
    np.testing.assert_allclose(M.rope(q, jnp.zeros((1,), jnp.float32)), q, atol=1e-7)
    np.testing.assert_allclose(jnp.linalg.norm(M.rope(q, jnp.asarray([9.0]))),
                               jnp.linalg.norm(q), rtol=1e-5)


def test_patch_attention_is_order_aware(params):
    """RoPE makes the patch attention order-aware; the (position-free) variable attention is
    permutation-equivariant."""
    x = np.random.default_rng(13).normal(size=(2, 4, CFG.d)).astype(np.float32)
    x = _with(x, 1, x[0, np.array([1, 0, 2, 3])])  # row 1 = row 0, tokens 0 and 1 swapped
    for name, rope in (("patch_attn", True), ("var_attn", False)):
        gd, st = _layer0(params, name)
        assert nnx.merge(gd, st).use_rope is rope
        out = np.asarray(jax.jit(lambda s, x: nnx.merge(gd, s)(x), compiler_options=_FAST)(st, x))
        gap = np.max(np.abs(out[1] - out[0, np.array([1, 0, 2, 3])]))
        assert (gap > 1e-4) if rope else (gap < 1e-5), (name, gap)


# ----------------------------------------------------------------------------- determinism, grads

def test_deterministic_and_same_seed_same_numbers(params):
    feat, targ, smask, sims, fmask = _batch(14)
    a = _run3d(params, feat, targ, smask, sims, fmask)
    b = _run3d(params, feat, targ, smask, sims, fmask)
    c = _run3d(_params(), feat, targ, smask, sims, fmask)  # a fresh init, same seed
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    d = _run3d(_params(seed=1), feat, targ, smask, sims, fmask)
    assert not np.array_equal(a, d)


def test_grads_are_finite_and_reach_every_parameter(params):
    feat, targ, smask, sims, fmask = _batch(15)
    _, _, g = _step(params, feat, targ, smask, sims, fmask)
    leaves = jax.tree_util.tree_flatten_with_path(g)[0]
    assert len(leaves) == len(jax.tree.leaves(params))
    for path, leaf in leaves:
        leaf = np.asarray(leaf)
        assert np.all(np.isfinite(leaf)), path
        assert np.any(leaf != 0), path  # every parameter (alpha included) gets a gradient


# ----------------------------------------------------------------------------- API, errors

def test_count_params_default_config():
    cfg = M.ModelConfig()
    d, ffn, bins, L = cfg.d, cfg.ffn, cfg.bins, cfg.layers
    per_layer = 3 * (4 * d * d) + 1 + 2 * d * ffn  # 3 attentions (qkv + out), alpha, MLP
    expect = (8 * d // 2 + d // 2) + (16 * d // 2 + d // 2) + (16 * d + d) + L * per_layer \
        + (d * 4 * d + 4 * d) + (4 * d * bins * 8 + bins * 8)
    model = nnx.eval_shape(lambda: M.BaguanTS(cfg, rngs=nnx.Rngs(0)))
    assert M.count_params(model) == expect == 741_507
    assert M.count_params(nnx.state(model, nnx.Param)) == expect
    # head_hidden = ffn (the official code's choice of width) gives ~0.47 M.
    small = nnx.eval_shape(lambda: M.BaguanTS(dataclasses.replace(cfg, head_hidden=ffn),
                                              rngs=nnx.Rngs(0)))
    assert M.count_params(small) == expect - (d * 4 * d + 4 * d + 4 * d * bins * 8) \
        + (d * ffn + ffn + ffn * bins * 8) == 471_043


@pytest.mark.parametrize("kw, field", [
    (dict(d=30, heads=4), "heads"), (dict(d=15, heads=1), "d"), (dict(d=12, heads=4), "even"),
    (dict(bins=1), "bins"), (dict(layers=0), "layers"), (dict(rope_base=1.0), "rope_base"),
    (dict(reliability_bias=1), "reliability_bias"), (dict(head_hidden=0), "head_hidden")])
def test_config_errors(kw, field):
    with pytest.raises(ValueError, match=field):
        M.ModelConfig(**kw)


def test_call_errors(params):
    model = nnx.merge(GRAPHDEF, params)
    feat, targ, smask, sims, fmask = _batch()
    cases = [
        (dict(H=5, mode="1d"), "mode"),
        (dict(H=0), "H must"),
        (dict(H=S), "H must be < S"),
        (dict(H=5, n_query=2), "n_query"),
        (dict(H=5, mode="2d"), "S must be 1"),
        (dict(H=5, feat_mask=fmask[:, :2]), "feat_mask"),
    ]
    for kw, match in cases:
        with pytest.raises(ValueError, match=match):
            model(feat, targ, smask, sims, **kw)
    with pytest.raises(ValueError, match="support_mask"):
        model(feat, targ, smask[:, :2], sims, H=5)
    with pytest.raises(ValueError, match="sims"):
        model(feat, targ, smask, sims[:, :2], H=5)
    with pytest.raises(ValueError, match="targ"):
        model(feat, targ[:, :, :4], smask, H=5)
    with pytest.raises(ValueError, match="max_features"):
        model(jnp.zeros((B, N, S, 9), jnp.float32), targ, smask, H=5)
    f2, t2 = feat[:, :, :1], targ[:, :, :1]
    with pytest.raises(ValueError, match="n_query must equal H"):
        model(f2, t2, smask, H=2, mode="2d", n_query=1)
    with pytest.raises(ValueError, match="exceeds"):
        model(f2, t2, smask, H=6, mode="2d")
    with pytest.raises(ValueError, match="cfg"):
        M.BaguanTS(dataclasses.asdict(CFG), rngs=nnx.Rngs(0))
