"""Rank-Learner: orthogonal pairwise ranking of treatment effects (Arno et al., ICML 2026).

Stage 2 of the two-stage learner, as pure functions (spec §Method):

    tau_hat_i = mu1_hat(X_i) - mu0_hat(X_i)
    phi_hat_i = tau_hat_i + T_i (Y_i - mu1_hat) / pi_hat - (1 - T_i)(Y_i - mu0_hat) / (1 - pi_hat)
    p_ij      = sigmoid((tau_hat_i - tau_hat_j) / kappa)                       (plug-in label)
    o_ij      = clip(p_ij + p_ij (1 - p_ij) / kappa * [(phi_i - tau_i) - (phi_j - tau_j)], 0, 1)
    L(theta)  = mean_ij softplus(z_ij) - o_ij z_ij,   z_ij = g(x_i) - g(x_j)   (RankNet BCE)

The loss is affine in its label, so the risk depends on the nuisances only through the label;
o_ij is the one-step (influence-function) correction of p_ij, which makes the risk
Neyman-orthogonal in (mu0, mu1, pi): nuisance errors enter at second order only. The plug-in
ranker (Vanderschueren et al., 2024) is the same pipeline with p_ij as the label.

References:
  H. Arno, D. Frauen, E. Javurek, T. Demeester, S. Feuerriegel. Rank-Learner: Orthogonal
  Ranking of Treatment Effects. ICML 2026. https://arxiv.org/abs/2602.03517
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.rank_learner import fitting, metrics, model


def _check_clip(clip):
    if not 0.0 < float(clip) < 0.5:
        raise ValueError(f"propensity clip must be in (0, 0.5), got clip={clip}")


def _check_kappa(kappa):
    if not float(kappa) > 0:
        raise ValueError(f"kappa must be > 0, got kappa={kappa}")


def aipw(y, t, mu0, mu1, pi, clip: float = 1e-3) -> jax.Array:
    """The AIPW (doubly robust) pseudo-outcome phi_hat [n], pi clipped to [clip, 1 - clip].

    E[phi | X] = tau(X) when either the outcome models or the propensity are correct.
    """
    _check_clip(clip)
    pi = jnp.clip(pi, clip, 1.0 - clip)
    return (mu1 - mu0) + t * (y - mu1) / pi - (1.0 - t) * (y - mu0) / (1.0 - pi)


def soft_labels(tau_i, tau_j, kappa: float) -> jax.Array:
    """Plug-in pair labels p_ij = sigmoid((tau_i - tau_j) / kappa) [m]."""
    _check_kappa(kappa)
    return jax.nn.sigmoid((tau_i - tau_j) / kappa)


def orth_labels(tau_i, tau_j, phi_i, phi_j, kappa: float, clip: bool = True):
    """Orthogonal pair labels (the one-step correction of the plug-in label).

    o_ij = p_ij + (1/kappa) p_ij (1 - p_ij) [(phi_i - tau_i) - (phi_j - tau_j)], clipped to
    [0, 1] when ``clip`` (clipping breaks exact orthogonality where it binds, so the clipped
    fraction is returned).

    Returns:
      ``(labels [m], frac_clipped [])``.
    """
    p = soft_labels(tau_i, tau_j, kappa)
    o = p + p * (1.0 - p) / kappa * ((phi_i - tau_i) - (phi_j - tau_j))
    out = (o < 0) | (o > 1)
    frac = jnp.mean(out.astype(o.dtype))
    return (jnp.clip(o, 0.0, 1.0) if clip else o), frac


def sample_pairs(key: jax.Array, n: int, m: int):
    """``m`` ordered pairs (i, j), i != j, uniform over the n(n - 1) ordered pairs: draw i,
    draw j' in [0, n - 1) and set j = j' + 1[j' >= i]. Returns ``(i [m], j [m])`` int32."""
    if int(n) < 2:
        raise ValueError(f"pairs need n >= 2 units, got n={n}")
    ki, kj = jax.random.split(key)
    i = jax.random.randint(ki, (m,), 0, n, dtype=jnp.int32)
    j = jax.random.randint(kj, (m,), 0, n - 1, dtype=jnp.int32)
    return i, j + (j >= i).astype(jnp.int32)


def pairwise_bce(g_i, g_j, labels) -> jax.Array:
    """mean softplus(z) - label * z with z = g_i - g_j: the RankNet / BCE-with-logits loss,
    affine in the label (so it also accepts labels outside [0, 1])."""
    z = g_i - g_j
    return jnp.mean(jax.nn.softplus(z) - labels * z)


class RankerConfig(NamedTuple):
    """Static stage-2 hyper-parameters (official code: kappa 0.75, 10 % of the ordered pairs
    per epoch, labels clipped, early stopping on the approximate AUTOC with min_delta 1e-4)."""

    kappa: float = 0.75
    pair_frac: float = 0.1
    clip_labels: bool = True
    fit: fitting.FitConfig = fitting.FitConfig()

    def validate(self) -> "RankerConfig":
        """Raises ``ValueError`` naming the offending field."""
        _check_kappa(self.kappa)
        if not 0.0 < self.pair_frac <= 1.0:
            raise ValueError(f"pair_frac must be in (0, 1], got pair_frac={self.pair_frac}")
        self.fit.validate()
        return self


def steps_per_epoch(n: int, cfg: RankerConfig) -> int:
    """Batches per epoch: ``pair_frac`` of the ``ceil(n(n-1)/batch)`` batches of all ordered
    pairs (at least one), as the official loop."""
    total = -(-n * (n - 1) // cfg.fit.batch)
    return max(1, int(cfg.pair_frac * total))


def ranker_epoch(params, opt_state, key: jax.Array, graphdef, x, tau_hat, phi_hat, orthogonal,
                 cfg: RankerConfig):
    """One training epoch of a pairwise ranker: ``steps_per_epoch`` Adam steps on batches of
    uniform ordered pairs, both members' features gathered at once and scored as one
    stacked [2B, d] batch; the label is orthogonal (``orthogonal`` true) or plug-in.

    Returns:
      ``(params, opt_state, frac_clipped)``: the mean fraction of clipped orthogonal labels.
    """
    n = x.shape[0]
    B, steps = cfg.fit.batch, steps_per_epoch(n, cfg)
    tx = fitting.optimizer(cfg.fit)

    def loss_fn(p, i, j):
        g = model.apply(graphdef, p, x[jnp.concatenate([i, j])])  # [2B]
        soft = soft_labels(tau_hat[i], tau_hat[j], cfg.kappa)
        orth, frac = orth_labels(tau_hat[i], tau_hat[j], phi_hat[i], phi_hat[j], cfg.kappa,
                                 cfg.clip_labels)
        labels = jnp.where(orthogonal, orth, soft)
        return pairwise_bce(g[:B], g[B:], labels), frac

    def step(carry, s):
        p, o, tot = carry
        i, j = sample_pairs(jax.random.fold_in(key, s), n, B)
        (_, frac), g = jax.value_and_grad(loss_fn, has_aux=True)(p, i, j)
        upd, o = tx.update(g, o, p)
        return (jax.tree.map(jnp.add, p, upd), o, tot + frac), None

    (p, o, tot), _ = jax.lax.scan(step, (params, opt_state, jnp.zeros((), x.dtype)),
                                  jnp.arange(steps))
    return p, o, tot / steps


def train_ranker(key: jax.Array, params, graphdef, x, tau_hat, phi_hat, x_val, phi_val,
                 orthogonal, cfg: RankerConfig):
    """Trains one pairwise ranker g_theta (vmappable over seeds and methods).

    Epochs of :func:`ranker_epoch`; early stopping keeps the params with the best
    approximate AUTOC on the validation rows (DR scores only, min_delta 1e-4, patience
    ``cfg.fit.patience``).

    Args:
      key: PRNG key (pairs).
      params: initial MLP params; graphdef: its graphdef.
      x: stage-2 training covariates [n, d]; tau_hat, phi_hat: [n] (from stage-1 models
        fitted on other rows).
      x_val, phi_val: validation covariates [v, d] and DR scores [v].
      orthogonal: bool scalar (a traced value, so both rankers share one program).
      cfg: :class:`RankerConfig`.

    Returns:
      ``(best_params, fitting.History)``: History.val is the validation approximate AUTOC per
      epoch and History.stat the fraction of clipped orthogonal labels per epoch.
    """
    def epoch(p, o, k):
        return ranker_epoch(p, o, k, graphdef, x, tau_hat, phi_hat, orthogonal, cfg)

    def val(p):
        return metrics.approx_autoc_dr(model.apply(graphdef, p, x_val), phi_val)

    return fitting.fit(params, key, epoch, val, cfg.fit, min_delta=1e-4)


def _train_one(static, seed, params, x, tau_hat, phi_hat, x_val, phi_val, orthogonal):
    graphdef, cfg = static
    key = jax.random.fold_in(jax.random.key(seed), 2)
    return train_ranker(key, params, graphdef, x, tau_hat, phi_hat, x_val, phi_val,
                        orthogonal, cfg)


def train_rankers(seeds, x, tau_hat, phi_hat, x_val, phi_val, orthogonal, cfg: RankerConfig,
                  hidden: int = 64, mesh=None):
    """Trains ``R`` rankers at once, replicas on the leading axis sharded over the devices
    of ``mesh`` (default ``core.mesh.runs_mesh(R)``; padded to a multiple of its size);
    replica ``r`` is initialised and draws its pairs from ``seeds[r]``.

    Args:
      seeds: [R] ints; x: [R, n, d]; tau_hat, phi_hat: [R, n]; x_val: [R, v, d];
      phi_val: [R, v]; orthogonal: [R] bools.

    Returns:
      ``(graphdef, params [R', ...], fitting.History [R, ...])``: device params padded to
      ``R' = core.mesh.padded_size(R, mesh)`` (for ``nuisance.predict_stack``), host history
      (as ``nuisance.fit_stack``).
    """
    cfg.validate()
    x = np.asarray(x, np.float32)
    if x.shape[1] < 2:
        raise ValueError(f"a ranker needs n >= 2 training units, got n={x.shape[1]}")
    seeds = np.asarray(seeds, np.int32)
    graphdef, params = model.init_stack(seeds, x.shape[-1], hidden)
    mesh = mesh or mesh_lib.runs_mesh(len(seeds))
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    params, hist = mesh_lib.map_runs(mesh, _train_one, (graphdef, cfg), seeds, params, x,
                                     f32(tau_hat), f32(phi_hat), f32(x_val), f32(phi_val),
                                     np.asarray(orthogonal, bool))
    return graphdef, params, mesh_lib.to_host(hist, len(seeds))
