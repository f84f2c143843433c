"""No compiled fitting chunk of the smoke run embeds a large constant.

An array a step closes over instead of taking as an argument is baked into its program: the
program grows with the data and recompiles for new data. The E1 and E2 fitting chunks are
lowered (not run) with the arguments ``train.run`` gives them at the ``smoke`` config.
"""

import jax
import numpy as np

from icml26_jax.core import checkpoint
from icml26_jax.core.testing import largest_constant
from icml26_jax.tgsf import configs, train
from icml26_jax.tgsf import data as datalib
from icml26_jax.tgsf import fit as fitlib

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
