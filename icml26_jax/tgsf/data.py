"""Camera rigs, time grids and training / test views of the synthetic scenes (spec §Data).

- Times: 12 training frames ``t_k = 0.7 k / 11``; interpolation tests at the 11 midpoints;
  extrapolation tests at ``EXTRAP_TIMES`` = (0.8, 0.9, 1.0). Flow horizons are frame offsets
  (-1, +1, +2), i.e. t - delta, t + delta, t + 2 delta with delta one frame.
- ``multiview`` rig: 5 cameras on a +-30 deg arc, the 4 outer ones train (every training
  time is seen by all 4) and the middle one is held out.
- ``monocular`` rig: one training camera on a slow arc (angle -8 + 16 t degrees: one view per
  time), 2 held-out cameras at -15 and +15 degrees.

``FitData`` holds one scene's training views with their pseudo-labels; stacking a leading
axis (``stack``) gives the arms of a vmapped fit.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.tgsf import camera as camlib
from icml26_jax.tgsf import scenes

NUM_TRAIN_FRAMES = 12
T_TRAIN_MAX = 0.7
EXTRAP_TIMES = (0.8, 0.9, 1.0)
HORIZONS = (-1, 1, 2)  # flow targets in frames: t - delta, t + delta, t + 2 delta
KEYFRAME_TIMES = (0.0, 0.35, 0.7)
RIGS = ("multiview", "monocular")
MONO_ARC_DEG = (-8.0, 16.0)  # training camera angle = a + b t degrees
MONO_HELDOUT_DEG = (-15.0, 15.0)


def train_times(n: int = NUM_TRAIN_FRAMES) -> np.ndarray:
    """[n] training times, evenly spaced in [0, 0.7]."""
    return np.linspace(0.0, T_TRAIN_MAX, int(n)).astype(np.float32)


def interp_times(n: int = NUM_TRAIN_FRAMES) -> np.ndarray:
    """[n - 1] interpolation test times: the midpoints of the training frames."""
    t = train_times(n)
    return (0.5 * (t[1:] + t[:-1])).astype(np.float32)


def keyframe_indices(n: int = NUM_TRAIN_FRAMES) -> tuple[int, ...]:
    """The training frames nearest to ``KEYFRAME_TIMES`` (0, 0.35, 0.7) (ties: earlier)."""
    t = train_times(n)
    return tuple(int(np.argmin(np.abs(t - k))) for k in KEYFRAME_TIMES)


def _arc_camera(angle_deg: float, size: int, radius: float = 4.0) -> camlib.Camera:
    """One camera with the geometry of ``camera.arc_cameras`` (distance ``radius`` from the
    origin on the -z side, 50 deg field of view) at horizontal angle ``angle_deg``."""
    a = math.radians(float(angle_deg))
    R, T = camlib.look_at((radius * math.sin(a), 0.0, -radius * math.cos(a)), (0.0, 0.0, 0.0))
    return camlib.Camera(camlib.intrinsics(size, size), R, T, int(size), int(size))


def _stack_leaves(xs):
    """``jnp.stack`` of arrays along a new leading axis, stacked on the host with NumPy and
    put on the device unless one is a tracer: an eager ``jnp.stack`` compiles one XLA
    program per leaf shape and count, which dominated the start-up of a run."""
    if any(isinstance(x, jax.core.Tracer) for x in xs):
        return jnp.stack([jnp.asarray(x) for x in xs])
    return jax.device_put(np.stack([np.asarray(x) for x in xs]))  # (jnp.asarray compiles)


def stack_cameras(cams) -> camlib.Camera:
    """Stacks a list of single cameras along a new leading axis."""
    return jax.tree.map(lambda *x: _stack_leaves(x), *cams)


def rig(kind: str, size: int, times) -> tuple[list[list[camlib.Camera]], list[camlib.Camera]]:
    """Cameras of a rig.

    Args:
      kind: ``"multiview"`` or ``"monocular"``.
      size: image height = width in pixels.
      times: [T] training times (the monocular camera moves with time).

    Returns:
      (train, heldout): ``train[k]`` is the list of training cameras at time k (4 for
      multiview, 1 for monocular); ``heldout`` the list of static held-out cameras.
    """
    if kind not in RIGS:
        raise ValueError(f"rig must be one of {RIGS}, got {kind!r}")
    if kind == "multiview":
        cams = camlib.arc_cameras(5, height=size, width=size, arc_deg=60.0)
        outer = [camlib.index(cams, i) for i in (0, 1, 3, 4)]
        return [list(outer) for _ in times], [camlib.index(cams, 2)]
    a, b = MONO_ARC_DEG
    train = [[_arc_camera(a + b * float(t), size)] for t in times]
    return train, [_arc_camera(d, size) for d in MONO_HELDOUT_DEG]


def monocular_camera(t: float, size: int) -> camlib.Camera:
    """The monocular training camera's pose at time ``t`` (also past the training range)."""
    a, b = MONO_ARC_DEG
    return _arc_camera(a + b * float(t), size)


