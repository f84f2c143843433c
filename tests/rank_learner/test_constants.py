"""No jitted step of ``train.run`` embeds a large constant: the stage-1 nuisance fits, the
stage-2 ranker training, the DR-learner and the test evaluation of E1 are lowered with the
smoke config's data (``train.prepare``) as ``train`` passes it. An array closed over would be
baked into the program, which then grows with the data and recompiles for every new sample.

Each builder is called as ``train`` calls it, with ``core.mesh.map_runs`` replaced by a stub
that lowers the program ``map_runs`` would run and stops: nothing trains."""

import jax
import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.testing import MAX_CONSTANT_BYTES, largest_constant
from icml26_jax.rank_learner import baselines, configs, nuisance, ranking, train

LIMIT = MAX_CONSTANT_BYTES


class _Lowered(Exception):
    """Raised by the ``map_runs`` stub once the program is lowered."""


def test_steps_embed_no_large_constant(monkeypatch):
    c = configs.get_config("smoke")
    found = {}

    def lower_only(mesh, fn, static, *args):
        total = mesh_lib.padded_size(min(np.shape(a)[0] for a in jax.tree.leaves(args)), mesh)
        placed = jax.tree.map(lambda a: mesh_lib.shard_leading(
            mesh_lib.pad_leading(jax.device_get(a), total), mesh, mesh_lib.RUNS), args)
        with jax.set_mesh(mesh):
            found[f"{fn.__name__}#{len(found)}"] = largest_constant(
                mesh_lib._map_runs, mesh, fn, static, None, *placed)
        raise _Lowered

    monkeypatch.setattr(mesh_lib, "map_runs", lower_only)
    seeds = train.seeds_of(c)
    P = train.prepare(c, c.dgp, seeds)
    nu, s2, test = P["nuis"], P["stage2"], P["test"]
    S, n = nu.t.shape
    w = np.zeros((S, n), bool)
    w[:, :P["n_nuis_train"]] = True
    with pytest.raises(_Lowered):  # stage 1
        nuisance.fit_nuisances(seeds, nu.x, nu.t, nu.y, w, ~w, train.fit_config(c, stage=1),
                               c.hidden)
    # stage 2 and the DR-learner on labels of the stage-2 shapes (the true effects)
    n_tr = P["n_stage2_train"]
    phi2 = np.asarray(ranking.aipw(s2.y, s2.t, s2.mu0, s2.mu1, np.full_like(s2.mu0, 0.5),
                                   c.prop_clip))
    with pytest.raises(_Lowered):
        train._stage2(c, seeds, s2.x, n_tr, [(s2.tau, phi2, False), (s2.tau, phi2, True)])
    w2 = np.zeros(phi2.shape, bool)
    w2[:, :n_tr] = True
    with pytest.raises(_Lowered):
        baselines.dr_learner(seeds, s2.x, phi2, w2, ~w2, train.fit_config(c), c.hidden)
    with pytest.raises(_Lowered):  # evaluation
        train.evaluate(test.tau, test, test.tau)
    with pytest.raises(_Lowered):
        train.toc_grid(test.tau, test.tau)
    assert [k.split("#")[0] for k in found] == ["_fit_one", "_train_one", "_fit_one",
                                                "_evaluate_one", "_toc_one"], found
    for name, (nbytes, shape) in found.items():
        assert nbytes <= LIMIT, f"{name} embeds a {nbytes}-byte constant of shape {shape}"
