"""TRACE's networks: the factorised VAE and the mixture of K explicit experts (spec §Method
"Model"), plus the pure ELBO ``loss_fn``.

Data flow for one stratified batch ``x [K, m, 3, d]`` (domain k on slice k)::

    x --Encoder--> (mu, logvar) [K, m, 3, d] --reparameterise--> z --Decoder--> x_hat
    z[..., :2, :] -> N(0, I) prior                                   (KL_normal)
    (z_{t-2}, z_{t-1}, z_t) --ExpertPrior.routed (expert k on slice k)--> (eps_hat, logdet)
    log p_k(z_t | z_{t-1}, z_{t-2}) = sum_i log N(eps_hat_{k,i}; 0, 1) + log|dr_{k,i}/dz_{t,i}|

Each expert ``k`` holds ``d`` per-dimension networks ``r_{k,i}([z_{t-2}, z_{t-1}, z_{t,i}])``
(input ``2d + 1``, three hidden LReLU(0.2) layers, scalar output). Their weights are single
tensors whose leading axes are ``[K, d]``; one einsum applies every (expert, dimension) pair,
so there is no Python loop over experts or dimensions in jitted code. The Jacobian
``d eps_hat / d z_t`` is diagonal (``r_{k,i}`` sees ``z_t`` only through ``z_{t,i}``), so one
``jax.jvp`` with an all-ones tangent on ``z_t`` returns its diagonal exactly.

[R] The release shares one transition network across domains through a learned 2-d domain
embedding; here the K experts are explicit (spec §Sources). No BatchNorm anywhere: the
batched jvp assumes independent samples.

All modules are plain NNX modules without shared submodules (tree mode); split at the jit
boundary with ``graphdef, params = nnx.split(model, nnx.Param)``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

SLOPE = 0.2  # LeakyReLU slope of every network (release)
_LOG_2PI = math.log(2.0 * math.pi)
# PyTorch's kaiming_normal_ (fan_in, gain sqrt 2), the release's VAE init
_KAIMING = nnx.initializers.variance_scaling(2.0, "fan_in", "normal")
# PyTorch's default nn.Linear weight init U(+-1/sqrt(fan_in)), the release's transition nets
_TORCH_DEFAULT = nnx.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def lrelu(x: jax.Array) -> jax.Array:
    return jax.nn.leaky_relu(x, SLOPE)


def _check_int(name: str, v, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return v


class Encoder(nnx.Module):
    """``q(y_tau | x_tau)``, factorised over time: ``d -> hidden x 4 -> 2d`` (mean, log-variance),
    LReLU 0.2 (release ``BetaVAE_MLP.encoder``)."""

    def __init__(self, d: int, hidden: int, *, rngs: nnx.Rngs):
        widths = (d, hidden, hidden, hidden, hidden, 2 * d)
        self.layers = nnx.List([nnx.Linear(a, b, kernel_init=_KAIMING, rngs=rngs)
                                for a, b in zip(widths[:-1], widths[1:])])
        self.d = d

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = x
        for layer in self.layers[:-1]:
            h = lrelu(layer(h))
        out = self.layers[-1](h)
        return out[..., :self.d], out[..., self.d:]


class Decoder(nnx.Module):
    """``x_hat = g_hat(z)``: LReLU, ``d -> hidden -> hidden -> d`` (release ``BetaVAE_MLP.decoder``,
    whose first op is a LeakyReLU on ``z``)."""

    def __init__(self, d: int, hidden: int, *, rngs: nnx.Rngs):
        widths = (d, hidden, hidden, d)
        self.layers = nnx.List([nnx.Linear(a, b, kernel_init=_KAIMING, rngs=rngs)
                                for a, b in zip(widths[:-1], widths[1:])])

    def __call__(self, z: jax.Array) -> jax.Array:
        h = z
        for layer in self.layers:
            h = layer(lrelu(h))
        return h


class ExpertPrior(nnx.Module):
    """K explicit experts, each ``d`` per-dimension flows ``r_{k,i}`` (spec §Method, paper eq. for
    the transition prior ``log p_k(z_t | z_{t-1}, z_{t-2})``).

    Parameters are ``w{j} [K, d, in, out]`` and ``b{j} [K, d, out]`` for the four layers
    ``2d + 1 -> hidden -> hidden -> hidden -> 1``; no tensor is shared between experts.

    Args:
      k: number of experts (atomic mechanisms, ``K_total``).
      d: latent dimension.
      lags: ``L`` (the history is ``[z_{t-L}, ..., z_{t-1}]`` flattened, ``L * d`` wide).
      hidden: width of the hidden layers.
      rngs: NNX rngs.
    """

    def __init__(self, k: int, d: int, lags: int, hidden: int, *, rngs: nnx.Rngs):
        for name, v in (("k", k), ("d", d), ("lags", lags), ("hidden", hidden)):
            _check_int(f"ExpertPrior {name}", v)
        self.k, self.d, self.lags = k, d, lags
        widths = (lags * d + 1, hidden, hidden, hidden, 1)
        self.weights = nnx.List([
            nnx.Param(_TORCH_DEFAULT(rngs.params(), (k, d, a, b), jnp.float32))
            for a, b in zip(widths[:-1], widths[1:])])
        self.biases = nnx.List([nnx.Param(jnp.zeros((k, d, b), jnp.float32))
                                for b in widths[1:]])

    def _inputs(self, z_hist: jax.Array, z_t: jax.Array) -> jax.Array:
        """``[..., L d], [..., d] -> [..., d, L d + 1]``: dimension i sees the whole history and
        only its own ``z_{t,i}``."""
        hist = jnp.broadcast_to(z_hist[..., None, :], z_t.shape + (z_hist.shape[-1],))
        return jnp.concatenate([hist, z_t[..., None]], axis=-1)

    def _mlp(self, inp: jax.Array, first: str) -> jax.Array:
        """Applies every (expert, dimension) network; ``first`` is the einsum of layer 0
        (routed ``[K, m, d, in]`` or shared ``[m, d, in]`` inputs), later layers are
        ``[K, m, d, h]``."""
        h = inp
        n = len(self.weights)
        for j, (w, b) in enumerate(zip(self.weights, self.biases)):
            spec = first if j == 0 else "kmdh,kdhg->kmdg"
            h = jnp.einsum(spec, h, w[...]) + b[...][:, None]
            if j < n - 1:
                h = lrelu(h)
        return h[..., 0]

    def _flow(self, z_hist, z_t, first):
        """``(eps_hat, logdet)`` [K, m, d]; the log-det by one jvp (the Jacobian is diagonal)."""
        f = lambda zt: self._mlp(self._inputs(z_hist, zt), first)
        eps, deps = jax.jvp(f, (z_t,), (jnp.ones_like(z_t),))
        return eps, _log_abs(deps)

    def _flow_jacfwd(self, z_hist, z_t):
        """The same as ``_flow`` for routed inputs, but through the full per-sample Jacobian
        ``d eps / d z_t [d, d]`` of ``jax.jacfwd``, its diagonal taken after (the benchmark's
        reference, spec §Benchmark (a))."""
        ws = [w[...] for w in self.weights]
        bs = [b[...] for b in self.biases]
        n = len(ws)

        def one(wk, bk, zh, zt):  # one expert, one sample: [L d], [d] -> [d]
            h = self._inputs(zh, zt)  # [d, in]
            for j in range(n):
                h = jnp.einsum("di,dih->dh", h, wk[j]) + bk[j]
                if j < n - 1:
                    h = lrelu(h)
            return h[:, 0]

        def per_sample(wk, bk, zh, zt):
            return one(wk, bk, zh, zt), jnp.diagonal(jax.jacfwd(one, argnums=3)(wk, bk, zh, zt))

        over_m = jax.vmap(per_sample, in_axes=(None, None, 0, 0))
        eps, diag = jax.vmap(over_m)(ws, bs, z_hist, z_t)
        return eps, _log_abs(diag)

    def routed(self, z_hist: jax.Array, z_t: jax.Array,
               jacobian: str = "jvp") -> tuple[jax.Array, jax.Array]:
        """Expert k on slice k: ``z_hist [K, m, L d], z_t [K, m, d] -> (eps, logdet) [K, m, d]``.

        ``jacobian="jvp"`` (default) takes the log-det from one jvp; ``"jacfwd"`` from the full
        per-sample Jacobian (same numbers, slower: the benchmark's reference)."""
        if z_hist.shape[0] != self.k or z_t.shape[0] != self.k:
            raise ValueError(f"routed needs a leading expert axis of {self.k}, got "
                             f"{z_hist.shape} and {z_t.shape}")
        if jacobian == "jacfwd":
            return self._flow_jacfwd(z_hist, z_t)
        if jacobian != "jvp":
            raise ValueError(f"jacobian must be 'jvp' or 'jacfwd', got {jacobian!r}")
        return self._flow(z_hist, z_t, "kmdi,kdih->kmdh")

    def all_experts(self, z_hist: jax.Array, z_t: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Every expert on every sample: ``[B, L d], [B, d] -> (eps, logdet) [K, B, d]``."""
        # z_t is shared by the experts, and r_{k,i} sees only z_{t,i}: the jvp with a ones
        # tangent on the shared z_t is still exactly the diagonal of every expert
        f = lambda x: self._mlp(self._inputs(z_hist, x), "mdi,kdih->kmdh")
        eps, deps = jax.jvp(f, (z_t,), (jnp.ones_like(z_t),))
        return eps, _log_abs(deps)

    def log_prob_all(self, z_hist: jax.Array, z_t: jax.Array) -> jax.Array:
        """``log p_k(z_t | history)`` of every expert: ``[B, L d], [B, d] -> [K, B]``."""
        eps, logdet = self.all_experts(z_hist, z_t)
        return log_prob_from(eps, logdet)


def _log_abs(x: jax.Array) -> jax.Array:
    return jnp.log(jnp.maximum(jnp.abs(x), 1e-30))


def log_prob_from(eps: jax.Array, logdet: jax.Array) -> jax.Array:
    """``sum_i log N(eps_i; 0, 1) + logdet_i`` over the last axis (change of variables)."""
    return jnp.sum(-0.5 * (eps * eps + _LOG_2PI) + logdet, axis=-1)


class TraceVAE(nnx.Module):
    """Encoder, decoder and the K-expert transition prior of TRACE.

    Args:
      k: number of experts (``K_total`` pure domains in training).
      d: latent (and observation) dimension.
      lags: ``L`` (each training sequence has ``L + 1`` steps).
      hidden: VAE width (128).
      expert_hidden: expert width (paper 128, ours 64 [R]).
      rngs: NNX rngs.
    """

    def __init__(self, k: int, d: int, lags: int, hidden: int, expert_hidden: int, *,
                 rngs: nnx.Rngs):
        for name, v in (("hidden", hidden), ("expert_hidden", expert_hidden)):
            _check_int(f"TraceVAE {name}", v)
        self.encoder = Encoder(d, hidden, rngs=rngs)
        self.decoder = Decoder(d, hidden, rngs=rngs)
        self.prior = ExpertPrior(k, d, lags, expert_hidden, rngs=rngs)


def _normal_logpdf(z, mu, logvar):
    return -0.5 * ((z - mu) ** 2 * jnp.exp(-logvar) + logvar + _LOG_2PI)


def loss_fn(params, graphdef, x: jax.Array, key: jax.Array, beta: float, gamma: float,
            routing: str = "routed", jacobian: str = "jvp"):
    """Negative ELBO of one stratified batch (spec §Method "Loss"), pure.

    ``loss = recon + beta * KL_normal + gamma * KL_trans`` with one reparameterised sample:
    ``recon = sum_{tau, dims} (x - x_hat)^2`` (batch mean); ``KL_normal = E_q[log q(z_{1:L}|x) -
    log N(z_{1:L}; 0, I)]``; ``KL_trans = E_q[log q(z_{L+1}|x) - log p_c(z_{L+1} | z_{1:L})]``
    with ``c`` the slice's domain (routing by label, training only).

    Args:
      params: ``nnx.Param`` state of a :class:`TraceVAE`.
      graphdef: its graph definition.
      x: ``[K, m, L + 1, d]`` observations, domain k on slice k.
      key: the reparameterisation key.
      beta, gamma: the KL weights (2e-3, 2e-2).
      routing: ``"routed"`` applies expert k to slice k only; ``"masked"`` applies every expert
        to every sample and keeps the labelled one by a one-hot mask (K x the work; the
        benchmark's reference, spec §Benchmark (b)). Static.
      jacobian: ``"jvp"`` or ``"jacfwd"``, as in :meth:`ExpertPrior.routed`. Static.

    Returns:
      ``(loss, aux)``, aux a dict of the scalar terms.
    """
    model = nnx.merge(graphdef, params)
    kk, m, steps, d = x.shape
    lags = model.prior.lags
    if steps != lags + 1:
        raise ValueError(f"x must hold L + 1 = {lags + 1} steps per sequence, got {x.shape}")
    mu, logvar = model.encoder(x)
    z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(key, mu.shape, mu.dtype)
    x_hat = model.decoder(z)
    recon = jnp.mean(jnp.sum((x - x_hat) ** 2, axis=(-2, -1)))
    log_q = _normal_logpdf(z, mu, logvar)  # [K, m, L+1, d]
    past = jnp.sum(log_q[..., :lags, :] - _normal_logpdf(z[..., :lags, :], 0.0, 0.0),
                   axis=(-2, -1))
    kl_normal = jnp.mean(past)
    z_hist = z[..., :lags, :].reshape(kk, m, lags * d)
    if routing == "routed":
        log_p = log_prob_from(*model.prior.routed(z_hist, z[..., lags, :], jacobian))  # [K, m]
    elif routing == "masked":
        lp = model.prior.log_prob_all(z_hist.reshape(kk * m, lags * d),
                                      z[..., lags, :].reshape(kk * m, d))  # [K, K m]
        mask = jnp.repeat(jnp.eye(kk, dtype=lp.dtype), m, axis=1)  # expert k <-> its slice
        log_p = jnp.sum(mask * lp, axis=0).reshape(kk, m)
    else:
        raise ValueError(f"routing must be 'routed' or 'masked', got {routing!r}")
    kl_trans = jnp.mean(jnp.sum(log_q[..., lags, :], axis=-1) - log_p)
    loss = recon + beta * kl_normal + gamma * kl_trans
    return loss, {"recon": recon, "kl_normal": kl_normal, "kl_trans": kl_trans}


def encode_mean(graphdef, params, x: jax.Array) -> jax.Array:
    """Encoder means ``[..., d]`` of observations ``[..., d]`` (what inference uses)."""
    return nnx.merge(graphdef, params).encoder(x)[0]


def expert_log_probs(graphdef, params, z: jax.Array, experts) -> jax.Array:
    """``log p_k(z_{L+1} | z_{1:L})`` of the experts ``experts`` (static tuple of indices) for
    sequences ``z [B, L + 1, d]`` -> ``[len(experts), B]``."""
    prior = nnx.merge(graphdef, params).prior
    b, steps, d = z.shape
    lp = prior.log_prob_all(z[:, :-1, :].reshape(b, (steps - 1) * d), z[:, -1, :])
    return lp[jnp.asarray(experts)]
