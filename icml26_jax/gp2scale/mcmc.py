"""Block adaptive Metropolis: the faithful training path of gp2Scale (spec §Method "Training").

fvGP trains gp2Scale hyperparameters with the block adaptive Metropolis sampler of its
``gp_mcmc.py`` (Shaby & Wells' adaptive random walk, via L. Zhang). We sample ``u = log theta``
under a uniform prior on ``theta`` within bounds (``log_target`` adds the log-Jacobian
``sum(u)``, spec [R]). One iteration updates the blocks in order; block ``b`` proposes

    u'_b = u_b + L_b eps,   L_b L_b^T = s_b Sigma_b,   eps ~ N(0, I)

(the other coordinates unchanged) and accepts with probability ``min(1, exp(logp' - logp))``.
Every ``K`` iterations (``i`` = iterations done) the proposal adapts (fvGP's constants: the
initial ``s_b = 2.4^2 / dim_b``, ``K = 10``, offset 3, ``c_0 = 10``, exponent ``c_1 = 0.8``,
target acceptance 0.234)::

    gamma2 = 1 / ((i / K) + 3)^0.8,   gamma1 = 10 gamma2,
    log s_b += gamma1 (r_b - 0.234),           r_b: block b's acceptance over the last K,
    Sigma_b += gamma2 (Cov_b - Sigma_b),       Cov_b: sample covariance of u_b over the last K.

The proposal covariance is ``s_b Sigma_b`` as the spec and the original R sampler have it
(fvGP's ``normal_proposal_dist`` draws from ``Sigma_b`` alone; the spec is followed here).

Two modes share one ``am_step``:

* **eager, host target**: ``logp_fn`` may be any Python callable returning a float (the
  gp2Scale likelihood rebuilds its sparsity pattern on the host for every proposal). The
  iteration is a Python loop; nothing is jitted.
* **jit, traceable target**: ``jax.jit(lambda s, k: am_step(s, k, logp_fn, blocks))`` or
  ``run_chain(..., jit=True)`` (one ``lax.scan``). ``blocks`` is static.

Both use jnp ops only and ``jnp.where`` for every decision, so they give the same chain.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

TARGET_ACCEPT = 0.234  # optimal random-walk acceptance (Roberts, Gelman & Gilks 1997)
SCALE_NUMERATOR = 2.4 ** 2  # s_b = 2.4^2 / dim_b (Gelman, Roberts & Gilks 1996)
GAMMA_OFFSET = 3.0  # fvGP's k: damps the first adaptations
GAMMA_EXPONENT = 0.8  # fvGP's c_1
GAMMA1_FACTOR = 10.0  # fvGP's c_0
DEFAULT_INIT_COV = 0.01  # Sigma_b = 0.01 I: ~0.24/sqrt(dim_b) first steps in log theta
_JITTER = 1e-10  # relative diagonal jitter for the Cholesky of s_b Sigma_b

Blocks = tuple[tuple[int, ...], ...]


class AMState(NamedTuple):
    """State of the block adaptive Metropolis chain (a pytree of arrays).

    ``covs`` is padded: ``covs[b, :d_b, :d_b]`` is ``Sigma_b`` and the rest is zero, so the
    state is one fixed-shape array tree (jit, ``jnp.where`` over the tree, checkpoints).
    """

    u: jax.Array  # [dim] current point (u = log theta)
    logp: jax.Array  # [] log target at u (always finite)
    log_scale: jax.Array  # [n_blocks] log s_b
    covs: jax.Array  # [n_blocks, dmax, dmax] Sigma_b, zero-padded beyond d_b
    window: jax.Array  # [K, dim] ring buffer of the last K samples (slot = step % K)
    window_acc: jax.Array  # [K, n_blocks] their accept flags (0.0 / 1.0)
    accepted: jax.Array  # [n_blocks] int32 accepts since the start
    step: jax.Array  # [] int32 iterations done


def _canonical_blocks(blocks, dim: int) -> Blocks:
    """Returns ``blocks`` as a tuple of int tuples; ValueError unless it partitions range(dim)."""
    try:
        canon = tuple(tuple(int(i) for i in b) for b in blocks)
    except TypeError as e:
        raise ValueError(f"blocks must be a sequence of index sequences, got {blocks!r}") from e
    flat = sorted(i for b in canon for i in b)
    if not canon or any(len(b) == 0 for b in canon) or flat != list(range(dim)):
        raise ValueError(f"blocks must partition range({dim}) into non-empty blocks (every "
                         f"index exactly once), got {blocks!r}")
    return canon


def _is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def log_target(loglik_fn: Callable, lo, hi) -> Callable:
    """Log posterior of ``u = log theta`` under a uniform prior on ``theta`` in ``[lo, hi]``.

    ``logp(u) = loglik_fn(exp(u)) + sum(u)`` (``sum(u)`` is the log-Jacobian of
    ``theta = exp(u)``) when every ``exp(u)`` lies in ``[lo, hi]``, else ``-inf``. The bounds
    are checked on ``theta`` itself before ``loglik_fn`` is called, so a sampled
    ``exp(u)`` can never leave the box and the likelihood is never evaluated outside it.

    The returned function works in both ``am_step`` modes: given a concrete ``u`` it checks the
    bounds on the host, calls ``loglik_fn`` with a numpy ``theta`` only inside them and returns
    a Python float; given a traced ``u`` (under ``jax.jit``) it uses ``lax.cond``, so a
    traceable ``loglik_fn`` still runs only inside the box. Non-finite values map to ``-inf``.

    Args:
      loglik_fn: ``theta [dim] -> scalar`` log likelihood.
      lo: lower bounds on theta, scalar or [dim], ``>= 0``.
      hi: upper bounds on theta, scalar or [dim], ``> lo``.

    Returns:
      ``logp(u)``: ``u [dim] -> scalar``.

    Raises:
      ValueError: if ``lo`` or ``hi`` is NaN, ``lo < 0`` or ``hi <= lo``.
    """
    lo_h = np.asarray(lo, np.float64)
    hi_h = np.asarray(hi, np.float64)
    if np.any(np.isnan(lo_h)) or np.any(lo_h < 0):
        raise ValueError(f"lo must be >= 0 (theta = exp(u) > 0), got {lo!r}")
    if np.any(np.isnan(hi_h)) or np.any(hi_h <= lo_h):
        raise ValueError(f"hi must be > lo elementwise, got hi={hi!r}, lo={lo!r}")

    def logp(u):
        if _is_traced(u):
            dtype = u.dtype
            theta = jnp.exp(u)
            inside = jnp.all((theta >= jnp.asarray(lo_h, dtype))
                             & (theta <= jnp.asarray(hi_h, dtype)))

            def _inside(v):
                val = jnp.asarray(loglik_fn(jnp.exp(v)), dtype) + jnp.sum(v)
                return jnp.where(jnp.isfinite(val), val, -jnp.inf)

            return jax.lax.cond(inside, _inside,
                                lambda v: jnp.asarray(-jnp.inf, dtype), u)
        u_h = np.asarray(u, np.float64)
        theta = np.exp(u_h)
        if not (np.all(np.isfinite(u_h)) and np.all(theta >= lo_h) and np.all(theta <= hi_h)):
            return -math.inf
        val = float(loglik_fn(theta)) + float(np.sum(u_h))
        return val if math.isfinite(val) else -math.inf

    return logp


def _initial_covs(init_cov, blocks: Blocks, dim: int, dtype) -> jax.Array:
    """[n_blocks, dmax, dmax] padded Sigma_b from ``init_cov`` (see ``am_init``)."""
    if init_cov is None:
        full = DEFAULT_INIT_COV * np.eye(dim)
    else:
        c = np.asarray(init_cov, np.float64)
        if c.ndim == 0:
            full = float(c) * np.eye(dim)
        elif c.shape == (dim,):
            full = np.diag(c)
        elif c.shape == (dim, dim):
            full = c
        else:
            raise ValueError(f"init_cov must be a scalar, [{dim}] or [{dim}, {dim}], got shape "
                             f"{c.shape}")
    dmax = max(len(b) for b in blocks)
    covs = np.zeros((len(blocks), dmax, dmax))
    for b, idx in enumerate(blocks):
        sub = full[np.ix_(idx, idx)]
        if (not np.all(np.isfinite(sub)) or not np.allclose(sub, sub.T)
                or np.linalg.eigvalsh(0.5 * (sub + sub.T)).min() <= 0):
            raise ValueError(f"init_cov must be symmetric positive definite on every block; "
                             f"block {idx} gets {sub.tolist()}")
        covs[b, :len(idx), :len(idx)] = 0.5 * (sub + sub.T)
    return jnp.asarray(covs, dtype)


def am_init(u0, logp_fn: Callable, blocks: Sequence[Sequence[int]], *, K: int = 10,
            init_cov=None) -> AMState:
    """Initial adaptive Metropolis state at ``u0``.

    ``s_b = 2.4^2 / dim_b`` (fvGP) and ``Sigma_b = 0.01 I`` unless ``init_cov`` is given
    (fvGP defaults to ``I`` and warns that one should be supplied; on ``u = log theta`` 0.01
    gives first steps of about ``0.24 / sqrt(dim_b)`` in log theta, which the adaptation then
    tunes). The window is filled with ``u0`` and is fully overwritten before its first use.

    Args:
      u0: [dim] finite start, float (its dtype is the chain's; use float64 for GPs).
      logp_fn: ``u [dim] -> scalar`` log target; host callable or traceable.
      blocks: a partition of ``range(dim)``, e.g. ``((0, 3), (1, 2))``.
      K: adaptation period and window length (fvGP: 10).
      init_cov: None, a scalar ``c`` (``c I``), [dim] variances or a [dim, dim] SPD matrix
        whose block sub-matrices are the ``Sigma_b``.

    Returns:
      The ``AMState`` (``step = 0``).

    Raises:
      ValueError: naming ``u0`` (not a finite vector, or ``logp_fn(u0)`` not finite),
        ``blocks`` (not a partition), ``K`` (< 1) or ``init_cov``.
    """
    u0 = jnp.asarray(u0)
    if not jnp.issubdtype(u0.dtype, jnp.floating):
        u0 = u0.astype(jnp.result_type(float))
    if u0.ndim != 1 or u0.shape[0] == 0 or not bool(jnp.all(jnp.isfinite(u0))):
        raise ValueError(f"u0 must be a non-empty finite vector, got {np.asarray(u0)}")
    dim, dtype = u0.shape[0], u0.dtype
    blocks = _canonical_blocks(blocks, dim)
    if int(K) != K or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    K = int(K)
    lp = jnp.asarray(logp_fn(u0), dtype)
    if not bool(jnp.isfinite(lp)):
        raise ValueError(f"u0 must have a finite log target (start inside the support), "
                         f"logp_fn(u0) = {float(lp)} at u0 = {np.asarray(u0)}")
    nb = len(blocks)
    return AMState(
        u=u0, logp=lp,
        log_scale=jnp.log(jnp.asarray([SCALE_NUMERATOR / len(b) for b in blocks], dtype)),
        covs=_initial_covs(init_cov, blocks, dim, dtype),
        window=jnp.tile(u0, (K, 1)),
        window_acc=jnp.zeros((K, nb), dtype),
        accepted=jnp.zeros((nb,), jnp.int32),
        step=jnp.zeros((), jnp.int32))


def am_adapt(state: AMState, i, blocks: Sequence[Sequence[int]]) -> AMState:
    """Adapts ``log s_b`` and ``Sigma_b`` from the window (fvGP's update, module docstring).

    ``gamma2 = 1 / ((i / K) + 3)^0.8 < 1`` makes the ``Sigma_b`` update a convex combination
    of two PSD matrices, so ``Sigma_b`` stays symmetric PSD (it is re-symmetrised against
    round-off). ``Cov_b`` is the unbiased sample covariance of the K window rows (divisor
    ``max(K - 1, 1)``).

    Args:
      state: the chain state; its window holds the last K samples and accept flags.
      i: iterations done (a multiple of K when ``am_step`` calls it); int or traced int.
      blocks: the static block partition used by ``am_init``.

    Returns:
      The state with ``log_scale`` and ``covs`` updated (everything else unchanged).
    """
    K = state.window.shape[0]
    dtype = state.u.dtype
    g2 = 1.0 / (jnp.asarray(i, dtype) / K + GAMMA_OFFSET) ** GAMMA_EXPONENT
    g1 = GAMMA1_FACTOR * g2
    rate = jnp.mean(state.window_acc, axis=0)  # [n_blocks]
    log_scale = state.log_scale + g1 * (rate - TARGET_ACCEPT)
    covs = state.covs
    for b, idx in enumerate(blocks):
        d = len(idx)
        w = state.window[:, jnp.asarray(idx)]  # [K, d]
        wc = w - jnp.mean(w, axis=0)
        emp = wc.T @ wc / max(K - 1, 1)  # [d, d]
        old = covs[b, :d, :d]
        new = old + g2 * (emp - old)
        covs = covs.at[b, :d, :d].set(0.5 * (new + new.T))
    return state._replace(log_scale=log_scale, covs=covs)


def am_step(state: AMState, key: jax.Array, logp_fn: Callable,
            blocks: Sequence[Sequence[int]]) -> tuple[AMState, dict]:
    """One iteration: a Metropolis update of every block in order, then the window and,
    every K iterations, ``am_adapt``.

    Block ``b`` uses ``fold_in(key, b)``. A proposal whose ``logp`` (or any coordinate) is
    not finite, ``-inf`` included, is rejected, so the state never holds NaN. Works eagerly
    with a host ``logp_fn`` (it receives a concrete ``jax.Array`` [dim]) and under
    ``jax.jit`` with a traceable one (``blocks`` static).

    Args:
      state: current ``AMState``.
      key: typed PRNG key for this iteration (``fold_in(chain_key, i)``).
      logp_fn: ``u [dim] -> scalar`` log target.
      blocks: the block partition used by ``am_init``.

    Returns:
      ``(state, info)`` with ``info = {"accept": [n_blocks] bool, "logp_proposed":
      [n_blocks] the proposals' log targets, "adapted": [] bool}``.

    Raises:
      ValueError: if ``blocks`` does not partition ``range(dim)`` or does not match the state.
    """
    blocks = _canonical_blocks(blocks, state.u.shape[0])
    if len(blocks) != state.log_scale.shape[0]:
        raise ValueError(f"blocks has {len(blocks)} blocks, the state {state.log_scale.shape[0]}")
    u, lp = state.u, state.logp
    dtype = u.dtype
    accepts, proposed = [], []
    for b, idx in enumerate(blocks):
        d = len(idx)
        k_prop, k_acc = jax.random.split(jax.random.fold_in(key, b))
        cov = jnp.exp(state.log_scale[b]) * state.covs[b, :d, :d]  # s_b Sigma_b
        # Relative jitter: Sigma_b is PD in exact arithmetic but may be ill-conditioned.
        jitter = _JITTER * jnp.trace(cov) / d + jnp.finfo(dtype).tiny
        chol = jnp.linalg.cholesky(cov + jitter * jnp.eye(d, dtype=dtype))
        step = chol @ jax.random.normal(k_prop, (d,), dtype)
        prop = u.at[jnp.asarray(idx)].add(step)
        lp_prop = jnp.asarray(logp_fn(prop), dtype)
        ok = jnp.isfinite(lp_prop) & jnp.all(jnp.isfinite(prop))
        log_ratio = jnp.where(ok, lp_prop - lp, -jnp.inf)
        # log U < -inf is False even for U = 0: a rejected-by-support proposal never passes.
        acc = jnp.log(jax.random.uniform(k_acc, (), dtype)) < log_ratio
        u = jnp.where(acc, prop, u)
        lp = jnp.where(acc, lp_prop, lp)
        accepts.append(acc)
        proposed.append(lp_prop)
    acc = jnp.stack(accepts)  # [n_blocks]
    K = state.window.shape[0]
    slot = state.step % K
    new_step = state.step + 1
    state = state._replace(
        u=u, logp=lp,
        window=state.window.at[slot].set(u),
        window_acc=state.window_acc.at[slot].set(acc.astype(dtype)),
        accepted=state.accepted + acc.astype(jnp.int32),
        step=new_step)
    do = (new_step % K) == 0
    if _is_traced(do):  # under jit: select, no Python branch on a traced value
        adapted = am_adapt(state, new_step, blocks)
        state = jax.tree.map(lambda a, s: jnp.where(do, a, s), adapted, state)
    elif bool(do):  # eager: the same values, without adapting on every call
        state = am_adapt(state, new_step, blocks)
    return state, {"accept": acc, "logp_proposed": jnp.stack(proposed), "adapted": do}


def run_chain(u0, logp_fn: Callable, blocks: Sequence[Sequence[int]], key: jax.Array,
              n_iter: int, *, K: int = 10, init_cov=None,
              jit: bool = False) -> tuple[AMState, dict]:
    """Runs ``n_iter`` iterations of block adaptive Metropolis from ``u0``.

    Iteration ``i`` (0-based) uses ``jax.random.fold_in(key, i)``, so both paths give the
    same chain. ``jit=False`` is a Python loop over eager ``am_step`` calls: ``logp_fn`` may
    be any host callable (gp2Scale's pattern-rebuilding likelihood). ``jit=True`` compiles the
    whole chain as one ``lax.scan`` and needs a traceable ``logp_fn``.

    Args:
      u0: [dim] finite start with finite ``logp_fn(u0)``.
      logp_fn: ``u [dim] -> scalar`` log target (e.g. from ``log_target``).
      blocks: a partition of ``range(dim)``.
      key: typed PRNG key (``jax.random.key(seed)``).
      n_iter: iterations, >= 1.
      K: adaptation period and window length.
      init_cov: initial ``Sigma_b`` specification (see ``am_init``).
      jit: compile the chain as one ``lax.scan``.

    Returns:
      ``(final_state, trace)``; ``trace`` holds numpy arrays ``u`` [n_iter, dim], ``logp``
      [n_iter], ``accept`` [n_iter, n_blocks] bool and ``log_scale`` [n_iter, n_blocks],
      each recorded after the iteration (and its adaptation, if any).

    Raises:
      ValueError: naming ``n_iter`` (< 1), or as ``am_init``.
    """
    if int(n_iter) != n_iter or n_iter < 1:
        raise ValueError(f"n_iter must be an integer >= 1, got {n_iter!r}")
    n_iter = int(n_iter)
    state = am_init(u0, logp_fn, blocks, K=K, init_cov=init_cov)
    blocks = _canonical_blocks(blocks, state.u.shape[0])

    def record(s, info):
        return {"u": s.u, "logp": s.logp, "accept": info["accept"], "log_scale": s.log_scale}

    if jit:
        def chain(s0, k):
            def body(s, i):
                s, info = am_step(s, jax.random.fold_in(k, i), logp_fn, blocks)
                return s, record(s, info)
            return jax.lax.scan(body, s0, jnp.arange(n_iter, dtype=jnp.int32))

        state, trace = jax.jit(chain)(state, key)
        return state, {name: np.asarray(v) for name, v in trace.items()}
    rows = []
    for i in range(n_iter):
        state, info = am_step(state, jax.random.fold_in(key, i), logp_fn, blocks)
        rows.append(jax.device_get(record(state, info)))
    return state, {name: np.stack([np.asarray(r[name]) for r in rows]) for name in rows[0]}
