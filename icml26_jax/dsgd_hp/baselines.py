"""Baselines of DSGD-HP, implemented for real.

- ``centralized_sgd``: minibatch SGD with batch n (``optax.sgd``), the target of linear
  speed-up; ``dsgd.simulate`` runs it as a shadow state on the same (paired) noise.
- ``dense_reference_dsgd``: float64 NumPy ``X <- W (X - alpha G)`` (or CTA) fed an explicit
  noise tensor; the correctness oracle of the sharded kernel.
- ``single_user_sgd``: plain SGD of one user (n = 1), also in float64 NumPy.
- ``gt_dsgd``: gradient-tracking DSGD in float64 NumPy (optional, no claims).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26_jax.dsgd_hp import problems


def centralized_sgd(schedule) -> optax.GradientTransformation:
    """Minibatch SGD with the DSGD step-size schedule (what DSGD with W = J computes)."""
    return optax.sgd(learning_rate=schedule)


def noise_tensor(problem, *, T: int, runs: int, key, noise: str = "gauss",
                 sigma: float = 1.0) -> np.ndarray:
    """The randomness ``simulate`` draws, as one host tensor.

    Returns [T, R, n, d] additive noise (quadratic) or [T, R, n] sample positions (digits),
    drawn exactly like the kernel: ``problems.draw(prob, fold_in(key, t), runs, users)``.
    """
    if isinstance(key, (int, np.integer)):
        key = jax.random.key(int(key))
    prob = problems.as_device(problem)
    kind = noise if isinstance(problem, problems.Quadratic) else "sample"
    rid, uid = jnp.arange(runs), jnp.arange(problem.n)

    @jax.jit
    def draw_all(ts):
        return jax.vmap(lambda t: problems.draw(prob, jax.random.fold_in(key, t), rid, uid,
                                                kind, sigma))(ts)

    return np.asarray(draw_all(jnp.arange(T)))


def dense_reference_dsgd(problem, W, schedule, Z, *, order: str = "atc",
                         log_every: int = 1) -> dict:
    """Float64 NumPy DSGD on the explicit randomness ``Z`` (``noise_tensor`` output).

    Args:
      problem: a ``Quadratic`` or ``Digits`` problem with n users.
      W: [n, n] mixing matrix (``np.full((n, n), 1/n)`` gives centralized SGD).
      schedule: callable t -> alpha_t.
      Z: [T, R, n, d] noise or [T, R, n] sample positions.
      order: ``atc`` or ``cta``.
      log_every: record metrics every this many steps.

    Returns:
      dict with ``x`` [R, n, d] final iterates, ``xc`` [R, d] centralized SGD, and
      [K, R] arrays ``gap_mean``, ``gap_worst``, ``consensus``, ``gap_central``.
    """
    W = np.asarray(W, dtype=np.float64)
    T, R, n = Z.shape[:3]
    uid = np.arange(n)
    X = np.zeros((R, n, problem.dim))
    xc = np.zeros((R, problem.dim))
    rec = {k: [] for k in ("gap_mean", "gap_worst", "consensus", "gap_central")}
    for t in range(T):
        G = problems.stoch_grad(problem, X, uid, Z[t], xp=np)
        a = schedule(t)
        X = np.einsum("ij,rjd->rid", W, X - a * G) if order == "atc" else (
            np.einsum("ij,rjd->rid", W, X) - a * G)
        xc = xc - a * problems.stoch_grad(problem, xc[:, None], uid, Z[t], xp=np).mean(1)
        if (t + 1) % log_every == 0:
            g = problems.gap(problem, X, xp=np)
            rec["gap_mean"].append(g.mean(-1))
            rec["gap_worst"].append(g.max(-1))
            rec["consensus"].append(((X - X.mean(1, keepdims=True)) ** 2).sum(-1).mean(-1))
            rec["gap_central"].append(problems.gap(problem, xc, xp=np))
    return {"x": X, "xc": xc, **{k: np.asarray(v) for k, v in rec.items()}}


def single_user_sgd(problem, schedule, Z) -> np.ndarray:
    """SGD of user 0 alone on its own noise ``Z[:, :, 0]``; returns the gap [T, R] per step."""
    T, R = Z.shape[:2]
    x = np.zeros((R, 1, problem.dim))
    gaps = np.empty((T, R))
    for t in range(T):
        x = x - schedule(t) * problems.stoch_grad(problem, x, np.arange(1), Z[t, :, :1], xp=np)
        gaps[t] = problems.gap(problem, x[:, 0], xp=np)
    return gaps


def gt_dsgd(problem, W, schedule, Z) -> dict:
    """Gradient-tracking DSGD (float64 NumPy; the authors' follow-up, no claims).

    ``X <- W X - alpha Y``, ``Y <- W Y + G(X_new) - G(X_old)``, ``Y_0 = G(X_0)``, where the
    stochastic gradients of step t at both points use the same randomness ``Z[t]``.

    Returns:
      dict with ``x`` [R, n, d] and ``gap_mean`` [T, R].
    """
    W = np.asarray(W, dtype=np.float64)
    T, R, n = Z.shape[:3]
    uid = np.arange(n)
    X = np.zeros((R, n, problem.dim))
    G_old = problems.stoch_grad(problem, X, uid, Z[0], xp=np)
    Y = G_old
    gaps = np.empty((T, R))
    for t in range(T):
        X = np.einsum("ij,rjd->rid", W, X) - schedule(t) * Y
        G_new = problems.stoch_grad(problem, X, uid, Z[min(t + 1, T - 1)], xp=np)
        Y = np.einsum("ij,rjd->rid", W, Y) + G_new - G_old
        G_old = G_new
        gaps[t] = problems.gap(problem, X, xp=np).mean(-1)
    return {"x": X, "gap_mean": gaps}
