"""Gradient Smoothing operators and the optax transformation (spec §Tests)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26_jax.core.optim import promotion_safe
from icml26_jax.grad_smoothing import transform as T

L = 8


def _params(key=0, depth=L, d=6):
    ks = jax.random.split(jax.random.key(key), 5)
    return {
        "blocks": {"layers": {"attn": {"q": {"kernel": jax.random.normal(ks[0], (depth, d, d))}},
                              "mlp": {"up": {"kernel": jax.random.normal(ks[1], (depth, d, 2 * d))}},
                              "norm1": {"scale": 1 + 0.1 * jax.random.normal(ks[2], (depth, d))}}},
        "embed": {"embedding": jax.random.normal(ks[3], (11, d))},
        "norm": {"scale": jnp.ones((d,))},
    }


def test_window_matrix_rows():
    M = T.window_matrix(4)
    np.testing.assert_allclose(M, [[1 / 2, 1 / 2, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0],
                                   [0, 1 / 3, 1 / 3, 1 / 3], [0, 0, 1 / 2, 1 / 2]])
    M2 = T.window_matrix(6, radius=2)
    np.testing.assert_allclose(M2[0], [1 / 3] * 3 + [0] * 3)
    np.testing.assert_allclose(M2[2], [1 / 5] * 5 + [0])


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.5, 0.75, 1.0])
def test_smoothing_matrix_spectrum(alpha):
    S = T.smoothing_matrix(L, alpha)
    np.testing.assert_allclose(S.sum(1), 1.0, atol=1e-12)
    ev = np.linalg.eigvals(S)
    assert np.abs(ev.imag).max() < 1e-9
    assert ev.real.min() >= 1 - 4 * alpha / 3 - 1e-9 and ev.real.max() <= 1 + 1e-9
    perm = np.random.default_rng(0).permutation(L)
    Sp = T.smoothing_matrix(L, alpha, permutation=perm)
    np.testing.assert_allclose(np.sort(np.linalg.eigvals(Sp).real), np.sort(ev.real),
                               atol=1e-9)
    sym_min = np.linalg.eigvalsh((S + S.T) / 2).min()
    if alpha in (0.2, 0.5, 0.75):
        assert sym_min > 0
    if alpha == 1.0:
        assert sym_min < 0


def test_symmetric_part_boundary_values():
    assert np.linalg.eigvalsh((lambda S: (S + S.T) / 2)(T.smoothing_matrix(8, 0.75))).min() \
        == pytest.approx(0.024, abs=1e-3)
    assert np.linalg.eigvalsh((lambda S: (S + S.T) / 2)(T.smoothing_matrix(8, 0.8))).min() < 0


def _apply(tx, u, params=None):
    out, _ = tx.update(u, tx.init(params if params is not None else u), params)
    return out


def test_plain_constant_and_alternating():
    a = 0.3
    tx = T.depth_smoothing(a)
    const = jnp.broadcast_to(jnp.arange(1.0, 7.0), (L, 6))
    u = {"blocks": {"w": const}}
    np.testing.assert_allclose(_apply(tx, u)["blocks"]["w"], const, rtol=1e-6)
    sign = jnp.asarray((-1.0) ** np.arange(L))[:, None]
    alt = {"blocks": {"w": sign * const}}
    out = _apply(tx, alt)["blocks"]["w"] / (sign * const)
    np.testing.assert_allclose(out[1:-1], 1 - 4 * a / 3, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out)[[0, -1]], 1 - a, rtol=1e-5)


@pytest.mark.parametrize("granularity", ["block", "leaf"])
def test_norm_and_dir_preserve_norms(granularity):
    u = _params(1)
    blocks = lambda t: jax.tree.leaves(t["blocks"])  # noqa: E731
    for mode in ("norm", "dir"):
        out = _apply(T.depth_smoothing(0.5, mode=mode, norm_granularity=granularity), u)
        if granularity == "block":
            n0 = sum(np.sum(np.square(x).reshape(L, -1), 1) for x in blocks(u))
            n1 = sum(np.sum(np.square(x).reshape(L, -1), 1) for x in blocks(out))
            np.testing.assert_allclose(n1, n0, rtol=1e-5)
        else:
            for x, y in zip(blocks(u), blocks(out)):
                np.testing.assert_allclose(np.linalg.norm(np.reshape(y, (L, -1)), axis=1),
                                           np.linalg.norm(np.reshape(x, (L, -1)), axis=1),
                                           rtol=1e-5)
        # Non-block leaves untouched.
        np.testing.assert_array_equal(out["embed"]["embedding"], u["embed"]["embedding"])
        assert not np.allclose(blocks(out)[0], blocks(u)[0])


def test_dir_identity_for_shared_direction():
    d = jax.random.normal(jax.random.key(3), (5, 7))
    scales = jnp.arange(1.0, L + 1)[:, None, None]
    u = {"blocks": {"w": scales * d[None]}}
    out = _apply(T.depth_smoothing(0.7, mode="dir"), u)
    np.testing.assert_allclose(out["blocks"]["w"], u["blocks"]["w"], rtol=1e-5)


def test_plain_matches_explicit_matrix():
    u = _params(2)
    S = T.smoothing_matrix(L, 0.2)
    out = _apply(T.depth_smoothing(0.2), u)
    for x, y in zip(jax.tree.leaves(u["blocks"]), jax.tree.leaves(out["blocks"])):
        np.testing.assert_allclose(y, np.einsum("lj,j...->l...", S, np.asarray(x)),
                                   rtol=1e-5, atol=1e-6)
    # A traced matrix (as vmapped replicas pass it) gives the same result.
    tx = T.depth_smoothing(matrix=jnp.asarray(S, jnp.float32))
    out2 = jax.jit(lambda u: _apply(tx, u))(u)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), out, out2)


def _run(tx, params, grads_fn, steps=3):
    state = tx.init(params)
    for t in range(steps):
        g = grads_fn(params, t)
        upd, state = tx.update(g, state, params)
        params = optax.apply_updates(params, upd)
    return params


def _grads(params, t):
    return jax.tree.map(lambda x: jnp.sin(x * (t + 1.3)) + 0.1 * x, params)


def _max_diff(a, b):
    return max(float(jnp.abs(x - y).max()) for x, y in zip(jax.tree.leaves(a),
                                                           jax.tree.leaves(b)))


def test_alpha0_equals_optax_adamw():
    p = _params()
    ours = T.smoothed_optimizer("adamw", 1e-2, weight_decay=0.1, wd_mask=None, b1=0.9, b2=0.95)
    ref = promotion_safe(optax.adamw(1e-2, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1,
                                     mask=T.default_wd_mask))
    assert _max_diff(_run(ours, p, _grads), _run(ref, p, _grads)) < 1e-7


def test_alpha0_equals_optax_sgd():
    p = _params()
    for nesterov in (False, True):
        ours = T.smoothed_optimizer("sgd", 0.1, weight_decay=0.0, momentum=0.9,
                                    sgd_nesterov=nesterov)
        ref = optax.sgd(0.1, momentum=0.9, nesterov=nesterov)
        assert _max_diff(_run(ours, p, _grads), _run(ref, p, _grads)) < 1e-7


def test_alpha0_equals_optax_muon():
    p = _params()
    ours = T.smoothed_optimizer("muon", 0.02, weight_decay=0.1, wd_mask=lambda q: jax.tree.map(
        lambda _: True, q), adam_lr=2e-3, b1=0.9, b2=0.95, muon_beta=0.95)
    ref = promotion_safe(optax.contrib.muon(
        0.02, beta=0.95, weight_decay=0.1, adam_b1=0.9, adam_b2=0.95, adam_weight_decay=0.1,
        adam_learning_rate=2e-3, nesterov=True,
        muon_weight_dimension_numbers=T.muon_dimension_numbers))
    assert _max_diff(_run(ours, p, _grads), _run(ref, p, _grads)) < 1e-7


def test_muon_orthogonalises_scanned_kernels():
    p = _params(d=16)
    # The pre-smoothing stage of the Muon chain (scale_by_muon on the scanned kernels).
    pre = promotion_safe(optax.partition({
        "muon": optax.contrib.scale_by_muon(weight_dimension_numbers=T._masked_dims),
        "adam": optax.scale_by_adam()}, T._muon_labels))
    g = _grads(p, 0)
    upd, _ = pre.update(g, pre.init(p), p)
    k = upd["blocks"]["layers"]["attn"]["q"]["kernel"]
    for layer in range(L):
        s = np.linalg.svd(np.asarray(k[layer]), compute_uv=False)
        assert s.min() >= 0.5 and s.max() <= 1.5, s
    # The default 2-D rule would route the 3-D scanned kernels to the Adam branch.
    default_labels = jax.tree.map(lambda x: "muon" if x.ndim == 2 else "adam", p)
    assert default_labels["blocks"]["layers"]["attn"]["q"]["kernel"] == "adam"
    assert T._muon_labels(p)["blocks"]["layers"]["attn"]["q"]["kernel"] == "muon"


def test_weight_decay_not_smoothed():
    p = _params()
    zero = jax.tree.map(jnp.zeros_like, p)
    tx = T.smoothed_optimizer("adamw", 0.5, alpha=0.5, weight_decay=0.1)
    upd, _ = tx.update(zero, tx.init(p), p)
    k = p["blocks"]["layers"]["attn"]["q"]["kernel"]
    np.testing.assert_allclose(upd["blocks"]["layers"]["attn"]["q"]["kernel"], -0.5 * 0.1 * k,
                               rtol=1e-6)
    np.testing.assert_array_equal(upd["norm"]["scale"], 0.0)


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.75])
def test_sgd_step_descends_quadratic(alpha):
    rng = np.random.default_rng(int(alpha * 100))
    A = rng.normal(size=(L * 5, L * 5))
    H = jnp.asarray(A @ A.T / (L * 5) + 0.1 * np.eye(L * 5), jnp.float32)
    loss = lambda p: 0.5 * p["blocks"]["w"].reshape(-1) @ H @ p["blocks"]["w"].reshape(-1)  # noqa
    p = {"blocks": {"w": jnp.asarray(rng.normal(size=(L, 5)), jnp.float32)}}
    tx = T.smoothed_optimizer("sgd", 1e-2, alpha=alpha, weight_decay=0.0, momentum=0.0)
    upd, _ = tx.update(jax.grad(loss)(p), tx.init(p), p)
    assert loss(optax.apply_updates(p, upd)) < loss(p)


@pytest.mark.parametrize("base", ["adamw", "muon"])
def test_adaptive_step_descends_depth_smooth_quadratic(base):
    # Quadratic whose gradient is smooth across depth: target identical in every block.
    rng = np.random.default_rng(5)
    target = jnp.asarray(rng.normal(size=(1, 6, 6)), jnp.float32)
    loss = lambda p: 0.5 * jnp.sum((p["blocks"]["kernel"] - target) ** 2)  # noqa: E731
    p = {"blocks": {"kernel": jnp.zeros((L, 6, 6)) + 0.01 * jnp.asarray(
        rng.normal(size=(L, 6, 6)), jnp.float32)}}
    tx = T.smoothed_optimizer(base, 1e-2, alpha=0.2, weight_decay=0.0)
    upd, _ = tx.update(jax.grad(loss)(p), tx.init(p), p)
    assert loss(optax.apply_updates(p, upd)) < loss(p)


@pytest.mark.parametrize("base", ["sgd", "adamw", "muon"])
@pytest.mark.parametrize("mode", ["plain", "norm", "dir"])
def test_jit_matches_eager(base, mode):
    p = _params()
    tx = T.smoothed_optimizer(base, 1e-2, alpha=0.2, mode=mode)
    eager = _run(tx, p, _grads, steps=2)
    traces = []

    @jax.jit
    def step(params, state, g):
        traces.append(1)
        upd, state = tx.update(g, state, params)
        return optax.apply_updates(params, upd), state

    params, state = p, tx.init(p)
    for t in range(5):
        params, state = step(params, state, _grads(params, t))
        if t == 1:
            jitted = params
    assert len(traces) == 1
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))
    assert _max_diff(eager, jitted) < 1e-5


def test_errors():
    with pytest.raises(ValueError, match="alpha must be in"):
        T.depth_smoothing(1.5)
    with pytest.raises(ValueError, match="radius"):
        T.depth_smoothing(0.2, radius=0)
    with pytest.raises(ValueError, match="mode="):
        T.depth_smoothing(0.2, mode="wiggle")
    with pytest.raises(ValueError, match="base="):
        T.smoothed_optimizer("lion", 1e-3)
    tx = T.depth_smoothing(0.2, matrix=jnp.eye(4))
    with pytest.raises(ValueError, match="leading axis to be the depth 4"):
        _apply(tx, {"blocks": {"w": jnp.ones((8, 3))}})
    with pytest.raises(ValueError, match="permutation"):
        T.smoothing_matrix(4, 0.2, permutation=[0, 0, 1, 2])
