"""The reference points of the study (spec §Baselines and peers): AR and MDLM trained with
its NELBO, re-exported from ``losses`` / ``samplers`` where every family is implemented.

No JAX library implements these objectives; the peer a user would pick is the official
PyTorch code (https://github.com/s-sahoo/scaling-dllms, not a dependency). GIDD's hybrid
noise (the optional fifth family of the spec) is not implemented.
"""

from __future__ import annotations

from icml26_jax.discrete_diffusion import losses, samplers

ar_sample = samplers.ar_sample
mdlm_sample = samplers.mdlm_sample


def ar_loss(params, graphdef, batch: dict, key, *, K: int):
    """Next-token NLL after ``[BOS]`` (nats/token), the AR baseline."""
    return losses.loss_fn("ar", params, graphdef, batch, key, train=True, K=K)


def mdlm_nelbo_loss(params, graphdef, batch: dict, key, *, K: int):
    """MDLM's NELBO (weight 1/t) as the training loss: the baseline of the low-var objective."""
    return losses.loss_fn("mdlm", params, graphdef, batch, key, train=True, K=K)
