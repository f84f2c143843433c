"""Online SGD on the sphere: record schedule, escape times on synthetic curves, vmap ==
loop, sharded == unsharded, determinism, chunk padding, learning of u at a linear budget,
and input validation."""

import math

import jax
import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.simplicity_bias import mcm, online

D = 8
CFG = mcm.MCMConfig(d=D, latent_corr="nonlinear")
OC = online.OnlineConfig(d=D, delta=1.0 / D, n_steps=150, n_records=20, replicas=8)


def test_record_steps_log_spaced_and_strict():
    ns = online.record_steps(1280, 200)
    assert ns[0] == 1 and ns[-1] == 1280 and len(ns) == 200
    assert np.all(np.diff(ns) >= 1)
    np.testing.assert_array_equal(online.record_steps(5, 5), [1, 2, 3, 4, 5])
    gaps = np.diff(np.log(ns[150:]))  # where rounding is < 0.3 %: log-uniform
    assert gaps.max() < 1.5 * gaps.min() + 1e-3


def test_escape_time_on_synthetic_curves():
    ns = np.array([1, 2, 4, 8, 16])
    rising = np.array([[0.1, 0.3, 0.6, 0.8, 0.9],
                       [-0.1, -0.4, -0.55, -0.7, -0.9],  # sign-ambiguous: |m| counts
                       [0.0, 0.1, 0.2, 0.3, 0.4]])
    assert online.escape_time(ns, rising, 0.5) == 4.0  # median crosses at the 3rd record
    assert online.escape_time(ns, rising, 0.95) == math.inf  # never
    assert online.escape_time(ns, np.full((3, 5), 0.7), 0.5) == 1.0  # at the first record
    with pytest.raises(ValueError, match="m must have shape"):
        online.escape_time(ns, rising[:, :4], 0.5)


def test_vmap_over_replicas_equals_loop_with_same_keys():
    key = jax.random.key(4)
    res = online.run_online(key, CFG, OC._replace(replicas=3))
    one = jax.jit(online.run_replica, static_argnums=(1, 2))
    for r in range(3):
        m_u, m_v = one(jax.random.fold_in(key, r), CFG, OC._replace(replicas=3))
        # Same keys and arithmetic; only XLA's fusion of the batched program may differ
        # (float32 ulps over 150 steps).
        np.testing.assert_allclose(res.m_u[r], m_u, atol=1e-5)
        np.testing.assert_allclose(res.m_v[r], m_v, atol=1e-5)
    assert res.m_u.shape == (3, OC.n_records) and res.ns.shape == (OC.n_records,)
    assert np.all(res.m_u ** 2 + res.m_v ** 2 <= 1 + 1e-5)  # ||w|| = 1, u _|_ v


def test_sharded_over_devices_equals_unsharded_and_is_deterministic():
    key = jax.random.key(7)
    mesh = mesh_lib.runs_mesh(OC.replicas)
    assert mesh.shape[mesh_lib.RUNS] == 8  # conftest forces 8 CPU devices
    plain = online.run_online(key, CFG, OC)
    sharded = online.run_online(key, CFG, OC, mesh=mesh)
    np.testing.assert_allclose(sharded.m_u, plain.m_u, atol=1e-5)  # as in the vmap test
    np.testing.assert_allclose(sharded.m_v, plain.m_v, atol=1e-5)
    again = online.run_online(key, CFG, OC)
    np.testing.assert_array_equal(again.m_u, plain.m_u)
    np.testing.assert_array_equal(again.m_v, plain.m_v)
    other = online.run_online(jax.random.key(8), CFG, OC)
    assert not np.allclose(other.m_u, plain.m_u)
    # Replicas differ from each other (own spikes, init and noise).
    assert np.unique(np.round(plain.m_u[:, -1], 6)).size == OC.replicas


def test_chunk_padding_does_not_change_the_trajectory():
    # d = 64 gives chunks of 128 steps: 300 and 260 steps pad the last chunk differently
    # but draw the same noise, so the shared prefix of the (all-steps) records agrees.
    cfg = mcm.MCMConfig(d=64)
    oc = online.OnlineConfig(d=64, delta=1 / 64, n_steps=300, n_records=300, replicas=2)
    long = online.run_online(jax.random.key(1), cfg, oc)
    short = online.run_online(jax.random.key(1), cfg, oc._replace(n_steps=260, n_records=260))
    np.testing.assert_array_equal(long.ns[:260], short.ns)
    np.testing.assert_allclose(long.m_u[:, :260], short.m_u, atol=1e-6)
    assert not np.allclose(long.m_u[:, 0], long.m_u[:, -1])


