"""The spec's baselines (spec §Baselines), in one place.

They share code with the method on purpose, so each differs from it only in what it ablates:

- per scene: **order 1** (a = 0) and **order 0** (static per-keyframe Gaussians with temporal
  opacity only) are ``fit.Arm`` motion masks; **without temporal opacity** pins lambda;
  **photometric-only** and **coupled 3D** (lifted scene flow, ``losses.lifted_sceneflow_loss``
  with the pseudo-depth aligned to the current render) are supervision weights of the same
  ``fit.view_loss``;
- feed-forward: **FF order 1** (identical network, a = 0) and **FF without temporal opacity**
  are the same masks on ``model.FFTGsF``'s output; the **MoVieS-style offset head** is
  ``model.OffsetHeadModel`` (AdaLN on the query time, per-pixel 3D offsets, one pass per query
  time) sized by ``model.matched_offset_model`` to FF-TGsF's parameter count (within 5%).
"""

from __future__ import annotations

from icml26_jax.tgsf import fit, model

PER_SCENE = {
    "tgs": dict(order=2, temporal=True, supervision="photo"),
    "order1": dict(order=1, temporal=True, supervision="photo"),
    "order0": dict(order=0, temporal=True, supervision="photo"),
    "no_temporal": dict(order=2, temporal=False, supervision="photo"),
    "tgs_flow": dict(order=2, temporal=True, supervision="decoupled"),
    "coupled3d": dict(order=2, temporal=True, supervision="coupled3d"),
}
FEED_FORWARD = {
    "ff_tgsf": dict(order=2, temporal=True, supervision="decoupled"),
    "ff_order1": dict(order=1, temporal=True, supervision="decoupled"),
    "ff_no_temporal": dict(order=2, temporal=False, supervision="decoupled"),
}


def arm(name: str) -> fit.Arm:
    """The ``fit.Arm`` of a per-scene or feed-forward method / baseline by name."""
    table = {**PER_SCENE, **FEED_FORWARD}
    if name not in table:
        raise ValueError(f"unknown method {name!r}; allowed: {', '.join(table)}")
    return fit.make_arm(**table[name])


offset_model = model.matched_offset_model
