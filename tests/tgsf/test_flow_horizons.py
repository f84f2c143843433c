"""TGs-Flow needs two horizons (spec §Method "TGs-Flow", §Tests "Flow horizons"): flows from a
base frame t to t - delta and t + delta pin down both v and a of a Gaussian moving parallel to
the image plane; the single horizon t + delta fixes only the combination v delta + a delta^2 / 2
(the loss Hessian in (v, a) is singular)."""

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.tgsf import camera as C
from icml26_jax.tgsf import gaussians as G
from icml26_jax.tgsf import render as R

H = W = 16
T0, DELTA = 0.5, 0.1
V_TRUE = np.array([0.3, -0.2])
A_TRUE = np.array([-0.8, 0.5])


def _setup():
    cam = C.Camera(C.intrinsics(H, W), jnp.eye(3), jnp.zeros(3), H, W)
    g = G.TaylorGaussians(
        mean=jnp.array([[0.05, -0.03, 3.0]]), vel=jnp.zeros((1, 3)), acc=jnp.zeros((1, 3)),
        t_anchor=jnp.array([T0]), log_tscale=jnp.zeros(1), log_scale=jnp.full((1, 3), -1.2),
        quat=jnp.array([[1.0, 0, 0, 0]]), opacity_logit=jnp.array([4.0]),
        rgb=jnp.ones((1, 3)))

    def with_motion(theta):  # theta = (v_x, v_y, a_x, a_y): motion parallel to the image
        z = jnp.zeros((1, 1))
        return g._replace(vel=jnp.concatenate([theta[None, :2], z], -1),
                          acc=jnp.concatenate([theta[None, 2:], z], -1))

    return cam, with_motion


def _loss_fn(horizons):
    cam, with_motion = _setup()
    true = jnp.asarray(np.concatenate([V_TRUE, A_TRUE]), jnp.float32)

    def flows(theta):
        return [R.render_flow(with_motion(theta), cam, T0, cam, T0 + h)[0] for h in horizons]

    targets = flows(true)  # exact rendered flows
    _, A = R.render_flow(with_motion(true), cam, T0, cam, T0 + horizons[0])
    mask = (A > 0.5).astype(jnp.float32)[..., None]

    def loss(theta):
        return sum(jnp.sum(mask * (f - t) ** 2) for f, t in zip(flows(theta), targets))

    return jax.jit(loss), true


def test_two_horizons_recover_the_acceleration():
    loss, true = _loss_fn((-DELTA, DELTA))
    theta = jnp.zeros(4)
    grad, hess = jax.jit(jax.grad(loss)), jax.jit(jax.hessian(loss))
    for _ in range(6):  # Newton: the flows are linear in theta at fixed weights of (cam, T0)
        theta = theta - jnp.linalg.solve(hess(theta), grad(theta))
    np.testing.assert_allclose(theta[2:], A_TRUE, rtol=1e-3)
    np.testing.assert_allclose(theta[:2], V_TRUE, rtol=1e-3)
    ev = np.linalg.eigvalsh(np.asarray(hess(theta), np.float64))
    assert ev.min() > 1e-3 * ev.max()


def test_a_single_horizon_leaves_the_hessian_singular():
    loss, true = _loss_fn((DELTA,))
    ev = np.linalg.eigvalsh(np.asarray(jax.jit(jax.hessian(loss))(true), np.float64))
    assert ev.max() > 0 and ev[:2].max() < 1e-5 * ev.max()  # 2 of 4 directions are flat
