"""No cell program of ``train.run`` embeds a large constant: for every game of the smoke
config (``data.load_game_set`` as ``run`` loads it) and every method, the program
``Runner.estimates`` maps over the seeds x explicands replicas is lowered with the replicas'
real arguments (keys, game arrays). An array closed over would be baked into the program,
which then grows with the game and recompiles for every new one. Lowering only."""

import jax
import numpy as np

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.testing import MAX_CONSTANT_BYTES, largest_constant
from icml26_jax.oddshap import configs, data, train

LIMIT = MAX_CONSTANT_BYTES


def _runs_constant(static, shared, *args):
    """``largest_constant`` of ``mesh_lib.map_runs(mesh, train._estimate, static, *args,
    shared=shared, batch_size=train.REPLICA_BATCH)`` (the runner's map), the arguments placed
    as ``map_runs`` places them."""
    n = np.shape(jax.tree.leaves(args)[0])[0]
    mesh = mesh_lib.runs_mesh(n)
    total = mesh_lib.padded_size(n, mesh)
    placed = jax.tree.map(lambda a: mesh_lib.shard_leading(
        mesh_lib.pad_leading(a, total), mesh, mesh_lib.RUNS), args)
    shared = jax.tree.map(lambda a: mesh_lib.replicate(np.asarray(a), mesh), shared)
    with jax.set_mesh(mesh):
        return largest_constant(mesh_lib._map_runs_with((), train.REPLICA_BATCH), mesh,
                                train._estimate, static, shared, *placed)


def test_cells_embed_no_large_constant(tmp_path):
    c = configs.get_config("smoke")
    train.normalise_config(c)
    runner = train.Runner(c)
    for name in c.games:
        gs = data.load_game_set(name, seed=int(c.seed), explicands=int(c.explicands),
                                cache_dir=str(tmp_path), train_steps=int(c.train_steps) or None)
        m = max(train.budgets_for(c, gs.n))  # the largest budget: the largest arrays
        keys = train.seed_keys(c, gs.name, m)
        for method in c.methods:
            static, key_data, params, arrays = runner.replicas(gs, method, m, keys)
            nbytes, shape = _runs_constant(static, arrays, key_data, params)
            assert nbytes <= LIMIT, (f"_estimate[{name}, {method}, m={m}] embeds a {nbytes}-byte "
                                     f"constant of shape {shape}")