def test_pairwise_spike_learned_at_linear_budget():
    d = 32
    oc = online.OnlineConfig(d=d, delta=1 / d, n_steps=30 * d, n_records=30, replicas=16,
                             link="both")
    res = online.run_online(jax.random.key(0), mcm.MCMConfig(d=d), oc)
    med_u = np.median(np.abs(res.m_u), axis=0)
    # Init noise |m| ~ 0.8/sqrt(d) = 0.14; the noise floor at eta = 1 is ~0.75 (spec).
    assert med_u[0] < 0.3 and med_u[-1] > 0.6
    assert online.escape_time(res.ns, res.m_u, 0.5) < oc.n_steps
    # v (fourth cumulant only) stays in the init noise at this budget.
    assert np.median(np.abs(res.m_v[:, -1])) < 0.35


@pytest.mark.parametrize("change, word", [
    (dict(link="uv"), "link"),
    (dict(delta=0.0), "delta"),
    (dict(n_records=200), "n_records"),
    (dict(replicas=0), "replicas"),
    (dict(thr=1.5), "thr"),
    (dict(a=0.0), "a must"),
])
def test_online_config_errors_name_the_argument(change, word):
    with pytest.raises(ValueError, match=word):
        online.run_online(jax.random.key(0), CFG, OC._replace(**change))


def test_run_online_rejects_mismatched_or_small_d():
    with pytest.raises(ValueError, match="must agree"):
        online.run_online(jax.random.key(0), CFG._replace(d=16), OC)
    with pytest.raises(ValueError, match="d must be"):
        online.run_online(jax.random.key(0), CFG._replace(d=1), OC._replace(d=1))
    with pytest.raises(ValueError, match="latent_corr"):
        online.run_online(jax.random.key(0), CFG._replace(latent_corr="cubic"), OC)


@pytest.mark.slow
def test_segmented_early_stop_equals_one_call_prefix():
    # The d^3 runs go in segments with a host check; the records they keep are exactly
    # those of the one-call run, and they stop once n* + stop_extra steps are done.
    d = 64  # chunks of 128 steps
    cfg = mcm.MCMConfig(d=d)
    oc = online.OnlineConfig(d=d, delta=1 / d, n_steps=40 * d, n_records=60, replicas=8,
                             link="both")
    full = online.run_online(jax.random.key(3), cfg, oc)
    seen = []
    part = online.run_online(jax.random.key(3), cfg, oc, stop_extra=2 * d, watch="u",
                             segment_steps=128, progress=lambda n, m: seen.append(n))
    n_star = online.escape_time(full.ns, full.m_u, oc.thr)
    assert n_star < oc.n_steps  # u escapes early at this budget
    k = part.ns.shape[0]
    assert part.ns[-1] >= n_star + 2 * d and k < oc.n_records  # stopped early
    np.testing.assert_array_equal(part.ns, full.ns[:k])
    np.testing.assert_allclose(part.m_u, full.m_u[:, :k], atol=1e-6)
    np.testing.assert_allclose(part.m_v, full.m_v[:, :k], atol=1e-6)
    assert seen == sorted(seen) and len(seen) >= 2
    # Sharded segments give the same records.
    sharded = online.run_online(jax.random.key(3), cfg, oc, mesh=mesh_lib.runs_mesh(8),
                                stop_extra=2 * d, watch="u", segment_steps=128)
    np.testing.assert_allclose(sharded.m_u, part.m_u, atol=1e-5)
    with pytest.raises(ValueError, match="watch"):
        online.run_online(jax.random.key(3), cfg, oc, stop_extra=1, watch="w")
    with pytest.raises(ValueError, match="stop_extra"):
        online.run_online(jax.random.key(3), cfg, oc, stop_extra=-1)


