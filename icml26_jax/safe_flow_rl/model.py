"""Networks of SafeFlowRL: MLPs, the conditional RealNVP flow prior and the latent refiner.

Spec §Method "Flow prior" and "Latent refiner" [R]. Data flow of the flow prior (A actions,
O observation features)::

    z [..., A] ~ N(0, I),  s [..., O]
      -> n_coupling affine couplings (alternating halves; for A = 2 the 1-D masks
         [1, 0], [0, 1], ...):  x_b <- x_b * exp(scale) + t,
         (s_raw, t) = MLP(concat(s, x_a)),  scale = s_max * tanh(s_raw / s_max)
      -> u [..., A] -> tanh -> a [..., A] in (-1, 1)^A

``ConditionalRealNVP.forward(z, s) -> (a, log|det da/dz|)``, ``inverse(a, s) ->
(z, log|det dz/da|)``, ``log_prob(a, s) = log N(z; 0, I) + log|det dz/da|``. Leading
dimensions of ``z``/``a`` and ``s`` must agree (``[B, A]`` and ``[B, O]`` in the spec; more
leading axes work the same way).

All modules are plain NNX modules without shared submodules, so they work in tree mode; at a
jit boundary split them with ``graphdef, params = nnx.split(model, nnx.Param)`` and merge
inside a pure function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

ACTION_CLIP = 1.0 - 1e-5  # dataset actions are clipped to +-ACTION_CLIP before atanh (spec)
REFINER_KINDS = ("ordered", "gaussian")
_LOG2 = math.log(2.0)
_LOG_2PI = math.log(2.0 * math.pi)


def _scaled_lecun_normal(scale: float):
    """LeCun-normal kernel init multiplied by ``scale`` (``scale = 0`` gives zeros)."""
    base = nnx.initializers.lecun_normal()

    def init(key, shape, dtype=jnp.float32):
        if scale == 0.0:
            return jnp.zeros(shape, dtype)
        return scale * base(key, shape, dtype)

    return init


class MLP(nnx.Module):
    """Fully connected network ``in_dim -> hidden... -> out_dim`` (no output activation).

    Used for the critics and values (``out_dim = 1``), the flow conditioners and the refiner
    heads.

    Args:
      in_dim: input width.
      hidden: widths of the hidden layers (may be empty: a single linear map).
      out_dim: output width.
      rngs: NNX rngs (``params`` stream).
      activation: hidden-layer nonlinearity.
      zero_last: initialise the last layer's kernel and bias to zero, so the network starts
        as the constant 0 (the flow conditioners and refiner heads use this so that the
        initial flow is ``tanh(z)`` and the initial refinement is the identity).
      out_scale: multiply the last layer's LeCun-normal kernel init by this factor (ignored
        when ``zero_last``); ``None`` keeps the default init.
      dtype: parameter dtype.
    """

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int, *, rngs: nnx.Rngs,
                 activation: Callable[[jax.Array], jax.Array] = nnx.relu,
                 zero_last: bool = False, out_scale: float | None = None,
                 dtype=jnp.float32):
        hidden = tuple(int(h) for h in hidden)
        for name, v, lo in (("in_dim", in_dim, 0), ("out_dim", out_dim, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"MLP {name} must be an integer >= {lo}, got {v!r}")
        if any(h < 1 for h in hidden):
            raise ValueError(f"MLP hidden widths must be >= 1, got {hidden}")
        if out_scale is not None and not (out_scale >= 0.0):
            raise ValueError(f"MLP out_scale must be >= 0 or None, got {out_scale!r}")
        widths = (in_dim,) + hidden + (out_dim,)
        last_scale = 0.0 if zero_last else (1.0 if out_scale is None else float(out_scale))
        layers = []
        for i, (d_in, d_out) in enumerate(zip(widths[:-1], widths[1:])):
            is_last = i == len(widths) - 2
            kinit = (_scaled_lecun_normal(last_scale) if is_last
                     else nnx.initializers.lecun_normal())
            layers.append(nnx.Linear(d_in, d_out, kernel_init=kinit, param_dtype=dtype,
                                     rngs=rngs))
        self.layers = nnx.List(layers)
        self.activation = activation
        self.in_dim, self.out_dim, self.hidden = in_dim, out_dim, hidden

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [..., in_dim] -> [..., out_dim]."""
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


