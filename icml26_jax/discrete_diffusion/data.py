"""Data of the scaling study (spec §Data): the HMM language, its floor H, and the real-data path.

**HMM language [R].** The shared generator ``icml26_jax.lm.hmm`` with S = 128 hidden states,
V = 64 tokens, 4 successor states per state and 8 emitted tokens per state (Dirichlet(0.5)
weights on both), generator seed 0: the language is a constant of the repository. Sequences
have 64 tokens. Training batch ``step`` of a run with seed ``s`` is drawn ON THE DEVICE, inside
the jitted training chunk, by ``lm.hmm.sample_jax`` from the key :func:`train_key` ``(s, step)``
(:func:`chunk_batches`; issue 43: the NumPy sampler took 1.4-9 ms per 32 x 64 batch on the
host, every step, against ~2 ms per step on an accelerator). The key is a pure function of
(seed, step), never of the family, size or objective, so every run of a seed sees the same
batches. Validation is 256 fixed sequences (NumPy ``hmm.sample``, seed 10_000), drawn once
and passed to the programs as an argument.

The exact log p(x) (forward algorithm) gives the floor H = E[-log p(x)] / 64 of every
family's loss (an optimal denoiser's continuous-time NELBO equals the true NLL), the oracle
Gen-PPL of samples (``metrics.oracle_gen_ppl``) and the data's unigram entropy.

**Real data.** ``lm1b`` (byte-level tokens, via ``tfds.data_source``) or user token shards (any
tokenizer; the shared ``token_shards`` builder) through :func:`real_windows`; there the floor
and the oracle Gen-PPL are unknown (NaN) and validation NELBO works unchanged.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.lm import hmm as hmm_lib

NUM_STATES = 128
VOCAB = 64
SUCCESSORS = 4
EMISSIONS = 8
CONCENTRATION = 0.5
LANGUAGE_SEED = 0
LENGTH = 64
VAL_SEED = 10_000
VAL_SIZE = 256
FLOOR_SEED = 20_000
TRAIN_KEY = 40_000  # root of the training-batch keys (apart from the noise keys key(seed))
SOURCES = ("hmm", "lm1b", "token_shards")


def make_language(seed: int = LANGUAGE_SEED, num_states: int = NUM_STATES,
                  vocab_size: int = VOCAB, successors: int = SUCCESSORS,
                  emissions: int = EMISSIONS, concentration: float = CONCENTRATION
                  ) -> hmm_lib.HMM:
    """The HMM language of the study (the defaults are the repository's constant)."""
    return hmm_lib.make_hmm(num_states, vocab_size, seed=seed,
                            trans_concentration=concentration,
                            emit_concentration=concentration,
                            num_successors=successors, num_emissions=emissions)


def train_key(seed, step) -> jax.Array:
    """The ``jax.random`` key of training batch ``step`` of run ``seed``:
    ``fold_in(fold_in(key(TRAIN_KEY), seed), step)``. Traceable (``seed``, ``step`` may be
    traced integers); a function of (seed, step) only, so every family, size and objective
    trained with seed ``s`` sees the same batches."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(TRAIN_KEY), seed), step)


def chunk_batches(hmm, seed, start, n: int, batch: int, length: int = LENGTH) -> jax.Array:
    """Training batches ``start, ..., start + n - 1`` of run ``seed``: int32 [n, batch, length].

    Batch ``step`` is ``lm.hmm.sample_jax(train_key(seed, step), hmm, batch, length)``; the
    ``n`` batches are drawn together (vmapped over the step: one scan over the positions per
    chunk, not one per step) and equal the batches drawn one at a time. Traceable: call it
    inside the jitted training chunk with ``hmm`` an argument (``lm.hmm.device_hmm``) and
    ``seed``, ``start`` traced; ``n``, ``batch``, ``length`` are static.
    """
    steps = start + jnp.arange(n, dtype=jnp.int32)
    return jax.vmap(lambda s: hmm_lib.sample_jax(train_key(seed, s), hmm, batch, length))(steps)


def train_batch(lang: hmm_lib.HMM, seed: int, step: int, batch: int,
                length: int = LENGTH) -> np.ndarray:
    """Training batch ``step`` of run ``seed`` as a host array int32 [batch, length]: the batch
    the training chunk draws on the device (:func:`chunk_batches`), for tests and notebooks."""
    return np.asarray(chunk_batches(hmm_lib.device_hmm(lang), int(seed), int(step), 1, batch,
                                    length)[0])


def validation_set(lang: hmm_lib.HMM, size: int = VAL_SIZE, length: int = LENGTH) -> np.ndarray:
    """The fixed validation sequences int32 [size, length] (seed 10_000)."""
    return hmm_lib.sample(lang, size, length, seed=VAL_SEED)


def sequence_entropy(lang: hmm_lib.HMM, length: int = LENGTH, num_seqs: int = 20_000,
                     seed: int = FLOOR_SEED, chunk: int = 4096) -> tuple[float, float]:
    """The floor H = E[-log p(x)] / length of length-``length`` sequences in nats/token, and
    its standard error, from ``num_seqs`` sampled sequences scored exactly."""
    if num_seqs < 2:
        raise ValueError(f"num_seqs must be >= 2, got num_seqs={num_seqs}")
    per_seq = []
    for i, s in enumerate(range(0, num_seqs, chunk)):
        x = hmm_lib.sample(lang, min(chunk, num_seqs - s), length, seed=(int(seed), i))
        per_seq.append(-hmm_lib.log_likelihood(lang, x).sum(1) / length)
    v = np.concatenate(per_seq)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size))


def data_unigram_entropy(lang: hmm_lib.HMM) -> float:
    """Entropy (nats) of the language's stationary token marginal."""
    return hmm_lib.unigram_entropy(lang)


def real_windows(source: str, data_dir: str, split: str, length: int, *,
                 num_windows: int | None = None, source_dir: str | None = None) -> np.ndarray:
    """Token windows int32 [N, length] of a real corpus (spec §Data, Real data).

    Args:
      source: ``"lm1b"`` (byte-level tokens of the TFDS ``lm1b`` sentences, vocab 256) or
        ``"token_shards"`` (user ``.npy`` token arrays through the shared builder).
      data_dir: TFDS data directory holding the prepared data set.
      split: ``"train"`` or ``"validation"`` (``lm1b``: ``"test"`` is used for validation).
      length: tokens per window.
      num_windows: keep at most this many windows.
      source_dir: ``token_shards`` only: the ``.npy`` directory to prepare from.
    """
    from icml26_jax.lm import corpus

    if source == "token_shards":
        return corpus.token_shard_windows(data_dir, length, split=split,
                                          num_windows=num_windows, source_dir=source_dir)
    if source == "lm1b":
        from icml26_jax.core import data as core_data

        src = core_data.data_source("lm1b", "test" if split == "validation" else split,
                                    data_dir=data_dir)
        n = len(src) if num_windows is None else min(len(src), 4 * num_windows)
        texts = (src[i]["text"] for i in range(n))
        return corpus.byte_windows(texts, length, num_windows=num_windows)
    raise ValueError(f"source must be one of {SOURCES[1:]} for real data, got "
                     f"source={source!r}")


def real_batch(windows: np.ndarray, seed: int, step: int, batch: int) -> np.ndarray:
    """Training batch ``step`` of run ``seed`` drawn from real ``windows`` [N, L]."""
    idx = np.random.default_rng((int(seed), int(step))).integers(0, len(windows), batch)
    return np.asarray(windows[idx], np.int32)
