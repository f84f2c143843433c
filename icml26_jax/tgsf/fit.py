"""Per-scene optimisation of Taylor-Gaussians (spec §Method "Per-scene optimisation",
"TGs-Flow", "Coupled baseline") [R].

One training step renders one random training view (time t, camera) of the scene and
minimises

    L = L1(C, I) + 0.2 (1 - SSIM(C, I)) + w_d L_ssi(D, D~)
        + w_f sum_{t'} ||M (F^_{t->t'} - F~_{t->t'})||_1 / H        (decoupled TGs-Flow)
        + w_s sum_{t'} ||M (S^_{t->t'} - S~_{t->t'})||_1            (coupled: lifted scene flow)
        + lambda_a mean ||a_i||^2 + lambda_o mean sigma_i(t),

with M = (label valid) & (rendered alpha > 0.5). Colour, depth, the rendered flows and the
rendered 3D displacements of every horizon come from ONE rasterisation (they share the
weights w_i(p) of (cam_t, t)); the coupled baseline additionally renders the depth at each
target view (no gradient) to align its pseudo-depth. The arms of an experiment (Taylor order,
temporal opacity, supervision) differ only by the masks and weights of an ``Arm``, so every
arm and seed trains in one compiled program: ``fit`` maps the step over arms x seeds with
``core.checkpoint.seed_loop`` (``core.mesh.map_runs``: the arms x seeds replicas sharded over
a ``RUNS`` mesh, every process included; orbax chunks, resumable).

Initialisation: N / K Gaussians from each of K keyframes (times {0, 0.35, 0.7} in the
experiments) by back-projecting a random subset of pixels with the (noisy) pseudo-depth; the
anchor is the keyframe's time, v = a = 0, temporal scale exp(lambda) = 1, isotropic scale one
spawn spacing's footprint at its depth, identity rotation, opacity sigmoid(o) = 0.5, colour from the
frame.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26_jax.core import checkpoint
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.optim import promotion_safe
from icml26_jax.tgsf import camera as camlib
from icml26_jax.tgsf import data as datalib
from icml26_jax.tgsf import gaussians as G
from icml26_jax.tgsf import losses, render, scenes
from icml26_jax.tgsf.gaussians import TaylorGaussians

# Adam learning rates per field, scene extent 1 (spec).
LEARNING_RATES = {"mean": 1e-3, "vel": 5e-4, "acc": 2.5e-4, "rgb": 2.5e-3,
                  "opacity_logit": 5e-2, "log_scale": 5e-3, "quat": 1e-3, "log_tscale": 1e-3,
                  "t_anchor": 1e-3}


def init_from_frames(frames, depths, cams: camlib.Camera, times, num_gaussians: int, key, *,
                     footprint_px: float | None = None) -> TaylorGaussians:
    """Gaussians spawned from K keyframes.

    Args:
      frames: [K, H, W, 3] colours; depths: [K, H, W] z-depths (pseudo or exact);
      cams: stacked ``Camera`` [K]; times: [K] keyframe times.
      num_gaussians: N; floor(N / K) pixels per keyframe, drawn without replacement, and
        the remainder padded (``pad``).
      key: PRNG key.
      footprint_px: initial isotropic scale (standard deviation) in pixels at the
        Gaussian's depth; default half the spacing sqrt(H W / (N / K)) of one keyframe's
        spawned pixels, so the first render has no holes.

    Returns:
      ``TaylorGaussians`` with N rows, ordered keyframe by keyframe, padding last.
    """
    K, H, W = depths.shape
    if num_gaussians < K:
        raise ValueError(f"num_gaussians={num_gaussians} must be at least the number of "
                         f"keyframes {K}")
    per = num_gaussians // K
    if per > H * W:
        raise ValueError(f"num_gaussians / keyframes = {per} exceeds the {H * W} pixels of a "
                         "frame")

    px = float(footprint_px) if footprint_px is not None else 0.5 * (H * W / per) ** 0.5

    def one(frame, depth, cam, t, k):
        idx = jax.random.choice(k, H * W, (per,), replace=False)
        o, d = camlib.rays(cam)
        D = depth.reshape(-1)[idx]
        mean = o.reshape(-1, 3)[idx] + D[:, None] * d.reshape(-1, 3)[idx]
        footprint = px * D / cam.K[0, 0]  # px pixels at depth D
        return (mean, frame.reshape(-1, 3)[idx], jnp.full((per,), t, jnp.float32),
                jnp.log(jnp.maximum(footprint, 1e-4)))

    keys = jax.random.split(key, K)
    mean, rgb, t_anchor, log_s = jax.vmap(one)(frames, depths, cams,
                                               jnp.asarray(times, jnp.float32), keys)
    n = per * K
    zeros3 = jnp.zeros((n, 3), jnp.float32)
    g = TaylorGaussians(
        mean=mean.reshape(n, 3), vel=zeros3, acc=zeros3, t_anchor=t_anchor.reshape(n),
        log_tscale=jnp.zeros((n,), jnp.float32),
        log_scale=jnp.broadcast_to(log_s.reshape(n, 1), (n, 3)),
        quat=jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32), (n, 4)),
        opacity_logit=jnp.zeros((n,), jnp.float32), rgb=rgb.reshape(n, 3))
    return pad(g, num_gaussians)


PAD_LOGIT = -30.0  # sigmoid(-30) ~ 1e-13: below 1/255, so a padded Gaussian has no gradient


def pad(g: TaylorGaussians, n: int) -> TaylorGaussians:
    """Pads to ``n`` Gaussians (static shapes): the extra rows are copies of row 0 with
    opacity logit ``PAD_LOGIT``, which the rasteriser's 1/255 cut makes invisible and
    gradient-free."""
    extra = int(n) - g.mean.shape[0]
    if extra < 0:
        raise ValueError(f"cannot pad {g.mean.shape[0]} Gaussians to n={n}")
    if extra == 0:
        return g
    rows = jax.tree.map(lambda x: jnp.broadcast_to(x[:1], (extra,) + x.shape[1:]), g)
    rows = rows._replace(opacity_logit=jnp.full((extra,), PAD_LOGIT, jnp.float32))
    return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), g, rows)


MOTION_FIELDS = ("mean", "vel", "acc")


def optimizer(scale: float = 1.0, learn_anchor: bool = True, *, motion_scale: float = 1.0
              ) -> optax.GradientTransformation:
    """Adam with the spec's per-field learning rates times ``scale``; the positional fields
    (mean, v, a) additionally times ``motion_scale`` (the scene-extent factor of 3DGS's
    position learning rate). ``learn_anchor=False`` freezes t_anchor (the feed-forward
    model's anchors are the source frames' times)."""
    transforms = {name: promotion_safe(optax.adam(
        scale * lr * (motion_scale if name in MOTION_FIELDS else 1.0)))
        for name, lr in LEARNING_RATES.items()}
    if not learn_anchor:
        transforms["t_anchor"] = optax.set_to_zero()
    labels = TaylorGaussians(*TaylorGaussians._fields)
    return optax.multi_transform(transforms, labels)


# Loss weights (spec §"TGs-Flow"); the coupled baseline uses the flow weight (same weight).
SSIM_WEIGHT = 0.2
LAMBDA_DEPTH = 0.1
LAMBDA_FLOW = 0.05
LAMBDA_ACC = 1e-4
LAMBDA_OPACITY = 1e-3
TSCALE_OFF = 30.0  # log temporal scale whose factor exp(-(D e^-30)^2) is exactly 1 in float32
SUPERVISIONS = ("photo", "coupled3d", "decoupled")


class Arm(NamedTuple):
    """What distinguishes the arms of a vmapped fit (all scalars; stack them for vmap).

    Attributes:
      vel_on: 1 for orders >= 1, else 0 (multiplies v).
      acc_on: 1 for order 2, else 0 (multiplies a): order 1 is the same code with a = 0.
      temporal: 1 with temporal opacity, 0 without (then lambda is pinned to ``TSCALE_OFF``).
      w_depth: weight of the scale-shift-invariant depth loss.
      w_flow: weight of the decoupled 2D-flow loss (TGs-Flow).
      w_sceneflow: weight of the coupled lifted-3D-scene-flow loss.
    """

    vel_on: jax.Array
    acc_on: jax.Array
    temporal: jax.Array
    w_depth: jax.Array
    w_flow: jax.Array
    w_sceneflow: jax.Array


def make_arm(order: int = 2, temporal: bool = True, supervision: str = "photo") -> Arm:
    """The ``Arm`` of a Taylor ``order`` (0, 1, 2), temporal opacity on/off and a supervision
    (``"photo"``: photometric only; ``"decoupled"``: + depth + 2D flows (TGs-Flow);
    ``"coupled3d"``: + depth + lifted 3D scene flow)."""
    order = G.check_order(order)
    if supervision not in SUPERVISIONS:
        raise ValueError(f"supervision must be one of {SUPERVISIONS}, got {supervision!r}")
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    return Arm(vel_on=f(order >= 1), acc_on=f(order >= 2), temporal=f(bool(temporal)),
               w_depth=f(0.0 if supervision == "photo" else LAMBDA_DEPTH),
               w_flow=f(LAMBDA_FLOW if supervision == "decoupled" else 0.0),
               w_sceneflow=f(LAMBDA_FLOW if supervision == "coupled3d" else 0.0))


def apply_arm(g: TaylorGaussians, arm: Arm) -> TaylorGaussians:
    """The Gaussians as the arm sees them: motion terms masked, lambda pinned when temporal
    opacity is off. Render the result with order 2 and ``temporal=True``: that equals the
    arm's order and temporal setting (gradients of masked fields are 0)."""
    return g._replace(vel=g.vel * arm.vel_on, acc=g.acc * arm.acc_on,
                      log_tscale=jnp.where(arm.temporal > 0.5, g.log_tscale, TSCALE_OFF))


