"""Samplers of every family (spec §Method): each returns int32 [B, L] tokens in 0..K-1.

Diffusion samplers run on the grid t_k = linspace(1, 1e-5, T + 1) and finish with a
noise-removal step from t = 1e-5 to 0 (alpha = 1), so NFE = T + 1:

* MDLM: a masked token at t moves to a vocabulary token v with probability
  (alpha_s - alpha_t) x_theta[v] / (1 - alpha_t) and stays masked with
  (1 - alpha_s) / (1 - alpha_t); unmasked tokens are copied. The last step (alpha_s = 1)
  samples every remaining mask from x_theta (the official code takes the argmax there; at
  t = 1e-5 it concerns ~1e-5 of the tokens, and sampling keeps the sampler exact).
* Duo: z_1 uniform over the K tokens, then z_s ~ q(z_s | z_t, x_theta) (:func:`duo_posterior`).
* Eso-LM: positions in a random order, split into T chunks; each call feeds the previous
  chunk's sampled tokens into the KV cache and queries the current chunk's mask slots
  (causal in that order, RoPE at the true positions): NFE = T.
* AR: L single-token calls with a KV cache after ``[BOS]`` (or full recomputation,
  ``use_cache=False``, identical token for token under the same key).

The ``*_with`` functions take the denoiser as a function, so a known distribution can stand
in for the network (tests); the model samplers build it from ``(graphdef, params)``. Loops
are ``lax.fori_loop`` with static ``num_steps``; the caller jits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from icml26_jax.discrete_diffusion import losses
from icml26_jax.discrete_diffusion import noise as noise_lib

T_MIN = 1e-5


def _grid(num_steps: int):
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got num_steps={num_steps}")
    ts = jnp.linspace(1.0, T_MIN, num_steps + 1)
    return jnp.concatenate([ts, jnp.zeros((1,))])  # final noise removal to t = 0


def _categorical(key, probs):
    return jax.random.categorical(key, jnp.log(jnp.maximum(probs, 1e-30))).astype(jnp.int32)


def mdlm_sample_with(probs_fn, key, batch: int, length: int, num_steps: int, K: int,
                     schedule=None):
    """MDLM ancestral sampling; ``probs_fn(z [B, L], sigma [B]) -> x_theta [B, L, K]``."""
    sch = schedule or noise_lib.LogLinear()
    ts = _grid(num_steps)
    z0 = jnp.full((batch, length), K, jnp.int32)

    def body(k, z):
        t, s = ts[k], ts[k + 1]
        a_t, a_s = sch.alpha(t), jnp.where(s > 0, sch.alpha(s), 1.0)
        probs = probs_fn(z, jnp.zeros((batch,)))
        kk = jax.random.fold_in(key, k)
        k_u, k_v = jax.random.split(kk)
        unmask = jax.random.uniform(k_u, z.shape) < (a_s - a_t) / (1.0 - a_t)
        new = _categorical(k_v, probs)
        return jnp.where((z == K) & unmask, new, z)

    return jax.lax.fori_loop(0, num_steps + 1, body, z0)


def duo_sample_with(probs_fn, key, batch: int, length: int, num_steps: int, K: int,
                    schedule=None):
    """Duo ancestral sampling with the posterior of :func:`losses.duo_posterior`;
    ``probs_fn(z [B, L], sigma [B]) -> x_theta [B, L, K]``."""
    sch = schedule or noise_lib.LogLinear()
    ts = _grid(num_steps)
    k0, key = jax.random.split(key)
    z0 = jax.random.randint(k0, (batch, length), 0, K)

    def body(k, z):
        t, s = ts[k], ts[k + 1]
        a_t, a_s = sch.alpha(t), jnp.where(s > 0, sch.alpha(s), 1.0)
        probs = probs_fn(z, jnp.full((batch,), sch.sigma(t)))
        post = losses.duo_posterior(jax.nn.one_hot(z, K), probs, a_s, a_t)
        return _categorical(jax.random.fold_in(key, k), post)

    return jax.lax.fori_loop(0, num_steps + 1, body, z0)


def esolm_sample_with(step_fn, cache, key, batch: int, length: int, num_steps: int, K: int):
    """Eso-LM chunked sampling with a KV cache (NFE = T).

    ``step_fn(cache, tokens [B, n], positions [B, n], keep) -> (x_theta [B, n, K], cache)``
    feeds n tokens, returns predictions at each and keeps the first ``keep`` in the cache.
    ``length`` must be a multiple of ``num_steps``.
    """
    if num_steps < 1 or length % num_steps:
        raise ValueError(f"length={length} must be a multiple of num_steps={num_steps}")
    n = length // num_steps
    k0, key = jax.random.split(key)
    order = jnp.argsort(jax.random.uniform(k0, (batch, length)), -1)
    order = order.astype(jnp.int32)  # [B, L] random generation order (positions)
    masks = jnp.full((batch, n), K, jnp.int32)
    # Step 0 queries the first chunk's mask slots; step k >= 1 feeds chunk k-1's tokens
    # (kept) followed by chunk k's mask slots (queries, not kept).
    pos0 = order[:, :n]
    probs, cache = step_fn(cache, masks, pos0, 0)
    x = jnp.zeros((batch, length), jnp.int32)
    tok = _categorical(jax.random.fold_in(key, 0), probs)
    x = _scatter(x, pos0, tok)

    def body(k, carry):
        cache, x, tok = carry
        prev = jax.lax.dynamic_slice_in_dim(order, (k - 1) * n, n, axis=1)
        cur = jax.lax.dynamic_slice_in_dim(order, k * n, n, axis=1)
        probs, cache = step_fn(cache, jnp.concatenate([tok, masks], 1),
                               jnp.concatenate([prev, cur], 1), n)
        tok = _categorical(jax.random.fold_in(key, k), probs[:, n:])
        return cache, _scatter(x, cur, tok), tok

    _, x, _ = jax.lax.fori_loop(1, num_steps, body, (cache, x, tok))
    return x


def _scatter(x, positions, values):
    return jax.vmap(lambda xr, p, v: xr.at[p].set(v))(x, positions, values)


def ar_sample_with(step_fn, cache, full_fn, key, batch: int, length: int, K: int, *,
                   use_cache: bool = True):
    """AR sampling after ``[BOS]`` (id K + 1): L calls of ``step_fn`` (as in
    :func:`esolm_sample_with`) with a KV cache, or of ``full_fn(tokens [B, L]) -> x_theta
    [B, L, K]`` on the whole prefix (``use_cache=False``): the same tokens."""
    bos = jnp.full((batch,), K + 1, jnp.int32)
    x = jnp.zeros((batch, length), jnp.int32)
    if use_cache:
        def body(i, carry):
            cache, x, prev = carry
            probs, cache = step_fn(cache, prev[:, None], jnp.full((batch, 1), i, jnp.int32), 1)
            tok = _categorical(jax.random.fold_in(key, i), probs[:, 0])
            return cache, x.at[:, i].set(tok), tok

        _, x, _ = jax.lax.fori_loop(0, length, body, (cache, x, bos))
        return x

    def body_full(i, x):
        inp = jnp.concatenate([bos[:, None], x[:, :-1]], 1)
        probs = full_fn(inp)[:, i]
        return x.at[:, i].set(_categorical(jax.random.fold_in(key, i), probs))

    return jax.lax.fori_loop(0, length, body_full, x)


# --------------------------------------------------------------------------- model samplers


def _model(graphdef, params):
    return nnx.merge(graphdef, params)


def _probs_fn(graphdef, params):
    model = _model(graphdef, params)
    K = model.cfg.vocab_size - 2
    return lambda z, sigma: jax.nn.softmax(model(z, cond=sigma)[..., :K])


def _step_fn(graphdef, params):
    model = _model(graphdef, params)
    K = model.cfg.vocab_size - 2

    def step(cache, tokens, positions, keep):
        B = tokens.shape[0]
        logits, cache = model.decode_step(cache, tokens, positions, jnp.zeros((B,)), keep=keep)
        return jax.nn.softmax(logits[..., :K]), cache

    return step, model


def mdlm_sample(graphdef, params, key, batch: int, length: int, num_steps: int):
    """MDLM samples [B, L] from a model built by ``model.init`` (NFE = T + 1)."""
    K = _model(graphdef, params).cfg.vocab_size - 2
    return mdlm_sample_with(_probs_fn(graphdef, params), key, batch, length, num_steps, K)


def duo_sample(graphdef, params, key, batch: int, length: int, num_steps: int):
    """Duo samples [B, L] (sigma_t conditioning; NFE = T + 1)."""
    K = _model(graphdef, params).cfg.vocab_size - 2
    return duo_sample_with(_probs_fn(graphdef, params), key, batch, length, num_steps, K)


def esolm_sample(graphdef, params, key, batch: int, length: int, num_steps: int):
    """Eso-LM samples [B, L] with a KV cache (NFE = T)."""
    step, model = _step_fn(graphdef, params)
    K = model.cfg.vocab_size - 2
    return esolm_sample_with(step, model.init_cache(batch, length + length // num_steps), key,
                             batch, length, num_steps, K)


def ar_sample(graphdef, params, key, batch: int, length: int, num_steps: int | None = None, *,
              use_cache: bool = True):
    """AR samples [B, L] (L KV-cached calls; ``num_steps`` is ignored: NFE = L)."""
    del num_steps
    step, model = _step_fn(graphdef, params)
    K = model.cfg.vocab_size - 2
    full = lambda tok: jax.nn.softmax(model(tok, cond=jnp.zeros((tok.shape[0],)))[..., :K])  # noqa: E731
    return ar_sample_with(step, model.init_cache(batch, length), full, key, batch, length, K,
                          use_cache=use_cache)
