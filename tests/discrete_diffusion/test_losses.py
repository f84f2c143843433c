"""Noise schedule, antithetic times and the families' losses on a single-token toy with
exact enumeration over (x, z_t) and quadrature over t (spec §Tests), the Duo loss's range and
posterior, and the Eso-LM permutation."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.discrete_diffusion import losses, noise

K = 8
P = np.random.default_rng(0).dirichlet(np.ones(K))  # a Dirichlet(1) draw
H = float(-(P * np.log(P)).sum())
N_T = 2000  # midpoint quadrature nodes in u (t = (1 - eps) u + eps)
SCH = noise.LogLinear()
U = (np.arange(N_T) + 0.5) / N_T
T = (1 - SCH.eps) * U + SCH.eps
ALPHA = np.asarray(SCH.alpha(T), np.float32)
DALPHA = np.asarray(SCH.dalpha(T), np.float32)


def _duo_expected_loss(xtheta):
    """E_t E_x E_{z|x} of the Duo loss for x ~ P; ``xtheta(x, z) -> [N_T, K]``."""
    tot = 0.0
    for x, z in itertools.product(range(K), range(K)):
        q = ALPHA * (z == x) + (1 - ALPHA) / K  # q(z_t = z | x)
        loss = losses.duo_loss_per_token(
            jnp.full((N_T, 1), x), jnp.full((N_T, 1), z),
            jnp.asarray(xtheta(x, z), jnp.float32)[:, None, :], jnp.asarray(ALPHA),
            jnp.asarray(DALPHA))[:, 0]
        tot += P[x] * float(np.mean(q * np.asarray(loss, np.float64)))
    return tot


def test_schedule_and_antithetic_times():
    np.testing.assert_allclose(SCH.alpha(jnp.array([0.0, 1.0])), [1.0, SCH.eps], atol=1e-7)
    np.testing.assert_allclose(SCH.sigma(jnp.array([0.0])), [0.0], atol=1e-7)
    t = np.asarray(noise.antithetic_times(jax.random.key(0), 64))
    assert t.min() >= SCH.eps and t.max() <= 1.0
    u = np.sort((t - SCH.eps) / (1 - SCH.eps))
    # Stratified: u_i = U/n + i/n, one time per stratum, one shared offset U in [0, 1).
    off = u * 64 - np.arange(64)
    np.testing.assert_allclose(off, off[0], atol=1e-3)
    assert -1e-3 <= off[0] < 1
    t2 = np.asarray(noise.antithetic_times(jax.random.key(1), 64))
    assert not np.allclose(np.sort(t), np.sort(t2))


def test_mdlm_toy_nelbo_equals_entropy():
    # x_theta(mask) = P: E_t[(1/t) P(mask at t)] E_x[-log P(x)] = (1 - eps) H exactly.
    logp = jnp.asarray(np.log(P), jnp.float32)
    per_x = np.stack([np.asarray(losses.mdlm_loss_per_token(
        jnp.full((N_T, 1), logp[x]), jnp.ones((N_T, 1), bool), jnp.asarray(T, jnp.float32),
        low_var=False))[:, 0] for x in range(K)])  # [K, N_T]
    nelbo = float(np.sum(P[:, None] * per_x * (1 - ALPHA)[None], axis=0).mean())
    assert nelbo == pytest.approx((1 - SCH.eps) * H, rel=1e-4)
    # Low-var: weight 1, so E_t[1 - alpha_t] H = (1 - eps) H / 2: smaller, never a NELBO.
    lv = losses.mdlm_loss_per_token(jnp.full((N_T, 1), logp[0]), jnp.ones((N_T, 1), bool),
                                    jnp.asarray(T, jnp.float32), low_var=True)
    np.testing.assert_allclose(lv, -logp[0], rtol=1e-6)


def test_duo_toy_optimum_equals_entropy_and_plugin_does_not():
    # The leave-one-out optimum of a single token is P whatever z is: the NELBO is H(P).
    assert _duo_expected_loss(lambda x, z: np.broadcast_to(P, (N_T, K))) == pytest.approx(
        H, rel=1e-2)
    # The plug-in posterior p(x | z_t) double-counts z_t (spec §Pitfalls): ~1.5 H.
    def plugin(x, z):
        post = P[None] * (ALPHA[:, None] * (np.arange(K) == z) + (1 - ALPHA[:, None]) / K)
        return post / post.sum(1, keepdims=True)
    assert _duo_expected_loss(plugin) >= 1.3 * H
    # A perfect (cheating) denoiser has zero loss.
    assert abs(_duo_expected_loss(lambda x, z: np.broadcast_to(np.eye(K)[x], (N_T, K)))) < 1e-6


def test_duo_loss_nonnegative_and_finite_over_alpha():
    key = jax.random.key(0)
    B, L = 64, 16
    alpha = jnp.asarray(np.geomspace(1e-3, 1 - 1e-6, B), jnp.float32)
    x = jax.random.randint(key, (B, L), 0, K)
    z = losses.uniform_noise(jax.random.key(1), x, alpha, K)
    probs = jax.nn.softmax(3 * jax.random.normal(jax.random.key(2), (B, L, K)))
    loss = np.asarray(losses.duo_loss_per_token(x, z, probs, alpha, SCH.dalpha(alpha)))
    assert np.all(np.isfinite(loss)) and loss.min() >= -1e-4 * np.abs(loss).max()
    assert np.asarray(z).max() < K  # the mask is never a uniform-noise token


def test_duo_posterior_is_bayes_for_one_hot_x():
    k = 6
    eye = np.eye(k)
    a_s, a_t = 0.7, 0.4
    a_ts = a_t / a_s
    for x, zt in itertools.product(range(k), range(k)):
        q = np.asarray(losses.duo_posterior(jnp.asarray(eye[zt]), jnp.asarray(eye[x]), a_s, a_t))
        # Bayes: q(z_t | z_s) q(z_s | x) / q(z_t | x) over z_s.
        fwd = a_ts * eye[:, zt] + (1 - a_ts) / k  # q(z_t | z_s) for every z_s
        prior = a_s * eye[x] + (1 - a_s) / k  # q(z_s | x)
        want = fwd * prior / (a_t * (zt == x) + (1 - a_t) / k)
        np.testing.assert_allclose(q, want, atol=1e-6)
        assert q.sum() == pytest.approx(1.0, abs=1e-6)
    soft = np.asarray(losses.duo_posterior(jnp.asarray(eye[2]), jnp.asarray(P[:k] / P[:k].sum()),
                                           a_s, a_t))
    assert soft.sum() == pytest.approx(1.0, abs=1e-6) and soft.min() > 0


def test_mask_noise_rate_and_esolm_permutation():
    x = jnp.zeros((4, 4096), jnp.int32) + 3
    alpha = jnp.array([0.0, 0.25, 0.75, 1.0])
    z = np.asarray(losses.mask_noise(jax.random.key(0), x, alpha, K))
    keep = (z == 3).mean(1)
    np.testing.assert_allclose(keep, alpha, atol=0.03)
    assert set(np.unique(z)) <= {3, K}
    masked = z == K
    perm = np.asarray(losses.esolm_permutation(jax.random.key(1), jnp.asarray(masked)))
    for b in range(4):
        assert sorted(perm[b]) == list(range(4096))  # a permutation
        m = masked[b][perm[b]]
        n_clean = int((~masked[b]).sum())
        assert not m[:n_clean].any() and m[n_clean:].all()  # clean first, then masked


def test_loss_fn_families_and_validation_uses_the_nelbo():
    from icml26_jax.discrete_diffusion import model

    Kv, B, L = 16, 8, 12
    x = jax.random.randint(jax.random.key(0), (B, L), 0, Kv)
    batch = {"tokens": x}
    key = jax.random.key(1)
    vals = {}
    for fam in model.FAMILIES:
        g, p = model.init("XS", fam, Kv, 0)
        tr = float(losses.loss_fn(fam, p, g, batch, key, train=True, K=Kv))
        va = float(losses.loss_fn(fam, p, g, batch, key, train=False, K=Kv))
        assert np.isfinite(tr) and np.isfinite(va) and va > 0, fam
        vals[fam] = (tr, va)
    # An untrained model predicts ~uniformly: AR NLL ~ log K.
    assert abs(vals["ar"][0] - np.log(Kv)) < 0.5
    # Same model and noise: the low-var objective is the NELBO with weight 1, and the
    # validation of a low-var model is the NELBO itself.
    g, p = model.init("XS", "mdlm", Kv, 0)
    t = jnp.full((B,), 0.25)
    nelbo = losses.loss_fn("mdlm", p, g, batch, key, train=True, K=Kv, t=t)
    lowvar = losses.loss_fn("mdlm_lowvar", p, g, batch, key, train=True, K=Kv, t=t)
    val_lv = losses.loss_fn("mdlm_lowvar", p, g, batch, key, train=False, K=Kv, t=t)
    np.testing.assert_allclose(float(lowvar) * 4.0, float(nelbo), rtol=1e-5)  # 1/t = 4
    np.testing.assert_allclose(float(val_lv), float(nelbo), rtol=1e-6)
    with pytest.raises(ValueError, match="family"):
        losses.loss_fn("sedd", p, g, batch, key, train=True, K=Kv)