def _target_depth(g: TaylorGaussians, cam2, t2, pixel_chunk: int):
    """Rendered depth and alpha at a target view, no gradient (coupled alignment)."""
    g = jax.lax.stop_gradient(g)
    n = g.mean.shape[0]
    out = render.rasterize(G.positions_at(g, t2, 2), G.covariances(g), G.opacity_at(g, t2),
                           jnp.ones((n, 1), jnp.float32), cam2, jnp.zeros((1,), jnp.float32),
                           pixel_chunk=pixel_chunk)
    return out["depth"], out["alpha"]


def view_loss(g: TaylorGaussians, data: datalib.FitData, arm: Arm, v, *, coupled: bool,
              pixel_chunk: int = 1024):
    """The loss of training view ``v`` (module docstring) and its terms.

    Args:
      g: raw (unmasked) Gaussians [N].
      data: one scene's ``FitData`` (no arm axis).
      arm: the ``Arm``.
      v: view index (traced int).
      coupled: compute the lifted-scene-flow term (static; needs the extra target renders).
      pixel_chunk: rasteriser chunk.

    Returns:
      (loss, {"photo", "depth", "flow", "sceneflow", "acc", "opacity"}).
    """
    ga = apply_arm(g, arm)
    cam = camlib.index(data.cams, v)
    t = data.times[v]
    H = cam.height
    Z = data.times2.shape[1]
    pos = G.positions_at(ga, t, 2)
    op = G.opacity_at(ga, t)
    uv, _ = camlib.project(pos, cam)
    feats, cams2 = [ga.rgb], []
    for z in range(Z):
        cam2 = camlib.index(camlib.index(data.cams2, v), z)
        pos2 = G.positions_at(ga, data.times2[v, z], 2)
        uv2, _ = camlib.project(pos2, cam2)
        feats += [uv2 - uv, pos2 - pos]
        cams2.append(cam2)
    C = 3 + 5 * Z
    out = render.rasterize(pos, G.covariances(ga), op, jnp.concatenate(feats, -1), cam,
                           jnp.zeros((C,), jnp.float32), pixel_chunk=pixel_chunk)
    rgb, D, A = out["feats"][..., :3], out["depth"], out["alpha"]
    img = data.frames[v]
    photo = losses.l1(rgb, img) + SSIM_WEIGHT * (1.0 - losses.ssim(rgb, img))
    fg = jax.lax.stop_gradient(A) > 0.5
    depth_l = losses.ssi_depth_loss(D, data.depth[v], fg)
    inv_a = 1.0 / jnp.maximum(A, render.EPS)[..., None]
    flow_l = jnp.zeros((), jnp.float32)
    sf_l = jnp.zeros((), jnp.float32)
    for z in range(Z):
        base = 3 + 5 * z
        valid = (data.flow_valid[v, z] > 0.5) & fg
        pred_flow = out["feats"][..., base:base + 2] * inv_a
        flow_l = flow_l + losses.flow_loss(pred_flow, data.flow[v, z], valid, H)
        if coupled:
            pred_disp = out["feats"][..., base + 2:base + 5] * inv_a
            D2, A2 = _target_depth(ga, cams2[z], data.times2[v, z], pixel_chunk)
            d_t = losses.align_depth(data.depth[v], D, fg)
            d_t2 = losses.align_depth(data.depth2[v, z], D2, A2 > 0.5)
            sf_l = sf_l + losses.lifted_sceneflow_loss(pred_disp, d_t, d_t2, data.flow[v, z],
                                                       valid, cam, cams2[z])
    acc_l = jnp.mean(jnp.sum(jnp.square(ga.acc), -1))
    op_l = jnp.mean(op)
    loss = (photo + arm.w_depth * depth_l + arm.w_flow * flow_l + arm.w_sceneflow * sf_l
            + LAMBDA_ACC * acc_l + LAMBDA_OPACITY * op_l)
    return loss, {"photo": photo, "depth": depth_l, "flow": flow_l, "sceneflow": sf_l,
                  "acc": acc_l, "opacity": op_l}