def tanh_log_det(u: jax.Array) -> jax.Array:
    """Elementwise log(d tanh(u)/du) = log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)).

    Stable for large |u| (no cancellation in 1 - tanh^2); same shape as ``u``.
    """
    return 2.0 * (_LOG2 - u - jax.nn.softplus(-2.0 * u))


class ConditionalRealNVP(nnx.Module):
    """Conditional RealNVP with a final tanh: a = tanh(g_K o ... o g_1(z; s)).

    Coupling k keeps one half of the action vector x_a and transforms the other half
    x_b <- x_b * exp(scale) + t, with (s_raw, t) = conditioner_k(concat(s, x_a)) and the
    bounded scale = s_max * tanh(s_raw / s_max) (|scale| <= s_max, so each coupling is
    bi-Lipschitz). Even couplings keep the first ``A // 2`` dims, odd couplings the rest (for
    A = 2: masks [1, 0], [0, 1], ...). For A = 1 every coupling transforms the single dim,
    conditioned on s only.

    Initialisation: every conditioner's last layer is zero, so scale = t = 0 and the
    initial flow is exactly a = tanh(z), a tanh-squashed N(0, I) independent of s.

    Args:
      action_dim: A.
      obs_dim: O (the conditioning state features).
      hidden: hidden widths of each conditioner MLP.
      n_coupling: number of coupling layers.
      s_max: bound of the log-scale.
      rngs: NNX rngs.
      activation: conditioner nonlinearity.
      dtype: parameter and computation dtype; inputs are cast to it.
    """

    def __init__(self, action_dim: int, obs_dim: int, hidden: Sequence[int] = (128, 128),
                 n_coupling: int = 6, s_max: float = 2.0, *, rngs: nnx.Rngs,
                 activation: Callable[[jax.Array], jax.Array] = nnx.relu,
                 dtype=jnp.float32):
        for name, v in (("action_dim", action_dim), ("obs_dim", obs_dim),
                        ("n_coupling", n_coupling)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ConditionalRealNVP {name} must be an integer >= 1, "
                                 f"got {v!r}")
        if not (isinstance(s_max, (int, float)) and s_max > 0):
            raise ValueError(f"ConditionalRealNVP s_max must be > 0, got {s_max!r}")
        self.action_dim, self.obs_dim = action_dim, obs_dim
        self.n_coupling, self.s_max = n_coupling, float(s_max)
        self.hidden = tuple(int(h) for h in hidden)
        self.dtype = dtype
        # Static per-layer partition: (n_keep, keep_first). Kept dims are a contiguous block,
        # first (even layers) or last (odd layers) -> concat restores the order.
        half = action_dim // 2
        parts = []
        for k in range(n_coupling):
            if action_dim == 1:
                parts.append((0, True))
            elif k % 2 == 0:
                parts.append((half, True))
            else:
                parts.append((action_dim - half, False))
        self.partitions = tuple(parts)
        self.conditioners = nnx.List([
            MLP(obs_dim + n_keep, self.hidden, 2 * (action_dim - n_keep), rngs=rngs,
                activation=activation, zero_last=True, dtype=dtype)
            for n_keep, _ in parts])

    # ---------------------------------------------------------------- helpers
    def _split(self, x, k):
        """x [..., A] -> (kept [..., n_keep], transformed [..., A - n_keep]) for layer k."""
        n_keep, keep_first = self.partitions[k]
        if keep_first:
            return x[..., :n_keep], x[..., n_keep:]
        n_tr = self.action_dim - n_keep
        return x[..., n_tr:], x[..., :n_tr]

    def _join(self, kept, transformed, k):
        _, keep_first = self.partitions[k]
        parts = (kept, transformed) if keep_first else (transformed, kept)
        return jnp.concatenate(parts, axis=-1)

    def _scale_shift(self, k, s, kept):
        """(scale, shift), each [..., A - n_keep], of coupling k."""
        out = self.conditioners[k](jnp.concatenate([s, kept], axis=-1))
        s_raw, shift = jnp.split(out, 2, axis=-1)
        scale = self.s_max * jnp.tanh(s_raw / self.s_max)
        return scale, shift

    def _cast(self, x, name, last):
        x = jnp.asarray(x, self.dtype)
        if x.ndim < 1 or x.shape[-1] != last:
            raise ValueError(f"{name} must have trailing dimension {last}, got shape {x.shape}")
        return x

    def _check(self, x, s, xname):
        x = self._cast(x, xname, self.action_dim)
        s = self._cast(s, "s", self.obs_dim)
        if x.shape[:-1] != s.shape[:-1]:
            raise ValueError(f"leading dims of {xname} {x.shape} and s {s.shape} must agree")
        return x, s

    # ---------------------------------------------------------------- bijection
    def forward_latent(self, z: jax.Array, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The couplings only (no tanh): z [..., A], s [..., O] -> (u [..., A], logdet [...])."""
        z, s = self._check(z, s, "z")
        logdet = jnp.zeros(z.shape[:-1], self.dtype)
        x = z
        for k in range(self.n_coupling):
            kept, tr = self._split(x, k)
            scale, shift = self._scale_shift(k, s, kept)
            x = self._join(kept, tr * jnp.exp(scale) + shift, k)
            logdet = logdet + jnp.sum(scale, axis=-1)
        return x, logdet

    def forward(self, z: jax.Array, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Decode latents: z [..., A], s [..., O] -> (a [..., A], log|det da/dz| [...])."""
        u, logdet = self.forward_latent(z, s)
        return jnp.tanh(u), logdet + jnp.sum(tanh_log_det(u), axis=-1)

    def inverse(self, a: jax.Array, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Encode actions: a [..., A], s [..., O] -> (z [..., A], log|det dz/da| [...]).

        Actions are clipped to +-(1 - 1e-5) before atanh (spec: dataset actions on the box
        boundary would map to infinity).
        """
        a, s = self._check(a, s, "a")
        u = jnp.arctanh(jnp.clip(a, -ACTION_CLIP, ACTION_CLIP))
        z, logdet = self._inverse_couplings(u, s)
        return z, logdet - jnp.sum(tanh_log_det(u), axis=-1)

    def inverse_latent(self, u: jax.Array, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Inverse of :meth:`forward_latent` (the couplings only, no tanh):
        u [..., A], s [..., O] -> (z [..., A], log|det dz/du| [...])."""
        u, s = self._check(u, s, "u")
        return self._inverse_couplings(u, s)

    def _inverse_couplings(self, u, s):
        logdet = jnp.zeros(u.shape[:-1], self.dtype)
        x = u
        for k in reversed(range(self.n_coupling)):
            kept, tr = self._split(x, k)
            scale, shift = self._scale_shift(k, s, kept)
            x = self._join(kept, (tr - shift) * jnp.exp(-scale), k)
            logdet = logdet - jnp.sum(scale, axis=-1)
        return x, logdet

    def __call__(self, z: jax.Array, s: jax.Array) -> jax.Array:
        """a = f(z; s) [..., A] (``forward`` without the log-det)."""
        return self.forward(z, s)[0]

    # ---------------------------------------------------------------- density
    def log_prob(self, a: jax.Array, s: jax.Array) -> jax.Array:
        """log pi(a | s) = log N(f^{-1}(a; s); 0, I) + log|det df^{-1}/da|; shape [...]."""
        z, logdet = self.inverse(a, s)
        return base_log_prob(z) + logdet

    def sample(self, key: jax.Array, s: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
        """n samples per state: s [..., O] -> (a [..., n, A], z [..., n, A]), z ~ N(0, I)."""
        s = self._cast(s, "s", self.obs_dim)
        z = jax.random.normal(key, s.shape[:-1] + (n, self.action_dim), self.dtype)
        s_b = jnp.broadcast_to(s[..., None, :], s.shape[:-1] + (n, self.obs_dim))
        return self.forward(z, s_b)[0], z


def base_log_prob(z: jax.Array) -> jax.Array:
    """log N(z; 0, I) summed over the last axis: [..., A] -> [...]."""
    return -0.5 * jnp.sum(jnp.square(z), axis=-1) - 0.5 * z.shape[-1] * _LOG_2PI


class LatentRefiner(nnx.Module):
    """The refiner networks; the refinement rule itself lives in ``refiner.py``.

    ``kind="ordered"`` (spec §Latent refiner, the default): two heads g_h(s, z) and g_r(s, z),
    each ``MLP(O + A -> hidden -> A)``. Intended use (the flow and critics frozen)::

        z1 = z0 + eps_h * u_h / max(1, |u_h|),   u_h = g_h(s, z0)     # safety step
        z2 = z1 + eps_r * u_r / max(1, |u_r|),   u_r = g_r(s, z1)     # reward step
        a  = flow(z2, s)                          # |z2 - z0| <= eps_h + eps_r exactly

    ``kind="gaussian"`` (optional variant): heads m(s) and l(s), each ``MLP(O -> hidden -> A)``,
    with z = m(s) + exp(l(s)) * z0, the closed-form KL/W2 to N(0, I) held under a budget by a
    dual variable.

    Every head's last layer is zero at init, so u_h = u_r = 0 (ordered) and m = l = 0
    (gaussian): the initial refinement is the identity z = z0.

    Args:
      obs_dim: O.
      action_dim: A (the latent width equals the action width).
      kind: "ordered" or "gaussian".
      hidden: hidden widths of each head.
      rngs: NNX rngs.
      activation: hidden nonlinearity.
    """

    def __init__(self, obs_dim: int, action_dim: int, kind: str = "ordered",
                 hidden: Sequence[int] = (128, 128), *, rngs: nnx.Rngs,
                 activation: Callable[[jax.Array], jax.Array] = nnx.relu):
        if kind not in REFINER_KINDS:
            raise ValueError(f"LatentRefiner kind must be one of {REFINER_KINDS}, got {kind!r}")
        for name, v in (("obs_dim", obs_dim), ("action_dim", action_dim)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"LatentRefiner {name} must be an integer >= 1, got {v!r}")
        self.kind, self.obs_dim, self.action_dim = kind, obs_dim, action_dim
        self.hidden = tuple(int(h) for h in hidden)
        in_dim = obs_dim + action_dim if kind == "ordered" else obs_dim
        mk = lambda: MLP(in_dim, self.hidden, action_dim, rngs=rngs,  # noqa: E731
                         activation=activation, zero_last=True)
        if kind == "ordered":
            self.head_h, self.head_r = mk(), mk()
        else:
            self.head_m, self.head_log_scale = mk(), mk()

    def _need(self, kind):
        if self.kind != kind:
            raise ValueError(f"this method needs a LatentRefiner(kind={kind!r}); "
                             f"this one is kind={self.kind!r}")

    def g_h(self, s: jax.Array, z: jax.Array) -> jax.Array:
        """Safety direction u_h = g_h(s, z): s [..., O], z [..., A] -> [..., A] (ordered)."""
        self._need("ordered")
        return self.head_h(jnp.concatenate([s, z], axis=-1))

    def g_r(self, s: jax.Array, z: jax.Array) -> jax.Array:
        """Reward direction u_r = g_r(s, z): s [..., O], z [..., A] -> [..., A] (ordered)."""
        self._need("ordered")
        return self.head_r(jnp.concatenate([s, z], axis=-1))

    def gaussian(self, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(m(s), l(s)), each [..., A]: mean and log-scale of the latent map (gaussian)."""
        self._need("gaussian")
        return self.head_m(s), self.head_log_scale(s)


def distrax_flow(flow: ConditionalRealNVP, s: jax.Array):
    """The same density as ``flow`` at states ``s`` [B, O], built from distrax bijectors
    (``MaskedCoupling`` + ``ScalarAffine`` + ``Tanh``) around our conditioner networks: the
    parity peer of the density test and the throughput benchmark. Needs ``distrax``.

    Returns:
      (chain, dist): the bijector z -> a and the ``Transformed`` distribution over [B, A].
    """
    import distrax  # optional: the parity peer only

    A = flow.action_dim

    def conditioner(k):
        n_keep, keep_first = flow.partitions[k]

        def cond(x):  # x [B, A], the transformed dims zeroed by distrax
            kept = x[..., :n_keep] if keep_first else x[..., A - n_keep:]
            raw, shift = jnp.split(flow.conditioners[k](jnp.concatenate([s, kept], -1)), 2, -1)
            log_scale = flow.s_max * jnp.tanh(raw / flow.s_max)
            pad = jnp.zeros(kept.shape, x.dtype)  # unused values at the kept dims
            join = (lambda p: jnp.concatenate([pad, p], -1)) if keep_first else (
                lambda p: jnp.concatenate([p, pad], -1))
            return join(shift), join(log_scale)
        return cond

    couplings = []
    for k in range(flow.n_coupling):
        n_keep, keep_first = flow.partitions[k]
        mask = np.arange(A) < n_keep if keep_first else np.arange(A) >= A - n_keep
        couplings.append(distrax.MaskedCoupling(
            mask=jnp.asarray(mask), conditioner=conditioner(k),
            bijector=lambda p: distrax.ScalarAffine(shift=p[0], log_scale=p[1])))
    chain = distrax.Chain([distrax.Block(distrax.Tanh(), 1)] + couplings[::-1])
    base = distrax.MultivariateNormalDiag(jnp.zeros(A), jnp.ones(A))
    return chain, distrax.Transformed(base, chain)
