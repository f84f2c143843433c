"""Baselines (spec §Tests "Baselines"): FINCH on hand-made point sets, FPL's server, FedAvg
weighting, FedProx against FedAvg, and the FedProto / FPL losses against numpy references.

Tolerances: the losses are float32 against float64 numpy references of O(1) values (1e-5
relative); FedAvg and the prox penalty are sums of a few float32 products (1e-6).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from icml26_jax.fml import baselines as B

# Jitted once per module (eager calls dispatch op by op).
fpl_loss = jax.jit(B.fpl_loss, static_argnames=("per_positive",))
fedproto_server = jax.jit(B.fedproto_server, static_argnames=("n_classes",))
fedproto_loss = jax.jit(B.fedproto_loss)


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _groups(rng, centres, per, spread):
    labels = np.repeat(np.arange(len(centres)), per)
    return centres[labels] + spread * rng.normal(size=(len(labels), centres.shape[1])), labels


def _n_clusters(labels):
    return len(np.unique(labels))


def test_finch_three_tight_groups():
    rng = np.random.default_rng(0)
    x, truth = _groups(rng, np.eye(5)[:3], 3, 0.02)
    # FINCH is cosine: wildly different norms must not change the partition
    x = x * rng.uniform(0.1, 10.0, size=(len(x), 1))
    levels = B.finch(x)
    assert [_n_clusters(lv) for lv in levels] == [3, 1]
    assert adjusted_rand_score(truth, levels[0]) == 1.0
    assert all(lv.shape == (9,) for lv in levels)


def test_finch_hierarchy_of_groups():
    rng = np.random.default_rng(1)
    # two orthogonal super-groups, each of three groups 0.3 apart, each of three points
    supers = np.eye(8)[:2]
    offsets = 0.3 * np.eye(8)[2:5]
    centres = np.concatenate([s + offsets for s in supers])  # [6, 8]
    x, truth = _groups(rng, centres, 3, 0.005)
    levels = B.finch(x)
    assert [_n_clusters(lv) for lv in levels] == [6, 2, 1]
    assert adjusted_rand_score(truth, levels[0]) == 1.0
    assert adjusted_rand_score(truth // 3, levels[1]) == 1.0


def test_finch_small_sets():
    np.testing.assert_array_equal(B.finch(np.ones((1, 3)))[0], [0])
    pair = B.finch(np.array([[1.0, 0.0], [0.9, 0.1]]))
    assert len(pair) == 1 and _n_clusters(pair[0]) == 1  # each is the other's neighbour
    x = np.array([[1.0, 0, 0], [1.0, 0.05, 0], [0, 0, 1.0], [0, 0.05, 1.0]])
    levels = B.finch(x)
    assert [_n_clusters(lv) for lv in levels] == [2, 1]
    assert levels[0][0] == levels[0][1] != levels[0][2] == levels[0][3]


def _fpl_inputs(rng, N=6, C=4, p=5):
    protos = rng.normal(size=(N, C, p)).astype(np.float32)
    present = np.zeros((N, C), bool)
    # class 0: two domains (clients 0-2 near e0, 3-5 near e1) -> 2 clusters
    protos[:3, 0] = 3 * np.eye(p)[0] + 0.02 * rng.normal(size=(3, p))
    protos[3:, 0] = 3 * np.eye(p)[1] + 0.02 * rng.normal(size=(3, p))
    present[:, 0] = True
    present[4, 1] = True  # class 1: one client
    present[[1, 2], 2] = True  # class 2: two clients -> one cluster (their mean)
    return protos, present  # class 3: nobody


def test_fpl_server_partitions_and_edge_cases():
    protos, present = _fpl_inputs(np.random.default_rng(2))
    cp, cm, unb = B.fpl_server(protos, present)
    assert cp.shape == (4, 6, 5) and cm.shape == (4, 6) and unb.shape == (4, 5)
    assert cm.sum(1).tolist() == [2, 1, 1, 0]
    want0 = np.stack([protos[:3, 0].mean(0), protos[3:, 0].mean(0)])
    got0 = cp[0, :2][np.argsort(-cp[0, :2, 0])]  # the e0 cluster first
    np.testing.assert_allclose(got0, want0, rtol=1e-6)
    np.testing.assert_allclose(unb[0], want0.mean(0), rtol=1e-6)
    np.testing.assert_allclose(cp[1, 0], protos[4, 1])
    np.testing.assert_allclose(cp[2, 0], protos[[1, 2], 2].mean(0), rtol=1e-6)
    np.testing.assert_allclose(unb[2], protos[[1, 2], 2].mean(0), rtol=1e-6)
    np.testing.assert_array_equal(cp[3], 0.0)
    np.testing.assert_array_equal(cp[0, 2:], 0.0)
    # the pure_callback wrapper under jit and vmap (seeds) gives the same arrays
    two = jax.jit(jax.vmap(B.fpl_server_callback))(jnp.asarray(np.stack([protos, protos])),
                                                   jnp.asarray(np.stack([present, present])))
    for got, want in zip(two, (cp, cm, unb)):
        np.testing.assert_array_equal(np.asarray(got[1]), want)


def test_fedavg_is_weighted_by_n():
    rng = np.random.default_rng(3)
    params = {"w": rng.normal(size=(3, 2, 2)).astype(np.float32),
              "b": rng.normal(size=(3,)).astype(np.float32)}
    n = np.array([1, 2, 7], np.int32)
    out = B.fedavg_aggregate(jax.tree.map(jnp.asarray, params), jnp.asarray(n))
    for k in params:
        np.testing.assert_allclose(np.asarray(out[k]), np.tensordot(n / 10, params[k], 1),
                                   rtol=1e-6)
    assert not np.allclose(np.asarray(out["b"]), params["b"].mean(0))
    with pytest.raises(ValueError, match="n"):
        B.fedavg_aggregate({"w": jnp.zeros((2, 3))}, jnp.asarray(n))


def _local_quadratic(theta_g, a, b, mu, lr=0.1, steps=3):
    """A few GD steps on ½||A θ - b||² (+ prox unless ``mu`` is None: FedAvg), from θ^r (the
    penalty's gradient is 0 at step 1 and nonzero afterwards)."""
    def loss(t):
        r = a @ t["x"] - b
        ce = 0.5 * jnp.sum(r * r)
        return ce if mu is None else ce + B.prox_penalty(t, theta_g, mu)
    t = theta_g
    for _ in range(steps):
        t = jax.tree.map(lambda p, g: p - lr * g, t, jax.grad(loss)(t))
    return t


def test_prox_penalty_and_fedprox_vs_fedavg():
    rng = np.random.default_rng(4)
    p = {"x": jnp.asarray(rng.normal(size=3), jnp.float32), "y": jnp.ones((2, 2))}
    q = {"x": jnp.asarray(rng.normal(size=3), jnp.float32), "y": jnp.zeros((2, 2))}
    want = 0.5 * 0.3 * (np.sum((np.asarray(p["x"]) - np.asarray(q["x"])) ** 2) + 4.0)
    assert float(B.prox_penalty(p, q, 0.3)) == pytest.approx(want, rel=1e-6)

    theta_g = {"x": jnp.zeros(3)}
    A = jnp.asarray(rng.normal(size=(2, 4, 3)), jnp.float32)
    b = jnp.asarray(rng.normal(size=(2, 4)), jnp.float32)
    n = jnp.asarray([3, 5])

    @jax.jit
    def rounds():
        out = []
        for mu in (None, 0.0, 1.0):  # FedAvg, FedProx mu = 0, FedProx mu = 1
            local = jax.vmap(lambda a, bb: _local_quadratic(theta_g, a, bb, mu))(A, b)
            out.append(B.fedavg_aggregate(local, n)["x"])
        return out

    avg, prox0, prox1 = (np.asarray(r) for r in rounds())
    np.testing.assert_allclose(prox0, avg, rtol=1e-6, atol=1e-7)
    assert np.abs(prox1 - avg).max() > 1e-3
    # the prox pull keeps the clients closer to theta^r = 0
    assert np.linalg.norm(prox1) < np.linalg.norm(avg)


def test_fedproto_server_and_loss_match_numpy():
    rng = np.random.default_rng(5)
    N, n, p, C = 3, 10, 4, 5
    h = rng.normal(size=(N, n, p)).astype(np.float32)
    y = rng.integers(0, 3, size=(N, n))
    y[0, :2] = 3  # class 3 only at client 0
    mask = rng.random((N, n)) < 0.8
    mask[0, :2] = True
    y[1, -1], mask[1, -1] = 4, False  # class 4 only in padding
    protos, present = fedproto_server(jnp.asarray(h), jnp.asarray(y, jnp.int32),
                                        jnp.asarray(mask), C)
    ref = np.zeros((C, p))
    for c in range(C):
        means = [h[i][(y[i] == c) & mask[i]].mean(0) for i in range(N)
                 if ((y[i] == c) & mask[i]).any()]
        if means:
            ref[c] = np.mean(means, 0)
    np.testing.assert_allclose(np.asarray(protos), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(present), [True, True, True, True, False])

    hb = rng.normal(size=(8, p)).astype(np.float32)
    yb = np.array([0, 1, 2, 3, 4, 4, 0, 1])
    wb = np.array([1, 1, 0, 1, 1, 1, 1, 0], np.float32)
    per = np.where(np.asarray(present)[yb], ((hb - ref[yb]) ** 2).mean(1), 0.0)
    got = fedproto_loss(jnp.asarray(hb), jnp.asarray(yb, jnp.int32), protos, present,
                          w=jnp.asarray(wb), mu=0.5)
    assert float(got) == pytest.approx(0.5 * (wb @ per) / wb.sum(), rel=1e-5)
    got = fedproto_loss(jnp.asarray(hb), jnp.asarray(yb, jnp.int32), protos, present)
    assert float(got) == pytest.approx(per.mean(), rel=1e-5)


def _np_fpl(h, y, cp, cm, unb, w, T, per_positive):
    out = []
    for b in range(len(h)):
        if not cm[y[b]].any():
            out.append(0.0)
            continue
        hn = h[b] / np.linalg.norm(h[b])
        pos = [hn @ _unit(q) / T for q in cp[y[b]][cm[y[b]]]]
        neg = [hn @ _unit(cp[c, j]) / T for c in range(len(cp)) for j in range(cp.shape[1])
               if c != y[b] and cm[c, j]]
        if per_positive:
            info = np.mean([-np.log(np.exp(s) / (np.exp(s) + np.sum(np.exp(neg)))) for s in pos])
        else:
            e_pos = np.sum(np.exp(pos))
            info = -np.log(e_pos / (e_pos + np.sum(np.exp(neg))))
        out.append(info + np.mean((h[b] - unb[y[b]]) ** 2))
    out = np.array(out)
    return (w @ out) / w.sum()


@pytest.mark.parametrize("per_positive", [False, True])
def test_fpl_loss_matches_numpy(per_positive):
    rng = np.random.default_rng(6)
    protos, present = _fpl_inputs(rng)
    cp, cm, unb = B.fpl_server(protos, present)
    h = rng.normal(size=(10, 5)).astype(np.float64)
    y = np.array([0, 1, 2, 3, 0, 0, 1, 2, 3, 0])
    w = np.array([1, 1, 1, 1, 0, 1, 1, 1, 0, 1], np.float64)
    T = 0.5  # a large T keeps exp() of the float64 reference in range for any similarity
    want = _np_fpl(h, y, cp.astype(np.float64), cm, unb.astype(np.float64), w, T, per_positive)
    got = fpl_loss(jnp.asarray(h, jnp.float32), jnp.asarray(y, jnp.int32), jnp.asarray(cp),
                     jnp.asarray(cm), jnp.asarray(unb), w=jnp.asarray(w, jnp.float32), T=T,
                     per_positive=per_positive)
    assert float(got) == pytest.approx(want, rel=1e-5)
    # the RethinkFL form (sum over positives) and the per-positive form differ when a class
    # has several clusters
    other = fpl_loss(jnp.asarray(h[:1], jnp.float32), jnp.asarray(y[:1], jnp.int32),
                       jnp.asarray(cp), jnp.asarray(cm), jnp.asarray(unb), T=T,
                       per_positive=not per_positive)
    this = fpl_loss(jnp.asarray(h[:1], jnp.float32), jnp.asarray(y[:1], jnp.int32),
                      jnp.asarray(cp), jnp.asarray(cm), jnp.asarray(unb), T=T,
                      per_positive=per_positive)
    assert abs(float(other) - float(this)) > 1e-3


def test_prototype_losses_finite_on_empty_target():
    """Round 1's placeholder targets (nothing present): 0 loss, 0 gradient, no NaN."""
    h = jnp.asarray(np.random.default_rng(7).normal(size=(4, 5)), jnp.float32)
    y = jnp.asarray([0, 1, 2, 0], jnp.int32)

    def f(x):
        return (B.fpl_loss(x, y, jnp.zeros((3, 4, 5)), jnp.zeros((3, 4), bool), jnp.zeros((3, 5)))
                + B.fpl_loss(x, y, jnp.zeros((3, 4, 5)), jnp.zeros((3, 4), bool),
                             jnp.zeros((3, 5)), per_positive=True)
                + B.fedproto_loss(x, y, jnp.zeros((3, 5)), jnp.zeros((3,), bool)))

    val, grad = jax.jit(jax.value_and_grad(f))(h)
    assert float(val) == 0.0 and np.all(np.asarray(grad) == 0.0)
