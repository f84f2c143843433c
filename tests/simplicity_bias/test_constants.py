"""No jitted step of ``train.run`` embeds a large constant: the online-SGD programs of every
online part of the smoke config and the denoiser training / evaluation of the images part
are lowered with the arguments ``train`` gives them (keys, replica states, images). An array
closed over would be baked into the program, which then grows with the data and recompiles
for every new data set.

Each part is called as ``run`` calls it, with the step programs replaced by stubs that lower
them and stop before the first training step: nothing trains."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.testing import MAX_CONSTANT_BYTES, largest_constant
from icml26_jax.simplicity_bias import configs, images, train

LIMIT = MAX_CONSTANT_BYTES


class _Lowered(Exception):
    """Raised by a stub once its training step is lowered."""


def test_steps_embed_no_large_constant(tmp_path, monkeypatch):
    c = configs.get_config("smoke")
    train.normalise_config(c)
    found = {}
    real_map_runs, real_train, real_eval = mesh_lib.map_runs, images._train, images._evaluate

    def map_runs(mesh, fn, static, *args):
        total = mesh_lib.padded_size(min(np.shape(a)[0] for a in jax.tree.leaves(args)), mesh)
        placed = jax.tree.map(lambda a: a if isinstance(a, jax.Array) and a.shape[0] == total
                              else mesh_lib.shard_leading(mesh_lib.pad_leading(
                                  jax.device_get(a), total), mesh, mesh_lib.RUNS), args)
        with jax.set_mesh(mesh):
            found[f"{fn.__name__}#{len(found)}"] = largest_constant(
                mesh_lib._map_runs, mesh, fn, static, None, *placed)
        if fn.__name__ == "_advance_replica":
            raise _Lowered
        return real_map_runs(mesh, fn, static, *args)  # the initial state (no step)

    def train_step(*args):
        found[f"images._train#{len(found)}"] = largest_constant(real_train, *args)
        # zero snapshots of the right shapes instead of training
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                            jax.eval_shape(real_train, *args))

    def evaluate(*args):
        found[f"images._evaluate#{len(found)}"] = largest_constant(real_eval, *args)
        raise _Lowered

    monkeypatch.setattr(mesh_lib, "map_runs", map_runs)
    monkeypatch.setattr(images, "_train", train_step)
    parts = {"pairwise": train.part_pairwise, "cumulant": train.part_cumulant,
             "linear_budget": train.part_linear_budget, "correlated": train.part_correlated,
             "images": train.part_images}
    monkeypatch.setattr(images, "_evaluate", evaluate)
    for part in (p for p in c.parts if p in parts):  # "exponent" is host quadrature
        with pytest.raises(_Lowered):
            parts[part](c, str(tmp_path / part))
    names = {k.split("#")[0] for k in found}
    assert {"_init_from_data", "_advance_replica", "images._train",
            "images._evaluate"} <= names, found
    for name, (nbytes, shape) in found.items():
        assert nbytes <= LIMIT, f"{name} embeds a {nbytes}-byte constant of shape {shape}"
