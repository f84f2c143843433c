"""No jitted step of the camera fit, its evaluation or synth1d_ns's Adam chunk embeds a large
constant: the smoke config's data set, pattern and probes, built as ``train.phase_camera``
and ``nonstationary.phase_nonstationary`` build them, travel as jit arguments (an array
closed over is baked into the program, which then grows with the data and recompiles for
every new data set). Lowering only, nothing runs."""

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core.testing import MAX_CONSTANT_BYTES, largest_constant
from icml26_jax.gp2scale import (configs, data, neighbors, nonstationary, posterior, solvers,
                                 sparse_cov, train)
from icml26_jax.gp2scale.fitting import adam_chunk, solver_cfg

LIMIT = MAX_CONSTANT_BYTES


def _check(name, got):
    nbytes, shape = got
    assert nbytes <= LIMIT, f"{name} embeds a {nbytes}-byte constant of shape {shape}"


def test_camera_fit_and_evaluation_embed_no_large_constant():
    c = configs.get_config("smoke")
    d, lo, hi, theta0, key, probes = train.camera_problem(c)
    ll = train.AdaptiveLoglik(d.x_train, d.y_train, probes, solver_cfg(c), c.pattern_mode,
                              hi[1:3])
    # the chain's likelihood (one proposal's pattern)
    _check("AdaptiveLoglik.fn", largest_constant(
        ll.fn, train._wparams(theta0), ll.xj, ll.yj, ll.pattern(theta0[1:3]), ll.probes))
    # the evaluation: likelihood with num_probes probes, posterior-variance solves
    p = train._wparams(theta0)
    xj, yj = jnp.asarray(d.x_train), jnp.asarray(d.y_train)
    pat = train.neighbors.build_pattern(d.x_train, np.asarray(theta0[1:3]), method="cells")
    ev_probes = solvers.rademacher(key, len(d.y_train), int(c.num_probes))
    _check("wendland_loglik (evaluation)", largest_constant(
        train.wendland_loglik(solver_cfg(c)), p, xj, yj, pat, ev_probes))
    op = sparse_cov.operator("wendland", p, xj, pat)
    _check("posterior_var solve", largest_constant(
        posterior._solver(1e-8, 2000), op, jnp.zeros((len(d.y_train), 256))))


def test_adam_chunk_takes_the_data_as_arguments():
    """synth1d_ns's Adam chunk (kernel 1, as ``phase_nonstationary`` runs it; lowered only)
    embeds nothing as large as the training data: x and y are arguments. At smoke size the
    data are far below 1 MiB, so the bound is the data's own size (a closed-over x or y would
    be a constant of exactly that size); the bounds (3 numbers) may be constants."""
    c = configs.get_config("smoke")
    d, _ = data.synth1d_ns(int(c.seed), n=int(c.ns_n))
    x, y = d.x_train, d.y_train
    lo = np.array([c.sigma2_bounds[0], 1e-3, c.noise_bounds[0]])
    hi = np.array([c.sigma2_bounds[1], float(c.ns_ls_max), c.noise_bounds[1]])
    pat = neighbors.build_pattern(x, float(c.ns_ls_max), method="cells", capacity="exact")
    probes = solvers.rademacher(jax.random.key(0), len(y), int(c.adam_probes))
    tx, run = adam_chunk(nonstationary.neg_loglik("wendland", nonstationary._k1_from, lo, hi,
                                                  solver_cfg(c)), float(c.adam_lr), 3)
    u0 = jnp.zeros((3,))
    nbytes, shape = largest_constant(run, (u0, tx.init(u0)), np.int32(3), jnp.asarray(x),
                                     jnp.asarray(y), pat, probes)
    assert nbytes < min(x.nbytes, y.nbytes), f"a {nbytes}-byte constant of shape {shape}"
