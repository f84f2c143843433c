"""No jitted step of ``train.run`` embeds a large constant: the series and means of the smoke
config travel as jit arguments (an array closed over is baked into the program, which then
grows with the data and recompiles for every new series). Lowering only, nothing runs."""

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.atc_cusum import baselines, configs, envs, train
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.testing import MAX_CONSTANT_BYTES, largest_constant

LIMIT = MAX_CONSTANT_BYTES


def _runs_constant(fn, spec, *args):
    """``largest_constant`` of the program ``mesh_lib.map_runs(mesh, fn, spec, *args)`` runs,
    its arguments placed as ``map_runs`` places them."""
    mesh = mesh_lib.runs_mesh(np.shape(args[0])[0])
    total = mesh_lib.padded_size(np.shape(args[0])[0], mesh)
    placed = [mesh_lib.shard_leading(mesh_lib.pad_leading(a, total), mesh, mesh_lib.RUNS)
              for a in args]
    with jax.set_mesh(mesh):
        return largest_constant(mesh_lib._map_runs, mesh, fn, spec, None, *placed)


def _check(name, got):
    nbytes, shape = got
    assert nbytes <= LIMIT, f"{name} embeds a {nbytes}-byte constant of shape {shape}"


def test_steps_embed_no_large_constant():
    c = configs.get_config("smoke")
    g = c.synthetic
    # the largest synthetic cell and the square-wave series, built as the suites build them
    S, T = max(g.S), max(g.T)
    rng = train._rng(c.seed, train._SUITE_ID["synthetic"], train._EVAL, S, T)
    mu = envs.random_jumps(rng, int(g.runs), T, S)
    x = envs.observe(rng, mu, c.sigma)
    Tq = max(c.square.T)
    mu_q = np.broadcast_to(envs.square_wave(Tq), (int(c.square.runs), Tq))
    x_q = envs.observe(train._rng(c.seed, train._SUITE_ID["square"], train._EVAL, Tq), mu_q,
                       c.sigma)
    ts = np.arange(g.prefix_every, T + 1, g.prefix_every, dtype=np.int32)
    specs = {"atc": ("atc", train.atc_params(c)),
             "fixed": ("fixed", float(c.sigma), float(g.delta), c.restart, c.scan,
                       float(c.ratio)),
             **train._page_specs(c), "oracle": ("oracle",), "window": ("window", 300),
             "discount": ("discount", 0.99)}
    for name, spec in specs.items():
        _check(f"_scores_one[{name}]",
               _runs_constant(train._scores_one, spec, x, mu, np.broadcast_to(ts, (len(x), len(ts)))))
    _check("_scores_one[atc, square]",
           _runs_constant(train._scores_one, specs["atc"], x_q, mu_q,
                          np.full((len(x_q), 1), Tq, np.int32)))
    for kind, values, dtype in (("window", g.windows, np.int32), ("discount", g.gammas, x.dtype)):
        v = np.broadcast_to(np.asarray(values, dtype), (len(x), len(values)))
        _check(f"_grid_one[{kind}]", _runs_constant(train._grid_one, kind, x, mu, v))
    # the real series: ATC and the window / discount grids on the longest one
    _, ri = envs.load_realint(None, None)
    _, nile = envs.load_nile()
    xr = max((nile, ri), key=len)
    p = train.atc_params(c, sigma=envs.sigma_hat(xr), c_value=c.c_estimated_sigma)
    _check("_atc_jit", largest_constant(train._atc_jit, p, jnp.asarray(xr)))
    _check("_series_grid", largest_constant(
        train._series_grid, "window", jnp.asarray(c.real.windows, np.int32), jnp.asarray(xr)))
    assert baselines.PAGE_REFS  # the Page specs above cover every reference
