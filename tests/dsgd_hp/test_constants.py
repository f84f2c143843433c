"""No jitted program of ``train.run`` embeds a large constant: every sweep of the smoke config
is built as ``train`` builds it (problems, graphs, keys), and the program ``dsgd.simulate``
would run is lowered with its real arguments (problem arrays, key, W) instead of run. An
array closed over would be baked into the program, which then grows with the data and
recompiles for every new problem."""

import numpy as np

from icml26_jax.core.testing import MAX_CONSTANT_BYTES, largest_constant
from icml26_jax.dsgd_hp import configs, dsgd, train

LIMIT = MAX_CONSTANT_BYTES


def test_simulation_programs_embed_no_large_constant(monkeypatch):
    c = configs.get_config("smoke")
    found = {}

    def lower_only(problem, graphs, schedule, **kw):
        fn, args = dsgd.program(problem, graphs, schedule, **kw)
        name = f"dsgd.simulate[{type(problem).__name__} n={problem.n}, " \
               f"{[g.name for g in graphs]}, {kw.get('noise', 'gauss')}]"
        found[name] = largest_constant(fn, *args)
        # zero metrics of the right shapes, so that the sweep goes on to its next simulation
        K, R, G = kw["T"] // kw["log_every"], kw["runs"], len(graphs) + 1
        z = np.zeros((G, K, R))
        return dsgd.Trace(np.arange(1, K + 1) * kw["log_every"], z, z, z[:-1],
                          z if kw.get("eval_every") else None)

    monkeypatch.setattr(train.dsgd, "simulate", lower_only)
    for sweep in c.sweeps:
        train.SWEEP_FNS[sweep](c)
    assert found
    for name, (nbytes, shape) in found.items():
        assert nbytes <= LIMIT, f"{name} embeds a {nbytes}-byte constant of shape {shape}"
