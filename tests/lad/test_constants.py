"""No jitted training or evaluation program of the smoke run embeds a large constant: the
model and the episodes go in as jit arguments (a closed-over array is baked into the program,
which then grows with the data and recompiles for new data)."""

import numpy as np

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.testing import assert_no_large_constant as _check
from icml26_jax.lad import adapter, configs, data, train


def test_train_and_eval_programs_embed_no_large_constant():
    c = configs.get_config("smoke")
    train.normalise_config(c)
    pool = data.load_pool(int(c.pool_seed))
    # Training, as train.train builds it: a chunk of batches (padded to T_MAX, so every batch
    # has the shape of batch 0; repeating it keeps the test fast, the program is the same).
    graphdef, params = train.build(c)
    tx = train.make_tx(c)
    stack = [np.repeat(x, int(c.chunk), 0) for x in train.train_batches(c, pool, 0, 1)]
    _check("train_program", train.train_program(graphdef, tx), params, tx.init(params),
           *stack)
    # Evaluation: the scorer's program on the test episodes of the first setting.
    mode, N = train.SETTINGS[c.settings[0]]
    rng = np.random.default_rng(0)
    test = data.make_episodes(pool, "test", N, int(c.n_test), mode, np.full(N, 1.0 / N), rng)
    batch = data.tokenize(data.shuffle(test, int(c.num_shuffles), rng))
    mesh = mesh_lib.data_mesh() if c.shard else None
    scorer = adapter.FlaxRetrievalScorer(graphdef, params, mesh=mesh)
    fn = scorer._fn(batch.spans, train.candidate_layers(c))
    p = params if mesh is None else scorer._replicated
    rows = mesh_lib.padded_size(len(batch.last_idx), mesh, mesh_lib.DATA) if mesh else None
    idx = np.arange(rows or len(batch.last_idx)) % len(batch.last_idx)
    args = [np.asarray(a)[idx] for a in (batch.tokens, batch.patches, batch.is_patch,
                                         batch.last_idx)]
    if mesh is not None:
        args = [mesh_lib.shard_leading(a, mesh, mesh_lib.DATA) for a in args]
    _check("FlaxRetrievalScorer program", fn, p, *args)
