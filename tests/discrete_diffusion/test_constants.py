"""No jitted training or evaluation program of the smoke run embeds a large constant: the
models, the HMM language (the training chunk draws its batches from it on the device) or the
host batches of the real-data path, and the validation set go in as jit arguments (a
closed-over array is baked into the program, which then grows with the data and recompiles
for new data)."""

import jax
import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.testing import assert_no_large_constant as _check
from icml26_jax.discrete_diffusion import configs, data, train
from icml26_jax.discrete_diffusion import model as model_lib
from icml26_jax.lm import hmm as hmm_lib


def _placed(mesh, R, *args):
    """``args`` (leading axis R) padded and sharded over the replicas, as
    ``core.mesh.map_runs`` places them; abstract leaves stay abstract (lowering needs no
    values)."""
    total = mesh_lib.padded_size(R, mesh)
    sharding = jax.NamedSharding(mesh, jax.P(mesh_lib.RUNS))

    def place(a):
        if isinstance(a, jax.ShapeDtypeStruct):
            return jax.ShapeDtypeStruct((total,) + a.shape[1:], a.dtype, sharding=sharding)
        return mesh_lib.shard_leading(mesh_lib.pad_leading(np.asarray(a), total), mesh,
                                      mesh_lib.RUNS)

    return jax.tree.map(place, args)


@pytest.fixture(scope="module")
def smoke():
    """The smoke config, its data and one entry per group of train.run (one family each; the
    MDLM pair is one program): ``(group, graphdef, abstract stacked params, static)``."""
    c = configs.get_config("smoke")
    train.normalise_config(c)
    K = train.vocab_size(c)
    lang = train.language(c)
    val_tokens = data.validation_set(lang, int(c.val_size), int(c.length))
    groups = []
    for g in train.groups(c, {s: 1.0 for s in c.sizes}):
        # Shapes only: eager initialisation takes seconds, and parameters are jit arguments
        # whatever their values.
        graphdef, p = jax.eval_shape(
            lambda g=g: model_lib.init(g.size, g.family, K, g.seeds[0]))
        stacked = jax.tree.map(
            lambda x, R=len(g.seeds): jax.ShapeDtypeStruct((R,) + x.shape, x.dtype), p)
        groups.append((g, graphdef, stacked, (g.family, graphdef, train.hyper(c, g.steps))))
    return c, lang, val_tokens, groups


def test_train_chunk_embeds_no_large_constant(smoke):
    c, lang, _, groups = smoke
    # One chunk of host batches (the real-data path; the values do not change the program).
    chunk = np.zeros((int(c.chunk), int(c.batch), int(c.length)), np.int32)
    for g, _, params, static in groups:
        R = len(g.seeds)
        mesh = mesh_lib.runs_mesh(R)
        opt_state = jax.eval_shape(jax.vmap(lambda p: train._init_opt(static, p)), params)
        args = _placed(mesh, R, params, opt_state, np.asarray(g.seeds, np.int32),
                       np.asarray(g.low_var, bool), np.zeros((R,), np.int32),
                       np.stack([chunk] * R))
        with jax.set_mesh(mesh):
            _check(f"_train_chunk ({g.family})", mesh_lib._map_runs, mesh, train._train_chunk,
                   static, None, *args)
        if g is groups[0][0]:
            # The HMM path (train.run's): the language goes in as an argument and the batches
            # are drawn inside. Its data part is the same program for every family: lowered
            # once, for the first group (each lowering traces a whole training step).
            lang_r = jax.tree.map(lambda a, R=R: np.stack([np.asarray(a)] * R),
                                  hmm_lib.device_hmm(lang))
            args = args[:-1] + _placed(mesh, R, lang_r)
            with jax.set_mesh(mesh):
                _check(f"_train_chunk_hmm ({g.family})", mesh_lib._map_runs, mesh,
                       train._train_chunk_hmm,
                       static + (int(c.chunk), int(c.batch), int(c.length)), None, *args)


def test_validation_and_samplers_embed_no_large_constant(smoke):
    c, _, val_tokens, groups = smoke
    K, L = train.vocab_size(c), int(c.length)
    times = train.validation_times(len(val_tokens), int(c.val_times))
    for g, graphdef, params, _ in groups:
        R = len(g.seeds)
        mesh = mesh_lib.runs_mesh(R)
        args = _placed(mesh, R, params, np.stack([val_tokens] * R), np.stack([times] * R))
        with jax.set_mesh(mesh):
            _check(f"_validate ({g.family})", mesh_lib._map_runs, mesh, train._validate,
                   (g.family, graphdef, K), None, *args)
        # The Pareto samplers of train.pareto_points (one model, unstacked).
        one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), params)
        T = L if g.family == "ar" else tuple(c.sample_steps)[0]
        _check(f"_sample ({g.family})", train._sample, g.family, graphdef, one,
               jax.random.key(0), n=int(c.num_samples), length=L, T=T)