class FitState(NamedTuple):
    """Per-fit training state: the Gaussians and the optimiser state."""

    g: TaylorGaussians
    opt: optax.OptState


def train_step(state: FitState, data: datalib.FitData, arm: Arm, key, step, *,
               tx: optax.GradientTransformation, coupled: bool, pixel_chunk: int = 1024):
    """One Adam step on one random training view (drawn from ``fold_in(key, step)``).

    Returns:
      (state, terms) with terms of ``view_loss`` plus "loss".
    """
    V = data.times.shape[0]
    v = jax.random.randint(jax.random.fold_in(key, step), (), 0, V)
    (loss, terms), grads = jax.value_and_grad(view_loss, has_aux=True)(
        state.g, data, arm, v, coupled=coupled, pixel_chunk=pixel_chunk)
    updates, opt = tx.update(grads, state.opt, state.g)
    g = optax.apply_updates(state.g, updates)
    return FitState(g, opt), dict(terms, loss=loss)


def init_fits(datas: datalib.FitData, keyframes: tuple[int, ...], num_gaussians: int,
              seed_keys) -> TaylorGaussians:
    """Initial Gaussians [A, S, N] of A arms (``datas`` stacked [A, ...]) and S seeds: arm a,
    seed s spawns from its own keyframe views with key ``seed_keys[s]`` (every arm of a seed
    starts from the same random pixel subset; arms of one scene thus start identically)."""
    kv = jnp.asarray(keyframes, jnp.int32)

    def one(d, k):
        cams = jax.tree.map(lambda x: x[kv], d.cams)
        return init_from_frames(d.frames[kv], d.depth[kv], cams, d.times[kv], num_gaussians, k)

    return jax.vmap(lambda d: jax.vmap(lambda k: one(d, k))(seed_keys))(datas)


