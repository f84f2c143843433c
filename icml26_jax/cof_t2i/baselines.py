"""The arms of the comparison (spec §Baselines and peers).

Every arm shares the DiT width and depth, the optimiser, batch, data stream (the same
minibatch indices into the same trajectory pool), the CFG rule and the evaluator; arms
differ only in which frames they are trained on and for how many steps:

* ``single``: 1 frame, F3 only, ``steps`` steps (the same-size single-frame T2I model, the
  paper's "final frame only" ablation);
* ``single_3x``: ``single`` with 3x the steps (about ``cof``'s training FLOPs);
* ``repeat``: frames (F3, F3, F3): ``cof``'s tokens and compute without a trajectory;
* ``cof``: frames (F1, F2, F3), each encoded on its own;
* ``cof_f2f3`` (optional ablation): frames (F2, F3);
* ``cof_joint_enc`` (optional ablation): frames (F1, F2, F3) through ``vae.JointTemporalAE``
  (F1 alone, F2 and F3 in one shared latent frame): 2 latent frames, decoded back to 3.

The output image of every arm is its last frame (index F - 1; for ``cof_joint_enc`` the F3
half of the shared latent frame's decoding).
"""

from __future__ import annotations

from typing import NamedTuple


class ArmSpec(NamedTuple):
    num_frames: int
    frames: tuple[int, ...]  # indices into the trajectory (0 = F1, 1 = F2, 2 = F3)
    steps_mult: int  # training steps = steps_mult * config.steps
    encoder: str = "frame"  # "frame": FrameAE latents per frame; "joint": JointTemporalAE


ARMS = {
    "cof": ArmSpec(3, (0, 1, 2), 1),
    "single": ArmSpec(1, (2,), 1),
    "single_3x": ArmSpec(1, (2,), 3),
    "repeat": ArmSpec(3, (2, 2, 2), 1),
    "cof_f2f3": ArmSpec(2, (1, 2), 1),
    # frames index the joint encoder's 2 latent frames (F1, shared (F2, F3))
    "cof_joint_enc": ArmSpec(2, (0, 1), 1, "joint"),
}
CORE_ARMS = ("cof", "single", "single_3x", "repeat")


def arm(name: str) -> ArmSpec:
    if name not in ARMS:
        raise ValueError(f"arm must be one of {tuple(ARMS)}, got {name!r}")
    return ARMS[name]
