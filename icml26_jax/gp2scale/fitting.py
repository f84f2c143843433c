"""Shared pieces of the gp2Scale experiment's phases: logging, config slices, the solver
config, and the orbax-checkpointed Adam loop (camera with ``--config.train=adam``, and the
synth1d_ns kernels)."""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26_jax.core import checkpoint
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.optim import promotion_safe
from icml26_jax.gp2scale import likelihood


def _log(msg, *args):
    logging.getLogger("absl").info("gp2scale: " + msg, *args)


def _fields(c, *keys) -> dict:
    return {k: c[k] for k in keys}


def solver_cfg(c, tol=None) -> likelihood.SolverConfig:
    return likelihood.SolverConfig(float(tol or c.cg_tol), int(c.cg_maxiter),
                                   int(c.lanczos_steps))


def adam_loop(c, loss, u0, args, directory, name, steps, extra_fp=None):
    """``steps`` Adam steps on ``loss(u, *args)`` in checkpointed chunks; returns
    ``(u, losses)``. ``args`` (data, pattern, probes) are jit arguments of the chunk program,
    never closed over. ``extra_fp``: further settings the run depends on (fingerprinted)."""
    chunk = max(1, steps // 3)
    tx, run = adam_chunk(loss, float(c.adam_lr), chunk)
    logs = {"loss": np.full((steps,), np.nan)}

    def advance(carry, lg, start, k):
        carry, lv = run(carry, np.int32(k), *args)
        # One device -> host copy per chunk: the k steps ran on device without a sync.
        lg["loss"][start:start + k] = np.asarray(lv)[:k]
        return carry, f"loss {lg['loss'][start + k - 1]:.4f}"

    fp = checkpoint.config_fingerprint({"stage": name, "steps": steps, **(extra_fp or {}),
                                        **_fields(c, "seed", "adam_lr", "adam_probes", "ns_n",
                                                  "ns_ls_max", "cg_tol", "crop")})
    (u, _), logs = checkpoint.run_chunks(directory, fingerprint=fp, state=(u0, tx.init(u0)),
                                         logs=logs, steps=steps, chunk=chunk,
                                         advance=advance, name=name)
    # Through the host: a fresh run's u lives on the likelihood's column mesh
    # (core.mesh.columns_mesh), a restored one on the default device; the evaluation that follows
    # must compile the same programs either way (resume gives the same numbers).
    return jnp.asarray(mesh_lib.to_host(u)), logs["loss"]


def adam_chunk(loss, lr: float, size: int):
    """The Adam optimiser and the jitted program of one chunk of up to ``size`` steps.

    Returns:
      ``(tx, run)``: ``run((u, opt_state), n, *args) -> ((u, opt_state), losses [size])``
      takes ``n <= size`` Adam steps on ``loss(u, *args)`` in a ``fori_loop`` on device;
      ``losses[:n]`` are the step losses (the rest NaN). ``n`` is traced, so a shorter last
      chunk reuses the same compiled program.
    """
    tx = promotion_safe(optax.adam(float(lr)))
    return tx, jax.jit(functools.partial(_adam_chunk, tx, loss, int(size)))


def _adam_chunk(tx, loss, size, carry, n, *args):
    def body(i, state):
        carry, lv = state
        carry, val = _adam_step(tx, loss, carry, *args)
        return carry, lv.at[i].set(val)

    return jax.lax.fori_loop(0, n, body, (carry, jnp.full((size,), jnp.nan, carry[0].dtype)))


def _adam_step(tx, loss, carry, *args):
    u, opt = carry
    val, g = jax.value_and_grad(loss)(u, *args)
    g = jax.tree.map(lambda a: jnp.where(jnp.isfinite(a), a, 0.0), g)
    upd, opt = tx.update(g, opt, u)
    return (optax.apply_updates(u, upd), opt), val
