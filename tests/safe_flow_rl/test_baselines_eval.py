"""Baselines (actor density, BC-Lag's dual ascent and cost budget), the actor stage, evaluation
rollouts against a hand loop over ``envs.step``, the OOD measures, the bounds helpers
(Lipschitz, coupling W2, KL through the flow), Spearman, and the config errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.safe_flow_rl import (baselines, bounds, configs, data, envs, evaluate, policies,
                                     report, stages, train)
from icml26_jax.safe_flow_rl.model import ConditionalRealNVP, LatentRefiner


def _random_flow(seed=0, obs_dim=3, scale=0.8):
    flow = ConditionalRealNVP(2, obs_dim, (16, 16), 4, 2.0, rngs=nnx.Rngs(seed))
    # Zero-init conditioners make the flow tanh(z); give it a real shape.
    g, p = nnx.split(flow, nnx.Param)
    leaves, tree = jax.tree.flatten(p)
    keys = jax.random.split(jax.random.key(seed + 100), len(leaves))
    leaves = [x + scale * jax.random.normal(k, x.shape) / math.sqrt(max(x.shape[0], 1))
              for x, k in zip(leaves, keys)]
    return nnx.merge(g, jax.tree.unflatten(tree, leaves))


def test_gaussian_actor_density_integrates_to_one_and_matches_the_formula():
    actor = baselines.GaussianActor(3, 2, (16,), rngs=nnx.Rngs(0))
    s = jnp.asarray([0.3, -0.2, 0.5])
    # integrate over u = atanh(a) (da = (1 - a^2) du), where the midpoint grid is accurate
    g = np.linspace(-6, 6, 401)
    U0, U1 = np.meshgrid(g, g)
    a = np.tanh(np.stack([U0.ravel(), U1.ravel()], -1))
    p = np.exp(np.asarray(actor.log_prob(jnp.asarray(a, jnp.float32),
                                         jnp.broadcast_to(s, (a.shape[0], 3)))))
    jac = np.prod(1 - a ** 2, axis=-1)
    assert np.sum(p * jac) * (g[1] - g[0]) ** 2 == pytest.approx(1.0, abs=0.02)
    mu, log_std = (np.asarray(x) for x in actor.dist(s))
    a0 = np.array([0.2, -0.7])
    u = np.arctanh(a0)
    want = np.sum(-0.5 * ((u - mu) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)
                  - np.log(1 - a0 ** 2))
    assert float(actor.log_prob(jnp.asarray(a0, jnp.float32), s)) == pytest.approx(want,
                                                                                    rel=1e-4)


def test_bc_lag_cost_limit_and_dual_ascent_hand_cases():
    # kappa (1 - gamma^T) / ((1 - gamma) T)
    assert baselines.cost_limit(5.0, 0.99, 300) == pytest.approx(
        5 * (1 - 0.99 ** 300) / (0.01 * 300))
    assert float(baselines.dual_ascent(0.3, 2.0, 1.5, 0.1)) == pytest.approx(0.35)
    assert float(baselines.dual_ascent(0.01, 0.0, 1.5, 0.1)) == 0.0  # projected at 0
    with pytest.raises(ValueError, match="baseline kind"):
        baselines.make_actor("cql", 3, 2, (8,), jax.random.key(0))


@pytest.fixture(scope="module")
def tiny():
    c = configs.get_config("smoke")
    c.hidden, c.batch_size, c.critic_steps, c.actor_steps, c.chunk = 16, 32, 20, 30, 30
    c.num_seeds = 2
    ds = data.make_dataset(envs.EnvParams(), 2500, jax.random.key(3))
    return c, ds, stages.device_data(ds)


def test_bc_safe_data_is_the_violation_free_episodes(tiny):
    _, ds, _ = tiny
    idx = stages.safe_episode_indices(ds)
    st = data.episode_stats(ds)
    ep = np.asarray(ds["episode_ids"])
    assert not np.any(st["violated"][ep[idx]])
    assert len(idx) == int(np.sum(~st["violated"][ep]))


def test_actor_stage_fits_bc_and_bc_lag_follows_dual_ascent(tiny, tmp_path):
    c, ds, d = tiny
    cg, cs, _ = stages.critic_stage(c, d, jax.random.key(1), str(tmp_path / "c"), 1)
    key = jax.random.key(5)
    g, p2, _ = stages.actor_stage(c, "bc_all", d, key, str(tmp_path / "a2"), 1)
    k_init, _ = jax.random.split(key)
    _, lg = stages.actor_stage(c, "bc_lag", d, key, str(tmp_path / "l"), 1, crit=(cg, cs))[1:]
    assert lg["lambda"].shape == (c.actor_steps, 2)
    # lambda follows the projected dual ascent on the logged E[Q_c(s, pi(s))]
    limit = baselines.cost_limit(c.kappa, c.gamma, envs.EnvParams().horizon)
    lam = np.zeros(2)
    for t in range(c.actor_steps):
        lam = np.maximum(0.0, lam + c.lag_lr * (lg["qc"][t] - limit))
        np.testing.assert_allclose(lg["lambda"][t], lam, atol=1e-5)
    # BC-All lowers its NLL on the data
    w = jnp.ones(d["observations"].shape[0])
    before = baselines.make_actor("bc_all", 11, 2, (c.hidden,) * 2,
                                  jax.random.split(k_init, 2)[0])[1]
    nll0 = float(baselines.weighted_bc_loss(g, before, d["observations"], d["actions"], w))
    nll1 = float(baselines.weighted_bc_loss(g, jax.tree.map(lambda x: x[0], p2),
                                            d["observations"], d["actions"], w))
    assert nll1 < nll0 - 0.1
    with pytest.raises(ValueError, match="needs crit"):
        stages.actor_stage(c, "bc_lag", d, key, str(tmp_path / "x"), 1)


def test_rollout_matches_a_hand_loop_over_env_step():
    params = envs.EnvParams()
    starts, _ = evaluate.eval_starts(jax.random.key(0), 6, params)

    def act(p, key, obs):  # state feedback that depends on the obs and a param
        return jnp.stack([p * jnp.tanh(obs[:, 2] - 1.0), jnp.sin(obs[:, 0])], -1)

    out = evaluate.rollout(act, 0.7, jax.random.key(1), starts, params)

    @jax.jit  # one env.step per call (jitted only to skip ~1800 eager dispatches)
    def hand_step(st):
        obs = envs.observation(st, params)
        a = act(0.7, None, obs[None])[0]
        return envs.step(None, st, a, params)[1:5]

    for e in range(6):
        st = jax.tree.map(lambda x: x[e], starts)
        ret = cost = 0.0
        for t in range(params.horizon):
            st, r, h, done = hand_step(st)
            ret += float(r)
            cost += float(h > 0)
            if bool(done):
                break
        assert float(out["returns"][e]) == pytest.approx(ret, abs=1e-3)
        assert float(out["costs"][e]) == cost
        assert int(np.sum(out["alive"][:, e])) == t + 1
        np.testing.assert_allclose(out["xy"][t + 1, e], [float(st.x), float(st.y)], atol=1e-4)
        assert np.isnan(np.asarray(out["xy"][t + 2:, e])).all()  # nothing after the end


def test_nn_action_distance_matches_brute_force():
    rng = np.random.default_rng(0)
    do, da = rng.normal(size=(300, 4)), rng.uniform(-1, 1, (300, 2))
    qo, qa = rng.normal(size=(7, 4)), rng.uniform(-1, 1, (7, 2))
    want = []
    for o, a in zip(qo, qa):
        nn = np.argsort(np.sum((do - o) ** 2, -1))[:50]
        want.append(np.min(np.linalg.norm(da[nn] - a, axis=-1)))
    got = evaluate.nn_action_distance(*(jnp.asarray(x, jnp.float32) for x in (do, da, qo, qa)))
    assert float(got) == pytest.approx(float(np.mean(want)), rel=1e-4)


def test_policy_metrics_hand_case():
    roll = {"returns": np.array([[1.0, 3.0, 2.0, 0.0]]), "costs": np.array([[0., 4., 0., 2.]])}
    avoid = np.array([True, True, True, False])
    m = evaluate.policy_metrics(roll, avoid, 0.0, 4.0, 5.0)
    assert m["r_norm"] == pytest.approx(6 / 16)
    assert m["c_norm"] == pytest.approx(1.5 / 5)
    assert m["violation_rate"] == pytest.approx(0.5)
    assert m["avoidable_violation_rate"] == pytest.approx(1 / 3)
    assert m["unavoidable_violation_rate"] == 1.0 and m["safe"]


def test_refined_policy_deterministic_mode_uses_z0_zero_and_the_selection_rule():
    flow = _random_flow()
    ref = LatentRefiner(3, 2, "ordered", (8,), rngs=nnx.Rngs(1))
    fg, fp = nnx.split(flow, nnx.Param)
    rg, rp = nnx.split(ref, nnx.Param)
    from icml26_jax.safe_flow_rl import critics
    cg, cp = critics.make_critics(3, 2, (8,), jax.random.key(2))
    obs = jax.random.normal(jax.random.key(3), (5, 3))
    a = jax.jit(policies.refined_policy(fg, rg, cg, 16, deterministic=True))(
        (rp, fp, cp, 0.5, 0.0), jax.random.key(4), obs)
    # zero-init heads: the refinement is the identity, so the action is f(0; s)
    np.testing.assert_allclose(a, flow(jnp.zeros((5, 2)), obs), atol=1e-6)
    act = jax.jit(policies.refined_policy(fg, rg, cg, 16))  # as evaluation runs it
    a1 = act((rp, fp, cp, 0.5, 0.0), jax.random.key(4), obs)
    # by hand: identity refinement, decode, critics, the selection rule
    z0 = jax.random.normal(jax.random.key(4), (5, 16, 2), jnp.float32)
    sb = jnp.broadcast_to(obs[:, None], (5, 16, 3))
    cand = flow(z0, sb)
    qh, qr, _ = critics.q_values(cg, cp, sb, cand)
    np.testing.assert_allclose(a1, policies.select_action(cand, qh, qr), atol=1e-6)
    np.testing.assert_array_equal(a1, act((rp, fp, cp, 0.5, 0.0), jax.random.key(4), obs))


def test_lipschitz_estimate_matches_finite_differences_and_identity_flow():
    flow = _random_flow()
    s = jnp.asarray([0.1, 0.4, -0.3])
    z = jax.random.normal(jax.random.key(0), (16, 2))
    lip, sig = bounds.lipschitz_estimate(flow, s, z)
    h = 1e-3
    for i in range(4):
        J = np.stack([(np.asarray(flow((z[i] + h * e)[None], s[None])[0])
                       - np.asarray(flow((z[i] - h * e)[None], s[None])[0])) / (2 * h)
                      for e in np.eye(2)], -1)
        assert float(sig[i]) == pytest.approx(np.linalg.svd(J, compute_uv=False)[0], rel=2e-2)
    assert float(lip) == pytest.approx(float(np.max(sig)))
    tanh_flow = ConditionalRealNVP(2, 3, (8,), 2, rngs=nnx.Rngs(0))  # zero-init: tanh(z)
    lip0, _ = bounds.lipschitz_estimate(tanh_flow, s, jnp.zeros((1, 2)))
    assert float(lip0) == pytest.approx(1.0, abs=1e-6)


def test_w2_bound_ratio_at_most_one_on_a_random_flow_and_refiner():
    flow = _random_flow(seed=4)
    ref = LatentRefiner(3, 2, "ordered", (8,), rngs=nnx.Rngs(1))
    g, p = nnx.split(ref, nnx.Param)
    p = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(7), x.shape), p)
    ref = nnx.merge(g, p)
    from icml26_jax.safe_flow_rl.refiner import refine
    eps = 0.5
    for j in range(3):
        s = jax.random.normal(jax.random.key(10 + j), (3,))
        z0 = jax.random.normal(jax.random.key(20 + j), (2048, 2))
        sb = jnp.broadcast_to(s, (2048, 3))
        z2, aux = refine(ref.g_h, ref.g_r, sb, z0, eps / 2, eps / 2)
        assert float(jnp.max(aux["shift_norm"])) > 0.1  # the refiner really moves
        ball = bounds.latent_ball(jax.random.key(j), 512, 2, 3.0 + eps)
        seg = z0[:512] + jax.random.uniform(jax.random.key(j), (512, 1)) * (z2 - z0)[:512]
        lip, _ = bounds.lipschitz_estimate(flow, s, jnp.concatenate([ball, seg]))
        ratio = float(bounds.coupling_w2(flow, s, z0, z2)) / (float(lip) * eps)
        assert 0.0 < ratio <= 1.0


def test_kl_through_the_flow_matches_the_closed_form_in_latent_space():
    flow = _random_flow(seed=2, scale=1.5)
    s = jnp.asarray([0.2, 0.1, -0.5])
    delta = jnp.asarray([0.3, -0.4])
    est, se = bounds.mc_kl_through_flow(flow, s, delta, jax.random.key(0), 20_000)
    assert abs(float(est) - 0.125) <= 3 * float(se)
    with pytest.raises(ValueError, match="space"):
        bounds.mc_kl_through_flow(flow, s, delta, jax.random.key(0), 10, space="u")
    u = jax.random.normal(jax.random.key(1), (64, 2)) * 3
    sb = jnp.broadcast_to(s, (64, 3))
    z, ld = flow.inverse_latent(u, sb)
    u_back, ld_f = flow.forward_latent(z, sb)
    np.testing.assert_allclose(u_back, u, atol=1e-4)
    np.testing.assert_allclose(ld, -ld_f, atol=1e-4)


def test_spearman_hand_cases():
    assert report.spearman([0.1, 0.5, 1.0, float("inf")], [1, 2, 3, 4]) == pytest.approx(1.0)
    assert report.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert report.spearman([1, 2, 3, 4], [1, 1, 2, 3]) == pytest.approx(
        np.corrcoef([1, 2, 3, 4], [1.5, 1.5, 3, 4])[0, 1])
    assert report.eps_name(float("inf")) == "ours_epsinf" and report.eps_name(0.5) == \
        "ours_eps0.5"


@pytest.mark.parametrize("field,value,match", [
    ("eps_sweep", (0.1, -0.5, 0.5), "eps_sweep"),
    ("env", "half_cheetah", "config.env"),
    ("kappa", 0.0, "kappa"),
    ("latent_budget", 0.3, "latent_budget"),
    ("refiner", "diffusion", "config.refiner"),
    ("num_candidates", 0, "num_candidates"),
    ("data_path", "/no/such/file.npz", "data_path"),
])
def test_bad_config_values_raise_value_errors_naming_the_field(field, value, match):
    c = configs.get_config("smoke")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        train.normalise_config(c)
        train.validate_config(c)


def test_flag_strings_normalise_to_budgets():
    c = configs.get_config("smoke")
    c.eps_sweep = ("0.1,0.5,inf",)  # how --config.eps_sweep=0.1,0.5,inf can arrive
    train.normalise_config(c)
    train.validate_config(c)
    assert c.eps_sweep == (0.1, 0.5, float("inf")) and c.latent_budget == 0.5


def _gain_policy(p, key, obs):  # module level: one compile; uses its key and its param
    noise = 0.1 * jax.random.normal(key, (obs.shape[0],))
    return jnp.stack([p * jnp.tanh(obs[:, 2] - 1.0) + noise, jnp.sin(obs[:, 0])], -1)


def test_rollouts_sharded_over_every_device_equal_one_device():
    # 3 seeds' rollouts on the 8 devices (padded) == on 1 device, seed by seed.
    from icml26_jax.core import mesh as mesh_lib

    env_params = envs.EnvParams()
    starts, _ = evaluate.eval_starts(jax.random.key(0), 5, env_params)
    act = _gain_policy
    gains = np.float32([0.3, 0.7, 1.1])
    one = evaluate.rollout_seeds(act, gains, jax.random.key(2), starts, env_params,
                                 mesh=mesh_lib.make_mesh((1,), (mesh_lib.RUNS,)))
    all_dev = evaluate.rollout_seeds(act, gains, jax.random.key(2), starts, env_params)
    assert all_dev["returns"].shape == (3, 5)
    for k in one:
        np.testing.assert_array_equal(one[k], all_dev[k])
    alone = evaluate.rollout(act, gains[1], jax.random.fold_in(jax.random.key(2), 1), starts,
                             env_params)
    np.testing.assert_allclose(all_dev["returns"][1], alone["returns"], rtol=1e-6)
