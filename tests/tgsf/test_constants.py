"""No compiled fitting chunk or evaluator of the smoke run embeds a large constant, and the
evaluators compile once per shape.

An array a step closes over instead of taking as an argument is baked into its program: the
program grows with the data and recompiles for new data. The E1 and E2 fitting chunks and the
evaluators (held-out render grid, 3D EPE) are lowered (not run) with the arguments
``train.run`` gives them at the ``smoke`` config.
"""

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core import checkpoint
from icml26_jax.core.testing import CompileCounter, largest_constant
from icml26_jax.tgsf import configs, evaluate, scenes, train
from icml26_jax.tgsf import data as datalib
from icml26_jax.tgsf import fit as fitlib
from icml26_jax.tgsf import gaussians as G

LIMIT = 1 << 20  # bytes


def _fit_program(c, datas, arms, kf, coupled):
    """The arguments of ``fit``'s chunk program (``core.checkpoint.seed_loop``), as it
    builds them: ``(static, state, args, key_data, start)`` for ``_scan_replica``."""
    datas, arms = datalib.stack(datas), datalib.stack(arms)
    S = int(c.num_seeds)
    g0 = fitlib.init_fits(datas, tuple(kf), int(c.num_gaussians),
                          checkpoint.per_seed_keys(jax.random.key(0), S))
    state = fitlib._init_state(g0, lr_scale=float(c.lr_scale),
                               motion_scale=float(c.motion_lr_scale))
    rep = lambda x: np.repeat(np.asarray(x), S, axis=0)  # noqa: E731
    args = (jax.tree.map(rep, datas), jax.tree.map(rep, arms))
    inner = (float(c.lr_scale), float(c.motion_lr_scale), bool(coupled), 1024)
    R = int(arms.vel_on.shape[0]) * S
    first = lambda t: jax.tree.map(lambda x: np.asarray(x)[0], t)  # noqa: E731
    key_data = np.zeros((2,), np.uint32)
    return ((fitlib._fit_step, inner, int(c.chunk)), first(state), first(args), key_data,
            np.int32(0)), R


def _check(name, static, *args):
    fn = jax.jit(lambda *a: checkpoint._scan_replica(static, *a))
    nbytes, shape = largest_constant(fn, *args)
    assert nbytes <= LIMIT, f"{name} embeds a {nbytes}-byte constant of shape {shape}"


def test_fit_chunks_embed_no_large_constant():
    c = configs.get_config("smoke")
    train.normalise_config(c)
    train.validate_config(c)
    size = int(c.image_size)
    # E1 (as run_e1): multi-view data of every scene, one arm per order.
    arms = train.e1_arms(c)
    views = {k: datalib.scene_views(train._scene(c, k), "multiview", size, flows=False)
             for k in dict.fromkeys(s for s, _, _ in arms)}
    kf = datalib.keyframe_views(next(iter(views.values())), "multiview")
    fds = {k: datalib.fit_data(v, "default", int(c.seed)) for k, v in views.items()}
    (static, *a), _ = _fit_program(c, [fds[s] for s, _, _ in arms], [x for _, _, x in arms],
                                   kf, False)
    _check("e1 fit chunk", static, *a)
    # E2 (as run_e2): monocular data with flows, one arm per supervision and noise level.
    arms = train.e2_arms(c)
    v2 = datalib.scene_views(train._scene(c, c.e2_scene), "monocular", size, flows=True)
    fds = {n: datalib.fit_data(v2, n, int(c.seed)) for n in c.label_noise}
    coupled = any(float(x.w_sceneflow) > 0 for _, _, x in arms)
    (static, *a), _ = _fit_program(c, [fds[n] for n, _, _ in arms], [x for _, _, x in arms],
                                   datalib.keyframe_views(v2, "monocular"), coupled)
    _check("e2 fit chunk", static, *a)


# ---------------------------------------------------------------- evaluators

def _fits(key, a, s, n=24):
    """Random Taylor-Gaussians [a, s, n] in front of the rig's cameras."""
    k = jax.random.split(key, 4)
    lead = (a, s, n)
    return G.TaylorGaussians(
        mean=jax.random.uniform(k[0], lead + (3,), minval=-0.8, maxval=0.8),
        vel=0.5 * jax.random.normal(k[1], lead + (3,)),
        acc=jax.random.normal(k[2], lead + (3,)), t_anchor=jnp.full(lead, 0.3),
        log_tscale=jnp.zeros(lead), log_scale=jnp.full(lead + (3,), -1.6),
        quat=jnp.broadcast_to(jnp.array([1.0, 0, 0, 0]), lead + (4,)),
        opacity_logit=jnp.full(lead, 1.0), rgb=jax.random.uniform(k[3], lead + (3,)))


def test_evaluators_embed_no_large_constant():
    """The held-out render grid and the 3D-EPE program of E2 at the smoke sizes (two arms,
    the smoke's N, its held-out cameras, test times and EPE pairs), lowered only: the ground
    truth travels as arguments."""
    c = configs.get_config("smoke")
    size, n = int(c.image_size), int(c.num_gaussians)
    g = _fits(jax.random.key(0), 2, int(c.num_seeds), n)
    arms = datalib.stack([fitlib.make_arm(1), fitlib.make_arm(2)])
    _, held = datalib.rig("monocular", size, datalib.train_times())
    times = jnp.asarray(train._test_times(), jnp.float32)
    _check_fn("render_grid", evaluate._render_grid, g, arms, datalib.stack_cameras(held), times)
    sc = train._scene(c, c.e2_scene)
    ins = evaluate.epe_inputs(sc, held, datalib.train_times()[::3])
    _check_fn("displacement_epe", evaluate._displacement_epe, g, arms, *ins)


def _check_fn(name, fn, *args):
    nbytes, shape = largest_constant(fn, *args)
    assert nbytes <= LIMIT, f"{name} embeds a {nbytes}-byte constant of shape {shape}"


def test_evaluators_compile_once_for_new_values_of_the_same_shapes():
    """A second call with other fits, arms, times and ground truth (same shapes) reuses the
    compiled programs: nothing is rebuilt or baked in per call."""
    size = 8
    _, held = datalib.rig("monocular", size, datalib.train_times())
    cams = datalib.stack_cameras(held[:1])
    s1 = scenes.make_scene("S1", 0)
    s2 = scenes.make_scene("S1", 1)

    def both(key, order, times, scene):
        g = _fits(key, 1, 1, 8)
        arms = datalib.stack([fitlib.make_arm(order)])
        rgb = evaluate.render_grid(g, arms, cams, times)
        epe = evaluate.displacement_epe(g, arms, scene, held[:1], times[:1], horizons=(0.1,))
        return rgb, epe

    rgb1, epe1 = both(jax.random.key(1), 2, np.array([0.2, 0.9]), s1)
    with CompileCounter() as cc:
        rgb2, epe2 = both(jax.random.key(2), 1, np.array([0.5, 1.0]), s2)
    assert cc.count == 0, f"{cc.count} compilations on the second call"
    assert rgb2.shape == rgb1.shape == (1, 1, 1, 2, size, size, 3) and epe2.shape == (1, 1)
    assert not np.allclose(np.asarray(rgb1), np.asarray(rgb2))  # new values were used
