"""The sharded DSGD kernel against the float64 dense reference, across meshes and backends.

Tolerances: float32 kernels on iterates of magnitude ~1 over 200 steps accumulate ~1e-6
rounding; 1e-5 leaves a decade of room while any wrong neighbour, weight or noise index
moves the iterates by O(0.1).
"""

import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.mesh import RUNS, USERS
from icml26_jax.core.testing import CompileCounter, tree_allclose
from icml26_jax.dsgd_hp import baselines, dsgd, problems
from icml26_jax.dsgd_hp.graphs import make_graph

SCHED = dsgd.strongly_convex_schedule(2.0, 1.0, 20.0)


def _mesh(runs_dev, users_dev):
    return mesh_lib.make_mesh((runs_dev, users_dev), (RUNS, USERS))


@pytest.fixture(scope="module")
def quad16():
    prob = problems.quadratic(16, hetero=0.5)
    Z = baselines.noise_tensor(prob, T=200, runs=8, key=7)
    return prob, Z


@pytest.mark.parametrize("order", ["atc", "cta"])
@pytest.mark.parametrize("mesh_shape", [(1, 1), (1, 2), (1, 4), (1, 8), (2, 4)])
def test_shard_map_matches_dense_reference(quad16, order, mesh_shape):
    prob, Z = quad16
    gs = [make_graph(g, 16) for g in ("ring", "exp", "complete", "torus")]
    trace, state = dsgd.simulate(prob, gs, SCHED, T=200, runs=8, key=7, mesh=_mesh(*mesh_shape),
                                 order=order, log_every=50, return_state=True)
    x = np.asarray(state.x)
    for i, g in enumerate(gs):
        ref = baselines.dense_reference_dsgd(prob, g.W, SCHED, Z, order=order, log_every=50)
        np.testing.assert_allclose(x[i], ref["x"], atol=1e-5, err_msg=g.name)
        np.testing.assert_allclose(trace.gap_mean[i], ref["gap_mean"], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(trace.gap_worst[i], ref["gap_worst"], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(trace.consensus[i], ref["consensus"], rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(np.asarray(state.xc), ref["xc"], atol=1e-5)
    np.testing.assert_allclose(trace.gap_mean[-1], ref["gap_central"], rtol=1e-4, atol=1e-6)


def test_complete_graph_is_centralized_sgd(quad16):
    prob, _ = quad16
    tr = dsgd.simulate(prob, [make_graph("complete", 16)], SCHED, T=200, runs=8, key=1,
                       log_every=50)
    np.testing.assert_allclose(tr.gap_mean[0], tr.gap_mean[1], rtol=1e-5, atol=1e-7)
    assert tr.consensus.max() < 1e-10
    # ... and the centralized shadow is itself the W = J dense reference.
    Z = baselines.noise_tensor(prob, T=200, runs=8, key=1)
    ref = baselines.dense_reference_dsgd(prob, np.full((16, 16), 1 / 16), SCHED, Z, log_every=50)
    np.testing.assert_allclose(tr.gap_mean[1], ref["gap_central"], rtol=1e-4)


def test_jit_backend_matches_shard_map(quad16):
    prob, _ = quad16
    gs = [make_graph(g, 16) for g in ("ring", "torus", "exp", "er", "complete")]
    kw = dict(T=200, runs=8, key=3, log_every=100, mesh=_mesh(2, 4))
    a = dsgd.simulate(prob, gs, SCHED, **kw)
    b = dsgd.simulate(prob, gs, SCHED, backend="jit", **kw)
    c = dsgd.simulate(prob, gs, SCHED, mixing="dense", **kw)
    tree_allclose(b, a, rtol=1e-5, atol=1e-7)
    tree_allclose(c, a, rtol=1e-5, atol=1e-7)


def test_independent_of_device_count(quad16):
    # Noise is keyed by global run and user ids, so only the order of the psums over users
    # changes with the layout: iterates agree to float32 rounding (1e-6 absolute); gaps,
    # quadratic in x - x* ~ 0.02, agree to ~1e-5 relative.
    prob, _ = quad16
    gs = [make_graph(g, 16) for g in ("ring", "exp")]
    kw = dict(T=200, runs=16, key=5, log_every=100, return_state=True)
    one = dsgd.simulate(prob, gs, SCHED, mesh=_mesh(1, 1), **kw)
    for shape in [(1, 8), (4, 2)]:
        other = dsgd.simulate(prob, gs, SCHED, mesh=_mesh(*shape), **kw)
        tree_allclose(other[1][:2], one[1][:2], rtol=0, atol=1e-6, err_msg=str(shape))
        tree_allclose(other[0], one[0], rtol=1e-5, atol=1e-9, err_msg=str(shape))


def test_runs_are_a_prefix_and_seeds_repeat(quad16):
    prob, _ = quad16
    gs = [make_graph("exp", 16)]
    kw = dict(T=100, key=11, log_every=50)
    r32 = dsgd.simulate(prob, gs, SCHED, runs=32, **kw)
    r64 = dsgd.simulate(prob, gs, SCHED, runs=64, **kw)
    for a, b in zip(r32[1:], r64[1:]):
        if a is not None:
            np.testing.assert_array_equal(a, b[..., :32])
    again = dsgd.simulate(prob, gs, SCHED, runs=32, **kw)
    tree_allclose(again, r32, rtol=0, atol=0)
    other = dsgd.simulate(prob, gs, SCHED, runs=32, T=100, key=12, log_every=50)
    assert not np.allclose(other.gap_mean, r32.gap_mean)


def test_compiles_once_per_configuration():
    prob = problems.quadratic(8)
    gs = [make_graph(g, 8) for g in ("ring", "exp")]
    kw = dict(T=50, runs=8, log_every=25)
    dsgd.simulate(prob, gs, SCHED, key=0, **kw)  # warm: compiles
    with CompileCounter() as cc:
        dsgd.simulate(prob, gs, SCHED, key=1, **kw)
        dsgd.simulate(prob, gs, SCHED, key=2, **kw)
    assert cc.count == 0
    with CompileCounter() as cc:
        dsgd.simulate(problems.quadratic(16), [make_graph(g, 16) for g in ("ring", "exp")],
                      SCHED, key=0, **kw)
    assert cc.count >= 1  # a new n is a new program


def test_digits_sampling_noise_matches_reference():
    prob = problems.digits(4, reg="nonconvex")
    g = make_graph("exp", 4)
    sched = dsgd.constant_schedule(0.1)
    tr, state = dsgd.simulate(prob, [g], sched, T=60, runs=4, key=2, log_every=30,
                              eval_every=30, return_state=True)
    Z = baselines.noise_tensor(prob, T=60, runs=4, key=2)
    assert Z.dtype.kind == "i" and Z.max() < prob.shards.shape[1]
    ref = baselines.dense_reference_dsgd(prob, g.W, sched, Z, log_every=30)
    np.testing.assert_allclose(np.asarray(state.x[0]), ref["x"], atol=1e-5)
    # gradnorm is the running average of (1/n) sum_i ||grad f(x_i^t)||^2 over t = 30, 60.
    term60 = 2 * tr.gradnorm[0, 1] - tr.gradnorm[0, 0]
    expected = (problems.full_grad(prob, ref["x"], xp=np) ** 2).sum(-1).mean(-1)
    np.testing.assert_allclose(term60, expected, rtol=1e-4)


def test_single_user_sgd_matches_n1_simulation():
    prob = problems.quadratic(1)
    Z = baselines.noise_tensor(prob, T=100, runs=4, key=9)
    gaps = baselines.single_user_sgd(prob, SCHED, Z)
    tr = dsgd.simulate(prob, [make_graph("exp", 1)], SCHED, T=100, runs=4, key=9, log_every=50)
    np.testing.assert_allclose(tr.gap_mean[0], gaps[[49, 99]], rtol=1e-4)
    np.testing.assert_allclose(tr.gap_mean[1], gaps[[49, 99]], rtol=1e-4)  # centralized, n=1


def test_gradient_tracking_removes_heterogeneity_bias():
    # Noise-free, constant step: DSGD stalls at an O(alpha) heterogeneity bias on a ring,
    # gradient tracking converges to x*.
    prob = problems.quadratic(8, hetero=1.0)
    g = make_graph("ring", 8)
    Z = np.zeros((1500, 1, 8, 10))
    sched = dsgd.constant_schedule(0.02)  # GT is stable here (alpha L << (1 - lam)^2 scale)
    gt = baselines.gt_dsgd(prob, g.W, sched, Z)
    ds = baselines.dense_reference_dsgd(prob, g.W, sched, Z, log_every=1500)
    assert gt["gap_mean"][-1].max() < 1e-12
    assert ds["gap_mean"][-1].min() > 0.1


@pytest.mark.parametrize("a,lo,hi", [(0.25, -0.7, -0.4), (2.0, -1.15, -0.85)])
def test_convergence_order(a, lo, hi):
    # alpha_t = a / (mu (t + t0)): the gap decays like t^-2a for a < 1/2 and like 1/t above.
    from icml26_jax.dsgd_hp import metrics
    import math

    sched = dsgd.strongly_convex_schedule(a, 1.0, math.ceil(a * 10.0))
    tr = dsgd.simulate(problems.quadratic(4), [make_graph("exp", 4)], sched, T=2000, runs=512,
                       key=0, log_every=250)
    idx = [0, 1, 3, 7]  # t = 250, 500, 1000, 2000
    slope, _, _ = metrics.slope_ci(tr.ts[idx], tr.gap_mean[0, idx], 0.9, n_boot=10)
    assert lo <= slope <= hi, slope


@pytest.mark.parametrize("kwargs,match", [
    (dict(T=100, log_every=30), "T=100 must be a positive multiple of log_every=30"),
    (dict(T=0), "T must be a positive integer"),
    (dict(order="gossip"), "unknown order 'gossip'; allowed: atc, cta"),
    (dict(noise="cauchy"), "unknown noise 'cauchy'"),
    (dict(sigma=-1.0), "sigma must be >= 0"),
    (dict(backend="pmap"), "unknown backend"),
    (dict(eval_every=7), "eval_every=7 must be a positive divisor"),
    (dict(runs=12, mesh=mesh_lib.make_mesh((8, 1), (RUNS, USERS))), "multiples of the mesh"),
])
def test_errors(kwargs, match):
    kw = dict(T=100, runs=8, key=0, log_every=50) | kwargs
    with pytest.raises(ValueError, match=match):
        dsgd.simulate(problems.quadratic(8), [make_graph("exp", 8)], SCHED, **kw)


def test_graph_size_mismatch():
    with pytest.raises(ValueError, match="do not have n=8 users"):
        dsgd.simulate(problems.quadratic(8), [make_graph("exp", 16)], SCHED, T=10, runs=8,
                      key=0, log_every=10)