class FitData(NamedTuple):
    """Training views of one scene (V views, Z flow horizons); leaves may carry a leading
    arm axis.

    Attributes:
      frames: [V, H, W, 3] ground-truth images.
      cams: ``Camera`` [V].
      times: [V].
      depth: [V, H, W] pseudo z-depth (any scale; the losses are scale-shift invariant).
      flow: [V, Z, H, W, 2] pseudo forward flow to horizon z, pixels.
      flow_valid: [V, Z, H, W] float {0, 1}: non-occluded and the target frame exists.
      cams2: ``Camera`` [V, Z] camera of the target frame.
      times2: [V, Z] target times.
      depth2: [V, Z, H, W] pseudo z-depth of the target frame (the coupled baseline lifts it).
    """

    frames: jax.Array
    cams: camlib.Camera
    times: jax.Array
    depth: jax.Array
    flow: jax.Array
    flow_valid: jax.Array
    cams2: camlib.Camera
    times2: jax.Array
    depth2: jax.Array


def stack(items):
    """Stacks pytrees (``FitData``, arms, Gaussians) along a new leading axis."""
    return jax.tree.map(lambda *x: _stack_leaves(x), *items)


def scene_views(scene: scenes.SceneSpec, rig_kind: str, size: int, *, flows: bool,
                times=None) -> dict:
    """Exact training views of a scene: images, depths and (monocular) flows.

    Returns a dict of NumPy arrays (``frames`` [V, H, W, 3], ``depth`` [V, H, W],
    ``frame_of_view`` [V] training-frame index, and with ``flows`` ``flow`` [V, Z, H, W, 2],
    ``flow_valid`` [V, Z, H, W], ``target_view`` [V, Z] (-1: no such frame)) and the
    cameras (``cams`` list of V). Flows need the monocular rig (one view per frame).
    """
    times = train_times() if times is None else np.asarray(times, np.float32)
    train, _ = rig(rig_kind, size, times)
    if flows and rig_kind != "monocular":
        raise ValueError("flow supervision needs the monocular rig (one view per time)")
    cams, frames, depth, fov = [], [], [], []
    for k, t in enumerate(times):
        for cam in train[k]:
            rgb, d, _ = scenes.gt_render(scene, cam, float(t))
            cams.append(cam)
            frames.append(rgb)
            depth.append(d)
            fov.append(k)
    out = {"frames": np.stack(frames), "depth": np.stack(depth), "frame_of_view":
           np.asarray(fov, np.int32), "cams": cams, "times": np.asarray(times)[fov]}
    if flows:
        V = len(cams)
        fl = np.zeros((V, len(HORIZONS), size, size, 2), np.float32)
        fv = np.zeros((V, len(HORIZONS), size, size), bool)
        target = np.full((V, len(HORIZONS)), -1, np.int32)
        for v in range(V):
            for z, h in enumerate(HORIZONS):
                j = v + h
                if 0 <= j < V:
                    fl[v, z], fv[v, z] = scenes.gt_flow(scene, cams[v], float(times[v]),
                                                        cams[j], float(times[j]))
                    target[v, z] = j
        out.update(flow=fl, flow_valid=fv, target_view=target)
    return out


