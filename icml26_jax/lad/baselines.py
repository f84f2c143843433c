"""Baselines on the same frozen model and episodes (spec §Baselines and peers).

* ``vanilla``: argmax of the restricted log-probabilities.
* ``pride`` (Zheng et al., ICLR 2024): per calibration sample, the prior of position i is
  softmax(mean over the N cyclic permutations of log P(position i)); the global prior is the
  arithmetic mean of the per-sample priors; predict argmax(log P - log prior).
* ``pride_global_bias`` (the PriDe variant of the LAD repository): log P - column-mean(B).
* ``perm_average``: N cyclic passes, log-probabilities mapped back to the images and
  averaged (N forward passes per instance).
* ``raw_attention`` / ``purified_attention``: the attention readouts of Table 7 (layer mean of
  raw a^(l) over the candidate layers; pi alone).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.lad import data as data_lib


def pride_log_prior(cal_cyclic_logp):
    """log prior [N] from the N cyclic variants of S calibration samples: cal_cyclic_logp
    [S, N (variant), N (position)] normalised log-probabilities."""
    lp = jnp.asarray(cal_cyclic_logp, jnp.float32)
    if lp.ndim != 3 or lp.shape[1] != lp.shape[2]:
        raise ValueError(f"cal_cyclic_logp must be [S, N, N], got shape {lp.shape}")
    per_sample = jax.nn.softmax(jnp.mean(lp, axis=1), axis=-1)  # [S, N]
    return jnp.log(jnp.mean(per_sample, axis=0))


def pride_scores(logp, log_prior):
    """PriDe's debiased scores [B, N]: log P - log prior."""
    return jnp.asarray(logp) - jnp.asarray(log_prior)[None, :]


def pride_global_bias(bias):
    """The LAD repository's static variant: the column mean of B [N] (subtract it from log P)."""
    return jnp.mean(jnp.asarray(bias), axis=0)


def perm_average(scorer, episodes, layers=(0,)):
    """Scores [E, N] over the original candidates: the log-probabilities of the N cyclic
    variants mapped back to the images and averaged (N passes per instance)."""
    E, N = episodes.image_ids.shape
    var = data_lib.cyclic_variants(episodes)
    logp, _ = scorer.score(var, layers)
    logp = np.asarray(logp).reshape(E, N, N)  # [e, s, j]: slot j holds candidate (j + s) % N
    cand = (np.arange(N)[None, :] + np.arange(N)[:, None]) % N  # [s, j]
    out = np.zeros((E, N))
    np.add.at(out, (np.arange(E)[:, None, None], cand[None]), logp)
    return out / N


def raw_attention(scores):
    """The layer-mean raw attention [B, N] (Table 7 "RawAttn"; predict its argmax)."""
    return jnp.mean(jnp.maximum(jnp.asarray(scores), 0.0), axis=1)


def purified_attention(pi):
    """pi itself [B, N] (Table 7 "PurifiedAttn")."""
    return jnp.asarray(pi)
