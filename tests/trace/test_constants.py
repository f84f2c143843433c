"""No jitted training or evaluation program of the smoke run embeds a large constant: the
model, the pure-domain data and the sequences go in as jit arguments (a closed-over array is
baked into the program, which then grows with the data and recompiles for new data)."""

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core import testing
from icml26_jax.trace import baselines, configs, data, train

LIMIT = 1 << 20  # bytes


def _check(name, fn, *args):
    nbytes, shape = testing.largest_constant(fn, *args)
    assert nbytes <= LIMIT, f"{name} embeds a constant of {nbytes} bytes, shape {shape}"


def test_train_and_eval_programs_embed_no_large_constant():
    c = configs.get_config("smoke")
    train.normalise_config(c)
    k = int(c.k_total)
    mp = data.make_mechanisms(int(c.data_seed), int(c.d), k)
    pure, val = train._pure_sets(c, mp, k)
    # Training of the main part, as train.train_model builds it.
    k_init, k_train = jax.random.split(jax.random.split(jax.random.key(int(c.seed)))[0])
    # The parameters' shapes only (eager initialisation takes seconds; lowering needs no
    # values, and parameters are jit arguments whatever their values).
    graphdef, params = jax.eval_shape(lambda key: train.init_model(c, k, key), k_init)
    tx = train.make_tx(c)
    xs = jnp.asarray(train._stack_domains(pure, k))
    steps = int(c.steps)
    chunk, tail = train.train_programs(c, graphdef, tx, k, int(c.batch), steps)
    state = jax.eval_shape(lambda p: (p, tx.init(p)), params)
    _check("train_programs chunk", chunk, state, jnp.int32(0), xs, k_train)
    if steps % int(c.eval_every):
        _check("train_programs tail", tail, state, jnp.int32(0), xs, k_train)
    # Evaluation: the encoder on the pure data, the experts' emissions of the baselines.
    x = np.asarray(pure.x, np.float32)
    _check("encoder", train.encoder(graphdef), params, x)
    active = tuple(train._active_set(pure, k, int(c.k_active)))
    _check("baselines._expert_log_probs",
           jax.jit(lambda p, z: baselines._expert_log_probs(graphdef, p, z, active)), params, x)
