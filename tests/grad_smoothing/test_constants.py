"""No jitted training or evaluation program of the smoke run embeds a large constant: the
replicas, their depth operators and learning rates and the HMM the batches are drawn from go
in as jit arguments (a closed-over array is baked into the program, which then grows with the
data and recompiles for new data)."""

import jax
import numpy as np

from icml26_jax.core.testing import assert_no_large_constant as _check
from icml26_jax.grad_smoothing import configs, train
from icml26_jax.lm import hmm as hmm_lib
from icml26_jax.lm import train as lm_train


def test_train_and_eval_programs_embed_no_large_constant():
    c = configs.get_config("smoke")
    train.validate_config(c)
    lang = train.language(c)
    # Stage 2 of train.protocol (every arm), as train.train_replicas builds it.
    seeds = [int(s) for s in c.eval_seeds]
    arms = [a for a in train.ARMS for _ in seeds]
    seeds = seeds * len(train.ARMS)
    lrs = np.full((len(arms),), max(c.lrs), np.float32)
    # Shapes only: eager initialisation of the replicas takes seconds, and parameters are jit
    # arguments whatever their values.
    graphdef, params, rest = jax.eval_shape(lambda: train.build(c, seeds))
    mats = np.stack([train.arm_matrix(c, a) for a in arms]).astype(np.float32)
    opt_state = jax.eval_shape(
        jax.vmap(train.make_tx(c, 1.0, np.eye(c.depth, dtype=np.float32), c.steps).init),
        params)
    # The training chunk draws its batches inside from (seed, step): the HMM is an argument.
    _check("_program", train._program(c, graphdef, c.steps), params, rest, opt_state, lrs,
           mats, np.asarray(seeds, np.int32), hmm_lib.device_hmm(lang),
           train.step_indices(0, c.log_every))
    val = lm_train.next_token_batch(hmm_lib.sample(lang, c.val_size, c.seq_len + 1,
                                                   seed=train.VAL_SEED))
    probe = lm_train.next_token_batch(hmm_lib.sample(lang, c.probe_size, c.seq_len + 1,
                                                     seed=train.PROBE_SEED))
    _check("_eval_program", train._eval_program(graphdef), params, rest, val, probe)
    _check("_update_cosine", train._update_cosine, params, params)
