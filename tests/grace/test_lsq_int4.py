"""Group-wise LSQ fake-quant and INT4 packing against brute force and hand-built grids (spec
§Tests 5, 6 and the bits/group part of 11)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.grace import int4, lsq


def _const_log_scale(n_out, n_groups, s):
    return jnp.full((n_out, n_groups), math.log(s), jnp.float32)


def test_ste_round_and_grad_scale():
    x = jnp.asarray([-2.5, -1.6, -0.4, 0.5, 1.5, 2.49, 7.7], jnp.float32)
    np.testing.assert_array_equal(np.asarray(lsq.ste_round(x)), np.round(np.asarray(x)))
    np.testing.assert_array_equal(np.asarray(jax.grad(lambda v: jnp.sum(lsq.ste_round(v)))(x)),
                                  np.ones(7, np.float32))
    # grad_scale: the forward value is exactly x, the gradient is g.
    y = jnp.asarray(np.random.default_rng(0).standard_normal(64) * 1e3, jnp.float32)
    np.testing.assert_array_equal(np.asarray(lsq.grad_scale(y, 0.0377)), np.asarray(y))
    g = jax.grad(lambda v: jnp.sum(3.0 * lsq.grad_scale(v, 0.25)))(y)
    np.testing.assert_allclose(np.asarray(g), 0.75, rtol=1e-7)


# w / s on both sides of every boundary: round(w/s) = -9 and 8 are outside, -8 and 7 inside.
RATIOS = np.array([-9.2, -8.6, -8.4, -8.0, -3.3, -0.2, 0.3, 2.7, 6.6, 7.0, 7.4, 7.6, 8.2, 20.0,
                   -20.0, 4.4], np.float32)


def _boundary_kernel(s=0.1):
    # [in=16, out=2], group 8: column 0 uses RATIOS, column 1 the same in reverse order.
    r = np.stack([RATIOS, RATIOS[::-1]], axis=1)
    return jnp.asarray(r * s, jnp.float32), r


def test_weight_gradient_is_one_inside_and_zero_outside():
    s = 0.1
    w, r = _boundary_kernel(s)
    ls = _const_log_scale(2, 2, s)
    jac = np.asarray(jax.jacrev(lambda v: lsq.fake_quant(v, ls, 4, 8))(w))  # [16, 2, 16, 2]
    jac = jac.reshape(32, 32)
    inside = ((np.round(r) >= -8) & (np.round(r) <= 7)).reshape(32)
    np.testing.assert_array_equal(np.diag(jac), inside.astype(np.float32))
    np.testing.assert_array_equal(jac - np.diag(np.diag(jac)), 0.0)
    assert inside.sum() == 20 and (~inside).sum() == 12  # both cases are exercised


@pytest.mark.parametrize("lsq_grad_scale", [True, False])
def test_scale_gradient_is_rounding_residual_or_clip_value_times_g(lsq_grad_scale):
    s, group = 0.1, 8
    w, _ = _boundary_kernel(s)
    ls = _const_log_scale(2, 2, s)
    s32 = np.float64(np.asarray(lsq.scale_from_log(ls))[0, 0])  # the float32 exp(log s)
    # d w_hat / d log_scale = (d w_hat / d s) s, so divide by s.
    jac = np.asarray(jax.jacrev(lambda l: lsq.fake_quant(w, l, 4, group, lsq_grad_scale))(ls))
    got = jac / s32  # [in=16, out=2, out'=2, groups=2]
    x = np.asarray(w, np.float64) / s32
    want = np.where(np.round(x) > 7, 7.0, np.where(np.round(x) < -8, -8.0, np.round(x) - x))
    want = want * (1 / math.sqrt(group * 7) if lsq_grad_scale else 1.0)
    for i in range(16):
        for o in range(2):
            for o2 in range(2):
                for j in range(2):
                    expect = want[i, o] if (o2 == o and j == i // group) else 0.0
                    assert got[i, o, o2, j] == pytest.approx(expect, abs=2e-5), (i, o, o2, j)
    # The residual is not trivially 0: at least one entry is in (0, 0.5) * g.
    assert np.any(np.abs(want) > 0.05)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_fake_quant_lies_on_the_grid(bits):
    rng = np.random.default_rng(bits)
    w = jnp.asarray(rng.standard_normal((64, 5)), jnp.float32)
    # s in [1, 2] / 2^(b-1): max|w| ~ 3 > -q_min s, so every width clips some weights.
    ls = jnp.asarray(np.log(rng.uniform(1.0, 2.0, (5, 2)) / 2 ** (bits - 1)), jnp.float32)
    w_hat = np.asarray(lsq.fake_quant(w, ls, bits, 32))
    s = np.repeat(np.asarray(lsq.scale_from_log(ls)), 32, axis=1).T  # [in, out]
    q = w_hat / s
    np.testing.assert_allclose(q, np.round(q), atol=1e-4)
    q_min, q_max = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    assert q.min() >= q_min - 1e-4 and q.max() <= q_max + 1e-4
    assert np.isclose(q.min(), q_min, atol=1e-4)  # this draw clips on the low side
    ref = np.clip(np.round(np.asarray(w) / s), q_min, q_max)
    np.testing.assert_array_equal(np.round(q), ref)


def test_mse_init_equals_brute_force_argmin():
    rng = np.random.default_rng(1)
    n_in, n_out, group, bits = 96, 7, 32, 4
    w = rng.standard_normal((n_in, n_out)).astype(np.float32)
    w[5, 2] = 12.0  # an outlier: the MSE optimum clips it, far from max|w| / q_max
    w[64:, 4] = 0.0  # an all-zero group
    got = np.exp(np.asarray(lsq.mse_init_log_scale(jnp.asarray(w), bits, group)))
    ratios = np.linspace(0.3, 1.2, 20)
    for o in range(n_out):
        for j in range(n_in // group):
            wg = w[j * group:(j + 1) * group, o].astype(np.float64)
            if not np.any(wg):
                assert np.isfinite(got[o, j]) and 0.99e-8 <= got[o, j] <= 1e-7
                continue
            cands = ratios * np.abs(wg).max() / 7
            errs = [np.sum((np.clip(np.round(wg / c), -8, 7) * c - wg) ** 2) for c in cands]
            assert got[o, j] == pytest.approx(cands[int(np.argmin(errs))], rel=1e-5), (o, j)
    # The outlier group's optimum is well below max-scaling (r = 1).
    assert got[2, 0] < 0.95 * 12.0 / 7


def test_log_scale_gradient_is_finite_and_clipped():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 3)).astype(np.float32)
    w[0, 0], w[1, 1], w[9, 2] = np.inf, np.nan, -1e38
    ls = jnp.asarray(rng.uniform(-2.0, 1.0, (3, 2)), jnp.float32)

    def loss(l, scale):
        return scale * jnp.sum(lsq.fake_quant(jnp.asarray(w), l, 4, 8))

    g = np.asarray(jax.grad(loss)(ls, 1e12))
    assert np.all(np.isfinite(g)) and np.all(np.abs(g) <= 1.0)
    assert np.sum(np.abs(g) == 1.0) >= 3  # the huge loss scale really is clipped
    # Below the clip the gradient is the plain one: c s g sum_group (round(x) - x or clip).
    w_ok = jnp.asarray(rng.standard_normal((16, 3)), jnp.float32)
    small = np.asarray(jax.grad(lambda l: 1e-2 * jnp.sum(lsq.fake_quant(w_ok, l, 4, 8)))(ls))
    s = np.asarray(lsq.scale_from_log(ls), np.float64)  # [3, 2]
    x = np.asarray(w_ok, np.float64).T.reshape(3, 2, 8) / s[..., None]
    d = np.where(np.round(x) > 7, 7.0, np.where(np.round(x) < -8, -8.0, np.round(x) - x))
    want = 1e-2 * s * d.sum(-1) / math.sqrt(8 * 7)
    assert np.all(np.abs(want) < 1.0) and np.all(np.abs(want) > 1e-5)
    np.testing.assert_allclose(small, want, rtol=1e-4, atol=1e-8)
    # Clamped log-scales (outside [log 1e-8, log 1e4]) get a zero, finite gradient.
    far = jnp.asarray([[-40.0, 40.0]] * 3, jnp.float32)
    np.testing.assert_array_equal(np.asarray(jax.grad(loss)(far, 1.0)), 0.0)


def test_qdense_jit_grads_and_init_scales():
    cfg = lsq.QuantConfig(bits=4, group=64)
    layer = lsq.QDense(128, 16, quant=cfg, use_bias=True, rngs=nnx.Rngs(0))
    assert layer.kernel[...].shape == (128, 16) and layer.log_scale[...].shape == (16, 2)
    np.testing.assert_array_equal(np.asarray(layer.log_scale[...]),
                                  np.asarray(lsq.mse_init_log_scale(layer.kernel[...], 4, 64)))
    graphdef, params = nnx.split(layer, nnx.Param)
    x = jnp.asarray(np.random.default_rng(3).standard_normal((4, 128)), jnp.float32)

    @jax.jit
    def loss_and_grads(p, x):
        def loss(p):
            y = nnx.merge(graphdef, p)(x)
            return jnp.sum(jnp.square(y)), y
        return jax.value_and_grad(loss, has_aux=True)(p)

    (value, y), grads = loss_and_grads(params, x)
    want = x @ lsq.fake_quant(params["kernel"][...], params["log_scale"][...], 4, 64)
    np.testing.assert_allclose(np.asarray(y), np.asarray(want), rtol=1e-5, atol=1e-5)
    assert float(value) == pytest.approx(float(jnp.sum(jnp.square(want))), rel=1e-5)
    assert float(jnp.max(jnp.abs(want - x @ params["kernel"][...]))) > 1e-3  # really quantised
    for name in ("kernel", "log_scale", "bias"):
        g = np.asarray(grads[name][...])
        assert np.all(np.isfinite(g)) and np.any(g != 0), name
    # init_scales re-runs the MSE init from the current kernel.
    layer.kernel[...] = 3.0 * layer.kernel[...]
    layer.init_scales()
    np.testing.assert_allclose(np.asarray(layer.log_scale[...]),
                               np.asarray(lsq.mse_init_log_scale(layer.kernel[...], 4, 64)))
    # quant=None: a plain dense layer without scales.
    fp = lsq.QDense(128, 16, quant=None, rngs=nnx.Rngs(0))
    _, fp_params = nnx.split(fp, nnx.Param)
    assert set(fp_params.keys()) == {"kernel"}
    np.testing.assert_allclose(np.asarray(fp(x)), np.asarray(x @ fp.kernel[...]), rtol=1e-6)


def test_value_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"group.*divisible|divisible.*group"):
        lsq.QDense(96, 8, quant=lsq.QuantConfig(4, 64), rngs=nnx.Rngs(0))
    for bits in (1, 5, 16):
        with pytest.raises(ValueError, match=r"bits must be one of \(2, 3, 4, 8\)"):
            lsq.QuantConfig(bits=bits)
    w = jnp.zeros((96, 4), jnp.float32)
    with pytest.raises(ValueError, match="bits"):
        lsq.fake_quant(w, jnp.zeros((4, 3), jnp.float32), bits=5, group=32)
    with pytest.raises(ValueError, match="group"):
        lsq.fake_quant(w, jnp.zeros((4, 2), jnp.float32), bits=4, group=64)
    with pytest.raises(ValueError, match="group"):
        lsq.mse_init_log_scale(w, 4, 64)
    with pytest.raises(ValueError, match="log_scale"):
        lsq.fake_quant(w, jnp.zeros((3, 4), jnp.float32), bits=4, group=32)  # [in//G, out]
    with pytest.raises(ValueError, match="group"):
        int4.pack_int4(np.zeros((96, 4), np.float32), np.zeros((4, 1), np.float32), 64)


def _grid_kernel(n_in=32, n_out=4, group=8, seed=0):
    """A kernel exactly on the grid: every row holds all 16 codes on even and on odd columns.
    Returns (w [in, out], q [out, in], float16 scales [out, in // G])."""
    rng = np.random.default_rng(seed)
    q = np.empty((n_out, n_in), np.int64)
    for o in range(n_out):
        q[o, 0::2] = rng.permutation(np.arange(-8, 8))
        q[o, 1::2] = rng.permutation(np.arange(-8, 8))
    s16 = rng.uniform(0.01, 0.2, (n_out, n_in // group)).astype(np.float16)
    s = np.repeat(s16.astype(np.float32), group, axis=1)
    return (q * s).T.astype(np.float32), q, s16


def test_pack_round_trip_is_bit_exact_with_low_nibble_even():
    w, q, s16 = _grid_kernel()
    ls = np.log(s16.astype(np.float32))
    p = int4.pack_int4(w, ls, 8)
    assert p.qweight.dtype == np.uint8 and p.qweight.shape == (4, 16)
    assert p.scales.dtype == np.float16 and p.scales.shape == (4, 4)
    assert (p.group, p.in_features, p.out_features) == (8, 32, 4)
    np.testing.assert_array_equal(p.scales, s16)
    np.testing.assert_array_equal(p.qweight & 0xF, q[:, 0::2] + 8)  # even column: low nibble
    np.testing.assert_array_equal(p.qweight >> 4, q[:, 1::2] + 8)
    assert sorted(set((p.qweight & 0xF).ravel())) == list(range(16))
    w_back = np.asarray(int4.unpack_int4(p))
    assert w_back.dtype == np.float32 and w_back.shape == w.shape
    np.testing.assert_array_equal(w_back, w)
    np.testing.assert_array_equal(np.asarray(jax.jit(int4.unpack_int4)(p)), w)


def test_packed_nbytes_and_export_of_a_qdense_tree():
    n_in, n_out, group = 128, 48, 64
    layer = lsq.QDense(n_in, n_out, quant=lsq.QuantConfig(4, group), rngs=nnx.Rngs(1))
    biased = lsq.QDense(n_in, n_out, quant=lsq.QuantConfig(4, group), use_bias=True,
                        rngs=nnx.Rngs(2))
    fp = lsq.QDense(n_in, n_out, quant=None, rngs=nnx.Rngs(3))
    tree = {"a": nnx.split(layer, nnx.Param)[1], "b": nnx.split(biased, nnx.Param)[1],
            "head": nnx.split(fp, nnx.Param)[1]}
    out = int4.export_packed(tree)
    assert isinstance(out["a"], int4.Packed)
    assert set(out["b"]) == {"bias", "packed"} and isinstance(out["b"]["packed"], int4.Packed)
    assert set(out["head"]) == {"kernel"}  # no log_scale: left in floating point
    one = n_out * n_in // 2 + 2 * n_out * n_in // group
    assert out["a"].qweight.nbytes + out["a"].scales.nbytes == one
    assert int4.packed_nbytes(out) == 2 * one
    assert int4.tree_nbytes(out) == 2 * one + 4 * n_out + 4 * n_in * n_out
    bf16 = 2 * n_in * n_out
    assert bf16 / one == pytest.approx(3.76, abs=0.01)
    np.testing.assert_array_equal(
        np.asarray(int4.unpack_int4(out["a"])),
        np.asarray(int4.unpack_int4(int4.pack_int4(layer.kernel[...], layer.log_scale[...],
                                                   group))))


def test_int4_dense_equals_fake_quant_dense_with_baked_scales():
    rng = np.random.default_rng(4)
    n_in, n_out, group = 128, 24, 64
    w = jnp.asarray(rng.standard_normal((n_in, n_out)) * 0.1, jnp.float32)
    ls = lsq.mse_init_log_scale(w, 4, group) + 0.013  # off the float16 grid before baking
    bias = jnp.asarray(rng.standard_normal(n_out), jnp.float32)
    x = jnp.asarray(rng.standard_normal((6, n_in)), jnp.float32)
    p = int4.pack_int4(w, ls, group)
    y_int4 = jax.jit(int4.int4_dense)(x, p, bias)
    baked = int4.bake_log_scale(ls)
    y_fq = x @ lsq.fake_quant(w, baked, 4, group) + bias
    # Same codes; the scales differ only by float16 s vs its float32 exp(log s) (~1e-7 rel).
    np.testing.assert_allclose(np.asarray(y_int4), np.asarray(y_fq), rtol=0, atol=2e-6)
    np.testing.assert_allclose(np.asarray(int4.unpack_int4(p)),
                               np.asarray(lsq.fake_quant(w, baked, 4, group)), rtol=1e-6)
    # Unbaked scales are measurably different (spec pitfall), so baking is what matters.
    y_raw = x @ lsq.fake_quant(w, ls, 4, group) + bias
    assert float(jnp.max(jnp.abs(y_raw - y_int4))) > 1e-5