def fit_data(views: dict, noise: str, seed: int) -> FitData:
    """``FitData`` with pseudo-labels at ``noise`` (``"none"``, ``"default"``, ``"heavy"``)
    drawn with ``np.random.default_rng([seed, view, horizon])`` (deterministic)."""
    frames, depth, cams = views["frames"], views["depth"], views["cams"]
    V, H, W = depth.shape
    valid_all = np.ones((H, W), bool)
    d_noisy = np.stack([scenes.pseudo_labels(depth[v], None, valid_all, noise,
                                             np.random.default_rng([seed, v, 99]))[0]
                        for v in range(V)])
    if "flow" in views:
        Z = views["flow"].shape[1]
        fl = np.zeros_like(views["flow"])
        fv = np.zeros(views["flow_valid"].shape, np.float32)
        cams2, times2, depth2 = [], np.zeros((V, Z), np.float32), np.zeros((V, Z, H, W),
                                                                          np.float32)
        for v in range(V):
            row = []
            for z in range(Z):
                j = int(views["target_view"][v, z])
                if j >= 0:
                    _, f, ok = scenes.pseudo_labels(depth[v], views["flow"][v, z],
                                                    views["flow_valid"][v, z], noise,
                                                    np.random.default_rng([seed, v, z]))
                    fl[v, z], fv[v, z] = f, ok
                    row.append(cams[j])
                    times2[v, z] = views["times"][j]
                    depth2[v, z] = d_noisy[j]
                else:  # no frame there: a masked-out dummy pointing at the view itself
                    row.append(cams[v])
                    times2[v, z] = views["times"][v]
                    depth2[v, z] = d_noisy[v]
            cams2.append(stack_cameras(row))
        cams2 = stack_cameras(cams2)
    else:
        fl = np.zeros((V, 0, H, W, 2), np.float32)
        fv = np.zeros((V, 0, H, W), np.float32)
        one = cams[0]
        cams2 = camlib.Camera(jnp.zeros((V, 0, 3, 3)), jnp.zeros((V, 0, 3, 3)),
                              jnp.zeros((V, 0, 3)), one.height, one.width)
        times2 = np.zeros((V, 0), np.float32)
        depth2 = np.zeros((V, 0, H, W), np.float32)
    return FitData(frames=jnp.asarray(frames), cams=stack_cameras(cams),
                   times=jnp.asarray(views["times"], jnp.float32), depth=jnp.asarray(d_noisy),
                   flow=jnp.asarray(fl), flow_valid=jnp.asarray(fv), cams2=cams2,
                   times2=jnp.asarray(times2), depth2=jnp.asarray(depth2))


def keyframe_views(views: dict, rig_kind: str) -> tuple[int, ...]:
    """View indices used to spawn Gaussians: for each keyframe time, its frame's first view
    (monocular) or its k-th training camera (multiview: keyframe k uses camera k mod 4, so
    the spawned points see the scene from different sides)."""
    frames = keyframe_indices()
    fov = np.asarray(views["frame_of_view"])
    out = []
    for i, k in enumerate(frames):
        idx = np.nonzero(fov == k)[0]
        out.append(int(idx[i % len(idx)]) if rig_kind == "multiview" else int(idx[0]))
    return tuple(out)


def test_views(scene: scenes.SceneSpec, cams, times) -> dict:
    """Held-out ground truth: ``rgb`` [C, T, H, W, 3], ``fg`` [C, T, H, W] (object
    foreground) for cameras ``cams`` (list) and ``times``."""
    rgb, fg = [], []
    for cam in cams:
        r, m = zip(*[scenes.gt_render(scene, cam, float(t))[::2] for t in times])
        rgb.append(np.stack(r))
        fg.append(np.stack(m))
    return {"rgb": np.stack(rgb), "fg": np.stack(fg)}
