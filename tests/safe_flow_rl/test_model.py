"""Tests of ``safe_flow_rl.model``: the flow prior's bijection, log-det and density, its
parity with a distrax flow, transform consistency, and the MLP / refiner heads (spec §Tests
"Flow").

The flow's conditioners start at zero (flow = tanh), which would make most checks trivial,
so every flow test first perturbs *all* parameters with small normals (``_flow``). The
scale 0.02 bends the flow well away from tanh (max |a - tanh z| ~ 0.5 at hidden (128, 128),
~0.3 at (32, 32)) while keeping the density smooth enough for a 400 x 400 midpoint grid.
Float32 tolerances are ~10x the measured rounding errors (noted per test).
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.safe_flow_rl.model import (ConditionalRealNVP, LatentRefiner, MLP,
                                           base_log_prob, distrax_flow, tanh_log_det)

A, O = 2, 11
PERTURB = 0.02


def _built(make, seed=None, scale=PERTURB):
    """``make()`` with every parameter moved by scale * N(0, 1) (numpy draws, seeded)."""
    module = make()
    if seed is None:
        return module
    graphdef, params = nnx.split(module, nnx.Param)
    rng = np.random.default_rng(seed)
    params = jax.tree.map(
        lambda p: p + jnp.asarray(scale * rng.standard_normal(p.shape), p.dtype), params)
    return nnx.merge(graphdef, params)


def _jit(module, method):
    """The module's ``method`` jitted at a split/merge boundary (the repo's pattern)."""
    graphdef, params = nnx.split(module, nnx.Param)
    fn = jax.jit(lambda p, *args: getattr(nnx.merge(graphdef, p), method)(*args))
    return lambda *args: fn(params, *args)


class _Jitted:
    """Jitted ``forward``, ``inverse``, ``log_prob``, ``forward_latent`` of a flow; one per
    flow (flows are cached and never mutated), so tests share compiled programs."""

    _cache = {}

    def __new__(cls, flow):
        if id(flow) not in cls._cache:
            self = super().__new__(cls)
            for m in ("forward", "inverse", "log_prob", "forward_latent"):
                setattr(self, m, _jit(flow, m))
            cls._cache[id(flow)] = (flow, self)
        return cls._cache[id(flow)][1]


@functools.lru_cache(maxsize=None)
def _flow(seed=0, hidden=(128, 128), action_dim=A, dtype=jnp.float32, scale=PERTURB):
    """A spec-shaped flow (6 couplings, s_max = 2) moved away from its zero init."""
    return _built(lambda: ConditionalRealNVP(action_dim, O, hidden=hidden, rngs=nnx.Rngs(seed),
                                             dtype=dtype),
                  1000 + seed, scale)


def _data(n=64, action_dim=A, dtype=jnp.float32, seed=0):
    kz, ks = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(kz, (n, action_dim), dtype),
            jax.random.normal(ks, (n, O), dtype))


# ----------------------------------------------------------------------------- bijection
def test_perturbed_flow_is_not_tanh():
    flow = _flow()
    jf = _Jitted(flow)
    z, s = _data()
    a, _ = jf.forward(z, s)
    assert float(jnp.max(jnp.abs(a - jnp.tanh(z)))) > 0.05


def test_initial_flow_is_tanh():
    flow = ConditionalRealNVP(A, O, rngs=nnx.Rngs(0))
    z, s = _data()
    a, logdet = flow.forward(z, s)
    np.testing.assert_allclose(a, jnp.tanh(z), atol=1e-7)
    # The reference in float64: in float32, log1p(-tanh(z)^2) itself loses digits where
    # tanh(z)^2 is near 1 (1.1e-5 off at a log-det of -4.1 under XLA:CPU's elemental emitters).
    with jax.enable_x64(True):
        z64 = jnp.asarray(np.asarray(z), jnp.float64)
        ref = np.asarray(jnp.sum(jnp.log(4.0) - 2.0 * jnp.logaddexp(z64, -z64), -1))
    np.testing.assert_allclose(logdet, ref, atol=1e-5)


@pytest.mark.parametrize("action_dim", [1, 2, 3])
def test_inverse_of_forward_float32(action_dim):
    """z -> a -> z to 1e-5 in float32 where tanh is well conditioned.

    atanh amplifies the rounding of a by 1 / (1 - a^2), so in float32 a z that maps to
    |a| ~ 0.9995 can only come back to ~1e-4; the test keeps samples with max |a| < 0.99
    (most of them), and the couplings alone (no tanh) are checked on every sample. The
    float64 test below covers the whole chain on all samples.
    """
    flow = _flow(action_dim=action_dim, hidden=(32, 32))
    jf = _Jitted(flow)
    z, s = _data(action_dim=action_dim)
    a, ld_f = jf.forward(z, s)
    z_back, ld_i = jf.inverse(a, s)
    ok = jnp.max(jnp.abs(a), -1) < 0.99
    assert int(ok.sum()) > 40
    np.testing.assert_allclose(z_back[ok], z[ok], atol=1e-5)
    np.testing.assert_allclose(ld_i[ok], -ld_f[ok], atol=1e-4)
    # couplings only: the inverse of forward_latent, by stripping the tanh exactly
    u, _ = jf.forward_latent(z, s)
    z_lat, _ = jf.inverse(jnp.tanh(u), s)
    ok_u = jnp.max(jnp.abs(u), -1) < 2.5
    np.testing.assert_allclose(z_lat[ok_u], z[ok_u], atol=1e-5)


def test_forward_of_inverse_float32():
    flow = _flow()
    jf = _Jitted(flow)
    ka, ks = jax.random.split(jax.random.key(7))
    a = jax.random.uniform(ka, (64, A), jnp.float32, -0.999, 0.999)
    s = jax.random.normal(ks, (64, O))
    z, ld_i = jf.inverse(a, s)
    a_back, ld_f = jf.forward(z, s)
    np.testing.assert_allclose(a_back, a, atol=1e-5)  # measured 2e-7
    np.testing.assert_allclose(ld_f, -ld_i, atol=1e-5)  # measured 1e-6, |log-det| up to ~4.4


# ----------------------------------------------------------------------------- log-det
def test_forward_logdet_matches_jacobian():
    flow = _flow()
    jf = _Jitted(flow)
    z, s = _data()
    _, logdet = jf.forward(z, s)

    def f(zi, si):  # one sample: [A], [O] -> [A]
        return flow(zi, si)

    jac = jax.jit(jax.vmap(jax.jacfwd(f)))(z, s)  # [B, A, A]
    sign, ref = jnp.linalg.slogdet(jac)
    assert bool(jnp.all(sign != 0))
    # float32 Jacobian through 6 couplings and tanh, log-dets in [-5.4, -0.1]: measured 2e-5.
    np.testing.assert_allclose(logdet, ref, atol=1e-4, rtol=1e-5)


def test_inverse_logdet_matches_jacobian():
    flow = _flow()
    jf = _Jitted(flow)
    z, s = _data()
    a, ld_f = jf.forward(z, s)
    _, ld_i = jf.inverse(a, s)
    jac = jax.jit(jax.vmap(jax.jacfwd(lambda ai, si: flow.inverse(ai, si)[0])))(a, s)
    _, ref = jnp.linalg.slogdet(jac)
    np.testing.assert_allclose(ld_i, ref, atol=1e-5)  # measured 5e-7
    # max |a| = 0.995 here, where atanh amplifies the float32 rounding of a by ~100
    np.testing.assert_allclose(ld_i, -ld_f, atol=1e-4)


def test_round_trip_and_logdet_float64():
    """The whole chain, tanh included, on all samples in float64; the log-det against the
    Jacobian for A = 3 (uneven halves)."""
    with jax.enable_x64(True):
        flow = _flow(dtype=jnp.float64, action_dim=3, hidden=(32, 32))
        jf = _Jitted(flow)
        z, s = _data(action_dim=3, dtype=jnp.float64)
        a, ld_f = jf.forward(z, s)
        assert a.dtype == jnp.float64
        z_back, ld_i = jf.inverse(a, s)
        np.testing.assert_allclose(z_back, z, atol=1e-9)
        np.testing.assert_allclose(ld_i, -ld_f, atol=1e-9)
        jac = jax.jit(jax.vmap(jax.jacfwd(lambda zi, si: flow(zi, si))))(z, s)
        np.testing.assert_allclose(ld_f, jnp.linalg.slogdet(jac)[1], atol=1e-10)


def test_tanh_log_det_is_stable():
    u = jnp.array([-40.0, -5.0, -0.3, 0.0, 0.3, 5.0, 40.0], jnp.float32)
    ld = tanh_log_det(u)
    assert bool(jnp.all(jnp.isfinite(ld)))
    with jax.enable_x64(True):
        u64 = jnp.asarray(np.asarray(u), jnp.float64)
        ref = jnp.log(4.0) - 2.0 * jnp.logaddexp(u64, -u64)  # log sech^2 u
    np.testing.assert_allclose(ld, np.asarray(ref), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- density
def test_density_integrates_to_one_on_action_grid():
    """Midpoint rule on a 400 x 400 grid over (-1, 1)^2 at fixed s.

    Hidden (32, 32) keeps the 160k-point evaluation cheap. The density is smooth and
    bounded (max ~0.56, vanishing at the box edges), so the midpoint error is small:
    measured mass 1.0003 (1.0008 and 1.0004 at two other states), inside the spec's +-0.02.
    """
    flow = _flow(hidden=(32, 32))
    n = 400
    g = (jnp.arange(n, dtype=jnp.float32) + 0.5) / n * 2.0 - 1.0
    a0, a1 = jnp.meshgrid(g, g, indexing="ij")
    a = jnp.stack([a0.ravel(), a1.ravel()], -1)
    s = jnp.broadcast_to(jax.random.normal(jax.random.key(2), (O,)), (a.shape[0], O))
    graphdef, params = nnx.split(flow, nnx.Param)
    lp = jax.jit(lambda p, a, s: nnx.merge(graphdef, p).log_prob(a, s))(params, a, s)
    mass = float(jnp.sum(jnp.exp(lp)) * (2.0 / n) ** 2)
    assert abs(mass - 1.0) <= 0.02, mass


def test_log_prob_is_base_plus_inverse_logdet():
    flow = _flow()
    jf = _Jitted(flow)
    z, s = _data()
    a, ld_f = jf.forward(z, s)
    # change of variables: log pi(f(z)) = log N(z) - log|det df/dz|
    ok = jnp.max(jnp.abs(a), -1) < 0.99
    np.testing.assert_allclose(jf.log_prob(a, s)[ok], (base_log_prob(z) - ld_f)[ok],
                               atol=1e-4, rtol=1e-5)
    np.testing.assert_allclose(base_log_prob(jnp.zeros((1, 3))), [-1.5 * math.log(2 * math.pi)],
                               rtol=1e-6)


def test_log_prob_matches_distrax():
    pytest.importorskip("distrax")
    flow = _flow()
    jf = _Jitted(flow)
    z, s = _data()
    chain, dist = distrax_flow(flow, s)

    a, ld = jf.forward(z, s)
    a_ref, ld_ref = jax.jit(chain.forward_and_log_det)(z)
    np.testing.assert_allclose(a, a_ref, atol=1e-6)
    np.testing.assert_allclose(ld, ld_ref, atol=1e-4, rtol=1e-5)
    # log_prob at well-conditioned actions (distrax's Tanh does not clip)
    a_eval = jnp.clip(a, -0.99, 0.99)
    np.testing.assert_allclose(jf.log_prob(a_eval, s), jax.jit(dist.log_prob)(a_eval),
                               atol=1e-4, rtol=1e-5)


def test_boundary_actions_are_clipped_and_finite():
    flow = _flow()
    jf = _Jitted(flow)
    a = jnp.array([[1.0, -1.0], [0.0, 1.0]], jnp.float32)
    s = jnp.zeros((2, O), jnp.float32)
    assert bool(jnp.all(jnp.isfinite(jf.log_prob(a, s))))
    z, ld = jf.inverse(a, s)
    assert bool(jnp.all(jnp.isfinite(z))) and bool(jnp.all(jnp.isfinite(ld)))


# ----------------------------------------------------------------------------- transforms
def test_jit_vmap_and_split_consistency():
    flow = _flow()
    z, s = _data()
    a, ld = flow.forward(z, s)
    lp = flow.log_prob(a, s)
    graphdef, params = nnx.split(flow, nnx.Param)

    @jax.jit
    def pure(params, z, s):
        f = nnx.merge(graphdef, params)
        a, ld = f.forward(z, s)
        return a, ld, f.log_prob(a, s)

    a_j, ld_j, lp_j = pure(params, z, s)
    np.testing.assert_allclose(a_j, a, atol=1e-6)
    np.testing.assert_allclose(ld_j, ld, atol=1e-5)
    np.testing.assert_allclose(lp_j, lp, atol=1e-4)
    a_v, ld_v = jax.jit(jax.vmap(flow.forward))(z, s)  # per sample: [A], [O]
    np.testing.assert_allclose(a_v, a, atol=1e-6)
    np.testing.assert_allclose(ld_v, ld, atol=1e-5)
    # extra leading axes behave like the batch axis
    a_3d, _ = flow.forward(z.reshape(8, 8, A), s.reshape(8, 8, O))
    np.testing.assert_allclose(a_3d.reshape(64, A), a, atol=1e-6)
    # tree mode: the module itself crosses an nnx.jit boundary as a plain pytree
    a_t, ld_t = nnx.jit(lambda m, z, s: m.forward(z, s), graph=False)(flow, z, s)
    np.testing.assert_allclose(a_t, a, atol=1e-6)
    np.testing.assert_allclose(ld_t, ld, atol=1e-5)


def test_vmap_over_stacked_parameters():
    """Seeds as a leading axis: a vmapped stack of flows equals the flows run one by one."""
    flows = [_flow(seed=i, hidden=(32, 32)) for i in range(3)]
    graphdef, _ = nnx.split(flows[0], nnx.Param)
    stacked = jax.tree.map(lambda *p: jnp.stack(p), *[nnx.split(f, nnx.Param)[1] for f in flows])
    z, s = _data()
    a = jnp.tanh(z)
    out = jax.jit(jax.vmap(lambda p: nnx.merge(graphdef, p).log_prob(a, s)))(stacked)
    for i, f in enumerate(flows):
        np.testing.assert_allclose(out[i], _Jitted(f).log_prob(a, s), atol=1e-5)


def test_conditioning_matters():
    flow = _flow()
    jf = _Jitted(flow)
    z, s = _data()
    s2 = s + 1.0
    a1, _ = jf.forward(z, s)
    a2, _ = jf.forward(z, s2)
    assert float(jnp.mean(jnp.abs(a1 - a2))) > 1e-2
    assert float(jnp.mean(jnp.abs(jf.log_prob(a1, s) - jf.log_prob(a1, s2)))) > 1e-2


def test_sample_shapes_and_determinism():
    flow = _flow()
    graphdef, params = nnx.split(flow, nnx.Param)
    sample = jax.jit(lambda p, key, s: nnx.merge(graphdef, p).sample(key, s, 16))
    s = jax.random.normal(jax.random.key(3), (4, O))
    a, z = sample(params, jax.random.key(4), s)
    assert a.shape == z.shape == (4, 16, A)
    assert bool(jnp.all(jnp.abs(a) < 1.0))
    # each candidate is the decoded latent of its own state
    np.testing.assert_allclose(a.reshape(64, A), _Jitted(flow).forward(
        z.reshape(64, A), jnp.repeat(s, 16, axis=0))[0], atol=1e-6)
    a_again, _ = sample(params, jax.random.key(4), s)
    np.testing.assert_array_equal(a, a_again)
    a_other, _ = sample(params, jax.random.key(5), s)
    assert float(jnp.abs(a_other - a).max()) > 0.1


def test_flow_errors():
    with pytest.raises(ValueError, match="action_dim"):
        ConditionalRealNVP(0, O, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="s_max"):
        ConditionalRealNVP(A, O, s_max=0.0, rngs=nnx.Rngs(0))
    flow = ConditionalRealNVP(A, O, hidden=(8,), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="trailing dimension"):
        flow.forward(jnp.zeros((3, A + 1)), jnp.zeros((3, O)))
    with pytest.raises(ValueError, match="leading dims"):
        flow.log_prob(jnp.zeros((3, A)), jnp.zeros((4, O)))


# ----------------------------------------------------------------------------- MLP, refiner
def test_mlp_shapes_and_init_options():
    x = jax.random.normal(jax.random.key(0), (4, 3, 7))
    mlp = MLP(7, (16, 8), 5, rngs=nnx.Rngs(0))
    assert mlp(x).shape == (4, 3, 5)
    assert [layer.kernel.shape for layer in mlp.layers] == [(7, 16), (16, 8), (8, 5)]
    assert float(jnp.abs(mlp(x)).max()) > 0
    zero = MLP(7, (16, 8), 5, rngs=nnx.Rngs(0), zero_last=True)
    np.testing.assert_array_equal(zero(x), jnp.zeros((4, 3, 5)))
    half = MLP(7, (16, 8), 5, rngs=nnx.Rngs(0), out_scale=0.5)
    np.testing.assert_allclose(half.layers[-1].kernel[...], 0.5 * mlp.layers[-1].kernel[...],
                               rtol=1e-6)
    np.testing.assert_array_equal(half.layers[0].kernel[...], mlp.layers[0].kernel[...])
    linear = MLP(7, (), 1, rngs=nnx.Rngs(0), activation=nnx.tanh)
    assert linear(x).shape == (4, 3, 1) and len(linear.layers) == 1
    with pytest.raises(ValueError, match="out_dim"):
        MLP(7, (4,), 0, rngs=nnx.Rngs(0))


def test_latent_refiner_ordered_starts_at_identity():
    ref = LatentRefiner(O, A, "ordered", rngs=nnx.Rngs(0))
    z, s = _data()
    np.testing.assert_array_equal(ref.g_h(s, z), jnp.zeros((64, A)))
    np.testing.assert_array_equal(ref.g_r(s, z), jnp.zeros((64, A)))
    assert ref.head_h.layers[0].kernel.shape == (O + A, 128)
    # once trained (here: perturbed) the heads depend on both s and z, per head
    ref = _built(lambda: LatentRefiner(O, A, "ordered", rngs=nnx.Rngs(0)), 5, 0.1)
    u_h = ref.g_h(s, z)
    assert u_h.shape == (64, A)
    assert float(jnp.abs(u_h - ref.g_h(s, z + 1.0)).max()) > 1e-3
    assert float(jnp.abs(u_h - ref.g_h(s + 1.0, z)).max()) > 1e-3
    assert float(jnp.abs(u_h - ref.g_r(s, z)).max()) > 1e-3
    with pytest.raises(ValueError, match="gaussian"):
        ref.gaussian(s)


def test_latent_refiner_gaussian_starts_at_identity():
    ref = LatentRefiner(O, A, "gaussian", hidden=(32, 32), rngs=nnx.Rngs(0))
    _, s = _data()
    m, log_scale = ref.gaussian(s)
    np.testing.assert_array_equal(m, jnp.zeros((64, A)))
    np.testing.assert_array_equal(log_scale, jnp.zeros((64, A)))
    with pytest.raises(ValueError, match="ordered"):
        ref.g_h(s, jnp.zeros((64, A)))
    with pytest.raises(ValueError, match="kind"):
        LatentRefiner(O, A, "radial", rngs=nnx.Rngs(0))