@functools.partial(jax.jit, static_argnames=("lr_scale", "motion_scale"))
def _init_state(g0, *, lr_scale, motion_scale):
    """``FitState`` of initial Gaussians [A, S, N] flattened to [A S, N] (arm-major): one
    compiled program (an eager reshape and ``vmap(tx.init)`` compile one per leaf shape).
    ``init_fits`` itself stays eager: compiled as one program, XLA:CPU fuses its multiply-adds
    (FMA) and the initial Gaussians, hence every fit, change in the last bits."""
    g0 = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), g0)
    tx = optimizer(lr_scale, motion_scale=motion_scale)
    return FitState(g0, jax.vmap(tx.init)(g0))


def _fit_step(inner, state, args, key, step):
    lr_scale, motion_scale, coupled, pixel_chunk = inner
    tx = optimizer(lr_scale, motion_scale=motion_scale)
    return train_step(state, args[0], args[1], key, step, tx=tx, coupled=coupled,
                      pixel_chunk=pixel_chunk)


def fit(datas: datalib.FitData, arms: Arm, *, keyframes: tuple[int, ...], num_gaussians: int,
        num_seeds: int, steps: int, key, directory: str, fingerprint: int, chunk: int = 200,
        coupled: bool = False, pixel_chunk: int = 1024, name: str = "fit",
        lr_scale: float = 1.0, motion_lr_scale: float = 1.0, mesh=None):
    """Fits A arms x S seeds at once (one compiled step mapped over the A S replicas, sharded
    over ``mesh``; resumable in chunks).

    Args:
      datas: ``FitData`` stacked over arms [A, ...] (arms may be different scenes or label
        noise levels; one image size and view count).
      arms: ``Arm`` stacked [A].
      keyframes: view indices to spawn from (``data.keyframe_views``).
      num_gaussians: N (padded with invisible rows when not a multiple of the keyframes).
      num_seeds: S; seed s uses ``fold_in(key, s)`` for its initial pixels and view order
        (shared by the arms, so arms differ only by what the arm changes).
      steps: optimisation steps per fit.
      key: PRNG key.
      directory, fingerprint, chunk, name: checkpointing (``core.checkpoint.run_chunks``).
      coupled: whether any arm uses the lifted-scene-flow loss (adds target renders).
      pixel_chunk: rasteriser chunk.
      lr_scale, motion_lr_scale: learning-rate factors (``optimizer``).
      mesh: ``RUNS`` mesh the A S replicas are sharded over (default
        ``core.mesh.runs_mesh(A S)``, on every process).

    Returns:
      (Gaussians [A, S, N, ...] as host arrays, as ``apply_arm`` leaves them raw,
      logs {term: [steps, A, S]}).
    """
    A = int(arms.vel_on.shape[0])
    S = int(num_seeds)
    mesh = mesh if mesh is not None else mesh_lib.runs_mesh(A * S)
    k_init, k_steps = jax.random.split(key)
    g0 = init_fits(datas, tuple(keyframes), int(num_gaussians),
                   checkpoint.per_seed_keys(k_init, S))
    state = _init_state(g0, lr_scale=float(lr_scale), motion_scale=float(motion_lr_scale))
    # On the host: an eager jnp.repeat compiles one program per leaf shape.
    rep = lambda x: np.repeat(np.asarray(x), S, axis=0)  # noqa: E731  [A] -> [A S]
    args = (jax.tree.map(rep, datas), jax.tree.map(rep, arms))
    seed_keys = jnp.tile(checkpoint.per_seed_keys(k_steps, S), A)
    inner = (float(lr_scale), float(motion_lr_scale), bool(coupled), int(pixel_chunk))
    state, logs = checkpoint.seed_loop(
        state, args, _fit_step, seed_keys, steps=int(steps), chunk=int(chunk), mesh=mesh,
        inner=inner, directory=directory, fingerprint=fingerprint, name=name,
        message=lambda m: f"loss {float(np.mean(m['loss'])):.4f} "
                          f"photo {float(np.mean(m['photo'])):.4f}")
    g = jax.tree.map(lambda x: x.reshape((A, S) + x.shape[1:]), state.g)
    logs = {k: v.reshape((v.shape[0], A, S)) for k, v in logs.items()}
    return g, logs


