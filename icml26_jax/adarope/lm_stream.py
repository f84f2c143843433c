"""AdaRoPE's T3 training stream: language-model batches on the HMM language, drawn on the
device inside the training program from (seed, stream salt, step), never from the arm.

``train`` uses these (and re-exports them); they are apart from it because they only concern
the data, not the models.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.lm import hmm as hmm_lib
from icml26_jax.lm import train as lm_train


# Folded into a model seed's key before the step, one per T3 stream: the streams are apart
# from each other and from the one ``nnx.Rngs(seed)`` initialises the models from.
LM_PRETRAIN_SALT = 3
LM_CONTINUE_SALT = 5
# In the T3 checkpoint fingerprints: a directory written with the previous (host NumPy) T3
# stream is refused instead of resumed with a different one.
LM_DATA_PROTOCOL = "hmm.sample_jax(fold_in(fold_in(key(seed), salt), step))"


def step_indices(start: int, n: int) -> np.ndarray:
    """``[n]`` int32 global step indices of the chunk that starts at ``start``."""
    return np.arange(start, start + n, dtype=np.int32)


def lm_key(seed, salt, step):
    """The key of a T3 training batch: a pure function of (seed, stream salt, step), never of
    the arm (all may be traced ints)."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), salt), step)


def lm_batches(hmm, seeds, steps, salt, batch_size: int, length: int) -> dict:
    """Next-token batches ``[N, n, B, length]`` of models with ``seeds [N]`` at ``steps [n]``,
    drawn by :func:`~icml26_jax.lm.hmm.sample_jax`; traceable (``hmm`` from
    ``hmm.device_hmm``).

    Inside a program over models sharded on ``RUNS`` the sampler runs through
    ``core.mesh.auto_over_runs`` (auto sharding mode, output sharded like the models).
    """
    def draw(seeds_, hmm_, steps_):
        def one(s, t):
            return lm_train.next_token_batch(
                hmm_lib.sample_jax(lm_key(s, salt, t), hmm_, batch_size, length + 1))

        return jax.vmap(lambda s: jax.vmap(lambda t: one(s, t))(steps_))(seeds_)

    return mesh_lib.auto_over_runs(draw, seeds, hmm, steps)


@functools.lru_cache(maxsize=8)
def _lm_sampler(salt: int, batch_size: int, length: int):
    """jit(seeds [N], hmm, steps [n]) -> batches ``[n, N, B, T]`` (what the program draws)."""
    return jax.jit(lambda s, h, t: jax.tree.map(
        lambda x: jnp.moveaxis(x, 0, 1), lm_batches(h, s, t, salt, batch_size, length)))


class LMStream(NamedTuple):
    """Fresh T3 training batches, drawn inside the training program: model n's batch at step
    t is ``hmm.sample_jax(lm_key(seeds[n], salt, t), hmm, batch_size, length + 1)`` as a
    next-token batch. Models of one seed (every arm) get the same batches.

    Calling it, ``stream(start, n)``, gives those batches on the host, ``[n, N, B, T]``
    (tests, benchmarks); :func:`_train` instead passes the HMM to the program.
    """

    hmm: hmm_lib.HMM
    seeds: np.ndarray  # [N] the seed of every model
    salt: int
    length: int
    batch_size: int

    def __call__(self, start: int, n: int) -> dict:
        out = _lm_sampler(int(self.salt), int(self.batch_size), int(self.length))(
            np.asarray(self.seeds, np.int32), hmm_lib.device_hmm(self.hmm),
            step_indices(start, n))
        return {k: np.asarray(v) for k, v in out.items()}


def _lm_batches(hmm_lang, seeds, index, length, batch_size, *, salt: int) -> LMStream:
    """Fresh HMM batches per (seed, step) for models ``n`` of seed ``seeds[index[n]]``."""
    return LMStream(hmm_lang, np.asarray([seeds[i] for i in index], np.int32), int(salt),
                    int(length), int(batch_size))


def lm_language(c) -> hmm_lib.HMM:
    """T3's HMM language (``config.lm``)."""
    L = c.lm
    return hmm_lib.make_hmm(L.num_states, L.vocab_size, seed=L.hmm_seed,
                            trans_concentration=L.concentration,
                            emit_concentration=L.concentration)
