"""Forward noising and per-token losses of the diffusion families (spec §Method).

Token ids: ``0..K-1`` are the K vocabulary tokens, ``K`` is ``[MASK]``, ``K + 1`` is ``[BOS]``
(AR only). Model outputs x_theta are distributions over the K vocabulary tokens only (the
mask logit is -inf: SUBS parameterisation).

* MDLM (Sahoo et al., 2024): q(z_t | x) = Cat(alpha_t x + (1 - alpha_t) m). NELBO per token
  alpha'_t / (1 - alpha_t) * log x_theta(z_t)[x] on masked tokens (weight 1/t for the
  log-linear schedule); the *low-variance* objective is the same with weight 1 (training
  only: validation always reports the NELBO).
* Duo (uniform state; Sahoo et al., 2025): z_t = x with probability alpha_t, else uniform over
  the K tokens; the closed-form NELBO of :func:`duo_loss_per_token` and the posterior of
  :func:`duo_posterior` used by the sampler.
* Eso-LM (variant B): MDLM masking, then positions permuted so clean tokens come first
  (:func:`esolm_permutation`), attention causal in permuted order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

PROB_FLOOR = 1e-12  # x_theta is clipped here before the logs and 1/x of the Duo loss


def mask_noise(key: jax.Array, x, alpha, mask_id: int):
    """z_t [B, L]: each token of x [B, L] kept with probability alpha [B], else ``mask_id``."""
    keep = jax.random.uniform(key, x.shape) < alpha[:, None]
    return jnp.where(keep, x, mask_id).astype(x.dtype)


def uniform_noise(key: jax.Array, x, alpha, K: int):
    """z_t [B, L]: each token of x kept with probability alpha [B], else a uniform draw
    among the K vocabulary tokens (never the mask; a draw may equal x)."""
    k1, k2 = jax.random.split(key)
    keep = jax.random.uniform(k1, x.shape) < alpha[:, None]
    return jnp.where(keep, x, jax.random.randint(k2, x.shape, 0, K)).astype(x.dtype)


def mdlm_loss_per_token(logp_x, masked, t, low_var: bool, eps: float = 1e-3):
    """Per-token MDLM loss [B, L].

    Args:
      logp_x: [B, L] log x_theta(z_t)[x] (the model's log-probability of the clean token).
      masked: [B, L] bool, where z_t is the mask (only those tokens carry loss).
      t: [B] diffusion times.
      low_var: weight 1 (the low-variance cross-entropy) instead of the NELBO weight
        -alpha'_t / (1 - alpha_t) = 1/t (log-linear schedule); a Python bool or a traced
        boolean scalar (a vmapped pair of objectives shares one program).
      eps: schedule epsilon (alpha_t = 1 - (1 - eps) t).

    Returns:
      ``weight * (-logp_x)`` on masked tokens, 0 elsewhere.
    """
    w = jnp.where(low_var, jnp.ones_like(t), (1.0 - eps) / ((1.0 - eps) * t))
    return jnp.where(masked, -w[:, None] * logp_x, 0.0)


def duo_loss_per_token(x, z, probs, alpha, dalpha):
    """Per-token Duo NELBO [B, L] (>= 0, zero for x_theta = one-hot(x)).

    With K tokens, e = [x = z_t], x_bar_theta = K alpha x_theta + (1 - alpha),
    x_bar_z = (1 - alpha) + K alpha e and kappa = (1 - alpha) / (K alpha + 1 - alpha):

        term1 = K (1/x_bar_z - 1/x_bar_theta[z_t])
        term2 = -(e kappa + (1 - e)) (sum_j log x_bar_theta[j] - K log x_bar_theta[z_t])
                - (K alpha / (1 - alpha)) (log x_bar_theta[x] - log x_bar_theta[z_t]) (1 - e)
                + ((K - 1) kappa e - (1 - e) / kappa) log kappa
        loss  = alpha' / (K alpha) (term1 - term2).

    Args:
      x, z: [B, L] int clean and noisy tokens (in 0..K-1).
      probs: [B, L, K] x_theta (clipped at ``PROB_FLOOR``).
      alpha, dalpha: [B] alpha_t and alpha'_t.
    """
    K = probs.shape[-1]
    a = alpha[:, None]
    da = dalpha[:, None]
    e = (x == z).astype(jnp.float32)
    xb = K * a[..., None] * jnp.maximum(probs, PROB_FLOOR) + (1.0 - a[..., None])  # [B, L, K]
    log_xb = jnp.log(xb)
    xb_z = jnp.take_along_axis(xb, z[..., None], -1)[..., 0]
    log_xb_z = jnp.take_along_axis(log_xb, z[..., None], -1)[..., 0]
    log_xb_x = jnp.take_along_axis(log_xb, x[..., None], -1)[..., 0]
    xbar_z = (1.0 - a) + K * a * e
    kappa = (1.0 - a) / (K * a + 1.0 - a)
    term1 = K * (1.0 / xbar_z - 1.0 / xb_z)
    term2 = (-(e * kappa + (1.0 - e)) * (jnp.sum(log_xb, -1) - K * log_xb_z)
             - (K * a / (1.0 - a)) * (log_xb_x - log_xb_z) * (1.0 - e)
             + ((K - 1) * kappa * e - (1.0 - e) / kappa) * jnp.log(kappa))
    return da / (K * a) * (term1 - term2)


def duo_posterior(z, x, alpha_s, alpha_t):
    """q(z_s | z_t, x) [..., K] of uniform-state diffusion, s < t.

    z: [..., K] one-hot z_t; x: [..., K] one-hot x or x_theta; alpha_s, alpha_t broadcastable
    to [..., 1]. With alpha_{t|s} = alpha_t / alpha_s the unnormalised posterior is
    alpha_t K x*z + (alpha_{t|s} - alpha_t) z + (alpha_s - alpha_t) x
    + (1 - alpha_{t|s})(1 - alpha_s) / K, whose sum alpha_t K <x, z> + 1 - alpha_t is the
    normaliser for any x on the simplex (the Bayes posterior for one-hot x).
    """
    K = z.shape[-1]
    ats = alpha_t / alpha_s
    un = (alpha_t * K * x * z + (ats - alpha_t) * z + (alpha_s - alpha_t) * x
          + (1.0 - ats) * (1.0 - alpha_s) / K)
    return un / jnp.sum(un, axis=-1, keepdims=True)


def esolm_permutation(key: jax.Array, masked):
    """perm [B, L]: argsort(masked + 0.9 U), i.e. clean positions first and masked ones
    after, each group in a uniformly random order. ``take_along_axis(x, perm, 1)`` is the
    permuted sequence; the positions ``perm`` travel with the tokens (RoPE uses them)."""
    u = jax.random.uniform(key, masked.shape)
    return jnp.argsort(masked.astype(jnp.float32) + 0.9 * u, axis=-1).astype(jnp.int32)


def loss_fn(family: str, params, graphdef, batch: dict, key: jax.Array, *, train: bool,
            K: int, t=None, schedule=None, low_var=None):
    """Mean per-token loss of ``family`` on ``batch["tokens"]`` [B, L] (nats/token).

    * ``ar``: next-token NLL after ``[BOS]`` (causal model, sigma = 0).
    * ``mdlm`` / ``mdlm_lowvar``: masked diffusion; the low-variance weight is used only
      when ``train`` and family is ``mdlm_lowvar`` (validation always reports the NELBO).
    * ``duo``: uniform-state NELBO, sigma_t = -log alpha_t as the conditioning.
    * ``esolm``: MDLM masking, positions permuted clean-first (:func:`esolm_permutation`),
      causal attention in permuted order with RoPE at the original indices, every masked slot
      predicting its own clean token; low-variance weight when training, NELBO otherwise.

    Every family's loss is summed over the same L tokens and divided by B L.

    Args:
      family: one of ``model.FAMILIES``.
      params, graphdef: the model (``model.init``).
      batch: ``{"tokens": int32 [B, L]}`` in 0..K-1.
      key: noise key (times, noise, permutation).
      train: training objective (True) or validation NELBO (False).
      K: vocabulary size.
      t: optional [B] times (default: antithetic from ``key``).
      schedule: the noise schedule (default ``noise.LogLinear()``).
      low_var: training weight of ``mdlm`` / ``mdlm_lowvar`` / ``esolm`` when ``train``
        (default: low-var for ``mdlm_lowvar`` and ``esolm``); may be a traced bool, so the
        NELBO-trained and low-var-trained MDLM run as one vmapped program. Ignored when
        ``train`` is False (validation is always the NELBO).
    """
    from icml26_jax.discrete_diffusion import model as model_lib
    from icml26_jax.discrete_diffusion import noise as noise_lib

    model_lib.check_family(family)
    schedule = schedule or noise_lib.LogLinear()
    x = batch["tokens"]
    B, L = x.shape
    k_t, k_n, k_p = jax.random.split(key, 3)
    if family == "ar":
        inp = jnp.concatenate([jnp.full((B, 1), K + 1, x.dtype), x[:, :-1]], axis=1)
        logp = jax.nn.log_softmax(model_lib.logits_fn(graphdef, params, inp))
        return -jnp.mean(jnp.take_along_axis(logp, x[..., None], -1))
    if t is None:
        t = noise_lib.antithetic_times(k_t, B, schedule.eps)
    alpha, dalpha = schedule.alpha(t), schedule.dalpha(t)
    if family == "duo":
        z = uniform_noise(k_n, x, alpha, K)
        logits = model_lib.logits_fn(graphdef, params, z, cond=schedule.sigma(t))
        per = duo_loss_per_token(x, z, jax.nn.softmax(logits), alpha, dalpha)
        return jnp.sum(per) / (B * L)
    z = mask_noise(k_n, x, alpha, K)
    masked = z == K
    positions = None
    if family == "esolm":
        perm = esolm_permutation(k_p, masked)
        z, x, masked = (jnp.take_along_axis(a, perm, 1) for a in (z, x, masked))
        positions = perm
    logp = jax.nn.log_softmax(model_lib.logits_fn(graphdef, params, z, positions=positions))
    logp_x = jnp.take_along_axis(logp, x[..., None], -1)[..., 0]
    if low_var is None:
        low_var = family in ("mdlm_lowvar", "esolm")
    low_var = jnp.logical_and(train, low_var)
    per = mdlm_loss_per_token(logp_x, masked, t, low_var, schedule.eps)
    return jnp.sum(per) / (B * L)