def test_group_runs_dims_and_latents_as_one_program():
    # Configurations of the padded (largest) d are exactly their single runs; the others
    # differ only through the noise drawn at the padded dimension.
    cfgs = [mcm.MCMConfig(d=8), mcm.MCMConfig(d=16), mcm.MCMConfig(d=16, latent_corr="nonlinear")]
    ocs = [online.OnlineConfig(d=c.d, delta=1.0 / c.d, n_steps=20 * c.d, n_records=20,
                               replicas=4) for c in cfgs]
    keys = [jax.random.key(k) for k in (1, 2, 3)]
    group = online.run_online_group(keys, cfgs, ocs, mesh=mesh_lib.runs_mesh(12))
    for i in (1, 2):
        single = online.run_online(keys[i], cfgs[i], ocs[i])
        np.testing.assert_array_equal(group[i].ns, single.ns)
        np.testing.assert_allclose(group[i].m_u, single.m_u, atol=1e-5)
        np.testing.assert_allclose(group[i].m_v, single.m_v, atol=1e-5)
    assert group[0].ns[-1] == 160 and group[1].ns[-1] == 320  # own budgets and records
    assert np.all(group[0].m_u ** 2 + group[0].m_v ** 2 <= 1 + 1e-5)
    with pytest.raises(ValueError, match="may differ only"):
        online.run_online_group(keys[:2], cfgs[:2], [ocs[0], ocs[1]._replace(link="u")])
    with pytest.raises(ValueError, match="one key per"):
        online.run_online_group(keys[:1], cfgs[:2], ocs[:2])


@pytest.mark.slow
def test_padded_replica_stays_in_its_subspace_and_has_the_same_law():
    d, d_pad = 8, 24
    cfg = mcm.MCMConfig(d=d)
    oc = online.OnlineConfig(d=d, delta=1.0 / d, n_steps=400, n_records=10, replicas=1)
    st = online._Static(cfg._replace(d=d_pad), "both", oc.a, 10, 50, 8, jax.random.key_impl(
        jax.random.key(0)))
    p = jax.tree.map(jax.numpy.asarray, online.params_of(cfg, oc))
    s = online.advance(online.init_replica(jax.random.key(0), p, st), p, 0, st)
    for x in (s.w, s.u, s.v):
        np.testing.assert_array_equal(np.asarray(x)[d:], 0.0)
    np.testing.assert_allclose([np.linalg.norm(s.w), np.linalg.norm(s.u)], 1.0, atol=1e-5)
    assert abs(float(s.u @ s.v)) < 1e-6
    # Same law as the unpadded run: final |m_u| over 64 replicas, padded vs not.
    big = online.OnlineConfig(d=d_pad, delta=1.0 / d_pad, n_steps=10, n_records=10, replicas=64)
    oc64 = oc._replace(replicas=64)
    padded = online.run_online_group([jax.random.key(5), jax.random.key(6)],
                                     [cfg, mcm.MCMConfig(d=d_pad)],
                                     [oc64, big._replace(n_steps=400)])[0]
    plain = online.run_online(jax.random.key(7), cfg, oc64)
    assert abs(np.median(np.abs(padded.m_u[:, -1])) - np.median(np.abs(plain.m_u[:, -1]))) < 0.08


def test_indexed_latents_match_the_static_sampler():
    cfg = mcm.MCMConfig(d=4, tau=0.3)
    key = jax.random.key(2)
    for i, corr in enumerate(mcm.LATENT_CORRS):
        lam, nu = mcm.sample_latents_indexed(key, 100_000, cfg, np.int32(i))
        lam_s, _ = mcm.sample_latents(key, 10, cfg._replace(latent_corr=corr))
        np.testing.assert_array_equal(lam[:10], lam_s)  # the same Gaussian latent
        assert set(np.unique(np.asarray(nu))) == {-1.0, 1.0}
        c = float(np.mean(lam * nu))
        want = {"independent": 0.0, "sign": math.sqrt(2 / math.pi) / math.sqrt(1.09),
                "nonlinear": 0.0}[corr]
        assert abs(c - want) < 0.01, (corr, c)
    lam, nu = mcm.sample_latents_indexed(key, 100_000, cfg, np.int32(2))
    assert abs(float(np.mean(lam ** 3 * nu)) - 1.106) < 0.05  # the mixed cumulant