def fit_scene(scene: scenes.SceneSpec, config, key):
    """Fits one scene with one arm (a convenience around ``fit``; experiments use ``fit``).

    Args:
      scene: a ``scenes.SceneSpec``.
      config: mapping / ConfigDict with ``image_size``, ``num_gaussians``, ``steps``,
        ``order``, ``temporal_opacity``, ``supervision``, ``label_noise``, ``workdir``
        (checkpoints) and optionally ``seeds`` (default 1).
      key: PRNG key.

    Returns:
      (Gaussians [S, N, ...] with the arm applied, metrics {"loss": [steps, S], "photo": ...}).
    """
    get = config.get if hasattr(config, "get") else lambda k, d=None: getattr(config, k, d)
    supervision = get("supervision", "photo")
    rig_kind = "multiview" if supervision == "photo" else "monocular"
    size = int(get("image_size", 32))
    views = datalib.scene_views(scene, rig_kind, size, flows=supervision != "photo")
    fd = datalib.fit_data(views, get("label_noise", "default"), scene.seed)
    arm = make_arm(int(get("order", 2)), bool(get("temporal_opacity", True)), supervision)
    stacked = lambda x: jax.tree.map(lambda y: jnp.asarray(y)[None], x)  # noqa: E731
    g, logs = fit(stacked(fd), stacked(arm), keyframes=datalib.keyframe_views(views, rig_kind),
                  num_gaussians=int(get("num_gaussians", 256)), num_seeds=int(get("seeds", 1)),
                  steps=int(get("steps", 800)), key=key, directory=get("workdir"),
                  fingerprint=checkpoint.config_fingerprint(config),
                  coupled=supervision == "coupled3d")
    g = jax.vmap(lambda x: apply_arm(x, arm))(jax.tree.map(lambda x: x[0], g))
    return g, {k: v[:, 0] for k, v in logs.items()}
