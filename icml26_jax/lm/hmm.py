"""A synthetic language from a hidden Markov model, with an exactly computable likelihood.

Token sequences are emitted by a stationary HMM: a hidden state ``z_t`` follows the Markov
chain ``trans`` from its stationary distribution ``init`` and emits ``x_t ~ emit[z_t]``.
Because the forward algorithm gives the exact conditional ``p(x_t | x_<t)``, the entropy rate
of the language -- the lowest per-token NLL any language model can reach -- is known, and a
transformer trained on samples can be measured against it.

Rows drawn from a Dirichlet with a low concentration are peaked: each state has a few likely
successors and emits a few likely tokens, but tokens are shared between states, so the state
has to be inferred from the history rather than read off the last token, and the exact
predictor beats the best bigram model. Measured with :func:`entropy_rate` (nats/token,
``S=32``, ``V=64``, seed 0; ``log V = 4.16``; bigram fitted on 512x1024 sampled tokens)::

    trans_conc  emit_conc   entropy rate   bigram NLL   unigram entropy
    0.1         0.1         3.82           3.92         4.02      (the defaults)
    0.05        0.05        3.11           3.48         3.92
    0.02        0.02        1.85           2.19         3.42

Lower concentrations give a more learnable language with a wider gap between the bigram
model and the floor. In all of these the conditional entropy ``H(x_t | x_<t)`` reaches the
entropy rate within about 4-8 tokens (:func:`conditional_entropy_by_position`).

The model, the exact likelihood and the entropy rate are NumPy (float64), on the host.
Training batches are drawn on the device by :func:`sample_jax` (``jax.random`` and
``lax.scan``, jittable with the model as an argument), so a training step can generate its own
batch from ``(key, step)`` with no host work; :func:`sample` is its NumPy counterpart for fixed
evaluation sets.

Usage::

    hmm = make_hmm(32, 64, seed=0)
    tokens = sample(hmm, num_seqs=128, length=256, seed=1)     # [128, 256] int32, NumPy
    batch = sample_jax(jax.random.key(1), device_hmm(hmm), 128, 256)   # on the device
    floor = entropy_rate(hmm)                                  # nats/token
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "HMM",
    "conditional_entropy_by_position",
    "device_hmm",
    "entropy_rate",
    "log_likelihood",
    "make_hmm",
    "sample",
    "sample_jax",
    "stationary_distribution",
    "token_marginal",
    "unigram_entropy",
]


class HMM(NamedTuple):
    """A hidden Markov model over ``S`` states and a vocabulary of ``V`` tokens.

    Attributes:
      init: ``[S]`` distribution of the first hidden state.
      trans: ``[S, S]`` row-stochastic transitions, ``trans[i, j] = p(z_{t+1}=j | z_t=i)``.
      emit: ``[S, V]`` row-stochastic emissions, ``emit[i, v] = p(x_t=v | z_t=i)``.
    """

    init: np.ndarray
    trans: np.ndarray
    emit: np.ndarray

    @property
    def num_states(self) -> int:
        return self.trans.shape[0]

    @property
    def vocab_size(self) -> int:
        return self.emit.shape[1]


def make_hmm(num_states: int = 32, vocab_size: int = 64, *, seed: int = 0,
             trans_concentration: float = 0.1, emit_concentration: float = 0.1,
             sparsity: float | None = None, num_successors: int | None = None,
             num_emissions: int | None = None) -> HMM:
    """A random stationary HMM, deterministic in ``seed``.

    Every row of ``trans`` and of ``emit`` is drawn from a symmetric Dirichlet (over its
    support, see ``sparsity``); ``init`` is the stationary distribution of ``trans``, so the
    token process is stationary: every position has the same marginal
    (:func:`token_marginal`).

    The defaults (32 states, 64 tokens, both concentrations 0.1) give an entropy rate of 3.82
    nats/token against a bigram NLL of 3.92 and a unigram entropy of 4.02 (seed 0; the module
    docstring has lower concentrations, which widen these gaps). The exact predictor is ahead
    of the bigram model because each state keeps few likely successors while each token is
    emitted by several states, so the last token alone does not reveal the state.

    Args:
      num_states: number of hidden states ``S >= 1``.
      vocab_size: number of tokens ``V >= 2``.
      seed: seed of ``np.random.default_rng``.
      trans_concentration: Dirichlet concentration of the rows of ``trans`` (> 0); lower is
        more deterministic, i.e. longer memory.
      emit_concentration: Dirichlet concentration of the rows of ``emit`` (> 0); lower makes
        each state emit fewer distinct tokens.
      sparsity: None, or the fraction in ``[0, 1)`` of the entries of every row of ``trans``
        and ``emit`` that are exactly zero. Each row keeps
        ``max(1, round((1 - sparsity) * n))`` entries at random; row ``i`` of ``trans``
        always keeps its successor ``(i + 1) % S`` so the chain stays irreducible.
      num_successors: None, or the exact number of nonzero entries of every row of
        ``trans`` (in ``[1, S]``; row i always includes ``(i + 1) % S``); overrides
        ``sparsity`` for ``trans``.
      num_emissions: None, or the exact number of tokens every state emits (in ``[1, V]``);
        overrides ``sparsity`` for ``emit``.

    Returns:
      An :class:`HMM` of float64 arrays.
    """
    num_states = _check_int("num_states", num_states, 1)
    vocab_size = _check_int("vocab_size", vocab_size, 2)
    for name, value in (("trans_concentration", trans_concentration),
                        ("emit_concentration", emit_concentration)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
                or not np.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {name}={value!r}")
    if sparsity is not None and (isinstance(sparsity, bool)
                                 or not isinstance(sparsity, (int, float, np.number))
                                 or not 0 <= sparsity < 1):
        raise ValueError(f"sparsity must be None or in [0, 1), got sparsity={sparsity!r}")
    if num_successors is not None:
        num_successors = _check_int("num_successors", num_successors, 1)
        if num_successors > num_states:
            raise ValueError(f"num_successors={num_successors} exceeds num_states={num_states}")
    if num_emissions is not None:
        num_emissions = _check_int("num_emissions", num_emissions, 1)
        if num_emissions > vocab_size:
            raise ValueError(f"num_emissions={num_emissions} exceeds vocab_size={vocab_size}")
    rng = np.random.default_rng(seed)
    trans_mask = emit_mask = None
    nxt = (np.arange(num_states) + 1) % num_states
    if sparsity is not None:
        trans_mask = _support(rng, num_states, num_states, sparsity)
        trans_mask[np.arange(num_states), nxt] = True
        emit_mask = _support(rng, num_states, vocab_size, sparsity)
    if num_successors is not None:
        # k - 1 random successors besides (i + 1) % S, which keeps the chain irreducible.
        score = rng.random((num_states, num_states))
        score[np.arange(num_states), nxt] = 2.0
        order = np.argsort(-score, axis=1)
        trans_mask = np.zeros((num_states, num_states), bool)
        np.put_along_axis(trans_mask, order[:, :num_successors], True, axis=1)
    if num_emissions is not None:
        emit_mask = _support(rng, num_states, vocab_size,
                             1.0 - num_emissions / vocab_size)
    trans = _dirichlet_rows(rng, float(trans_concentration), (num_states, num_states),
                            trans_mask)
    emit = _dirichlet_rows(rng, float(emit_concentration), (num_states, vocab_size), emit_mask)
    return HMM(init=stationary_distribution(trans), trans=trans, emit=emit)


def stationary_distribution(trans) -> np.ndarray:
    """The stationary distribution ``pi = pi @ trans`` of an irreducible chain.

    Args:
      trans: ``[S, S]`` row-stochastic matrix.

    Returns:
      ``[S]`` float64 probabilities. For a reducible chain, one of its stationary
      distributions.
    """
    trans = np.asarray(trans, np.float64)
    if trans.ndim != 2 or trans.shape[0] != trans.shape[1]:
        raise ValueError(f"trans must be a square matrix, got shape {trans.shape}")
    s = trans.shape[0]
    # (trans^T - I) pi = 0 with one equation replaced by sum(pi) = 1.
    a = trans.T - np.eye(s)
    a[-1] = 1.0
    b = np.zeros(s)
    b[-1] = 1.0
    pi = np.linalg.lstsq(a, b, rcond=None)[0]
    pi = np.clip(pi, 0.0, None)
    pi /= pi.sum()
    for _ in range(3):  # Polish away the solve's rounding; each step keeps pi a distribution.
        pi = pi @ trans
        pi /= pi.sum()
    return pi


def token_marginal(hmm: HMM) -> np.ndarray:
    """``[V]`` marginal ``p(x_t = v)`` of every position, ``init @ emit`` (stationary HMM)."""
    _check_hmm(hmm)
    return hmm.init @ hmm.emit


def unigram_entropy(hmm: HMM) -> float:
    """Entropy in nats of :func:`token_marginal`: the NLL of the best unigram model."""
    p = token_marginal(hmm)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def sample(hmm: HMM, num_seqs: int, length: int, *, seed: int) -> np.ndarray:
    """Token sequences of the HMM, deterministic in ``seed``.

    Sequences are drawn together (one vectorised step per position), so the first ``l``
    positions of ``sample(hmm, n, L, seed=s)`` do not depend on ``L >= l``.

    Args:
      hmm: the model.
      num_seqs: number of sequences ``N >= 1``.
      length: tokens per sequence ``L >= 1``.
      seed: seed of ``np.random.default_rng``.

    Returns:
      ``[N, L]`` int32 tokens in ``[0, V)``.
    """
    _check_hmm(hmm)
    num_seqs = _check_int("num_seqs", num_seqs, 1)
    length = _check_int("length", length, 1)
    rng = np.random.default_rng(seed)
    trans_cdf = np.cumsum(hmm.trans, axis=1)  # [S, S]
    emit_cdf = np.cumsum(hmm.emit, axis=1)  # [S, V]
    init_cdf = np.broadcast_to(np.cumsum(hmm.init), (num_seqs, hmm.num_states))
    tokens = np.empty((num_seqs, length), np.int32)
    z = _categorical(init_cdf, rng.random(num_seqs))  # [N]
    for t in range(length):
        tokens[:, t] = _categorical(emit_cdf[z], rng.random(num_seqs))
        if t + 1 < length:
            z = _categorical(trans_cdf[z], rng.random(num_seqs))
    return tokens


def device_hmm(hmm: HMM) -> HMM:
    """The model as float32 device arrays, the form :func:`sample_jax` takes (pass it to a
    jitted function as an argument so its program does not embed the matrices)."""
    _check_hmm(hmm)
    return HMM(*(jnp.asarray(np.asarray(a, np.float64), jnp.float32) for a in hmm))


def sample_jax(key, hmm: HMM, num_seqs: int, length: int, *, return_states: bool = False):
    """Token sequences of the HMM drawn on the device: the JAX counterpart of :func:`sample`.

    The hidden chain advances one position per ``lax.scan`` step, every sequence at once,
    and the emissions are then drawn for all positions together; position ``t`` draws with
    keys folded from ``t``, so the first ``l`` positions do not depend on ``length >= l`` (as
    in :func:`sample`). Draws invert the cumulative rows (one uniform each), capped at each
    row's last nonzero entry, so a zero-probability state or token is never drawn.
    Traceable: call it inside a jitted training step with ``hmm`` an argument (see
    :func:`device_hmm`); ``num_seqs`` and ``length`` are static. The draws differ from
    :func:`sample`'s (different generators); the distribution is the same.

    Args:
      key: a ``jax.random`` key.
      hmm: the model (NumPy or JAX arrays; float32 is enough for sampling).
      num_seqs: number of sequences ``N >= 1``.
      length: tokens per sequence ``L >= 1``.
      return_states: also return the hidden states.

    Returns:
      ``[N, L]`` int32 tokens in ``[0, V)``; with ``return_states``, ``(tokens, states)``
      with ``states`` ``[N, L]`` int32 in ``[0, S)``.
    """
    num_seqs = _check_int("num_seqs", num_seqs, 1)
    length = _check_int("length", length, 1)
    init, trans, emit = (jnp.asarray(a) for a in hmm)
    if init.ndim != 1 or trans.shape != (init.shape[0],) * 2 or emit.ndim != 2 \
            or emit.shape[0] != init.shape[0]:
        raise ValueError(f"hmm must have init [S], trans [S, S], emit [S, V], got shapes "
                         f"{init.shape}, {trans.shape}, {emit.shape}")
    return _sample_jax(key, init, trans, emit, num_seqs, length, return_states)


@functools.partial(jax.jit, static_argnums=(4, 5, 6))
def _sample_jax(key, init, trans, emit, num_seqs, length, return_states):
    init, trans, emit = (a.astype(jnp.float32) for a in (init, trans, emit))
    k_init, k_pos, k_emit = jax.random.split(key, 3)
    # Inverse-CDF draws, one uniform each (a Gumbel-max draw would need S or V of them).
    z0 = _categorical_jax(jnp.cumsum(init)[None], jax.random.uniform(k_init, (num_seqs,)))
    trans_cdf, trans_last = jnp.cumsum(trans, axis=1), _last_positive(trans)

    def position(z, t):
        u = jax.random.uniform(jax.random.fold_in(k_pos, t), (num_seqs,))
        z_next = jnp.minimum(_categorical_jax(trans_cdf[z], u), trans_last[z])
        return z_next, z

    _, zs = jax.lax.scan(position, z0, jnp.arange(length, dtype=jnp.int32))
    zs = zs.T  # [N, L]
    # Emissions given the path are independent: drawn for all positions at once; position
    # t's uniforms come from its own key, so prefixes do not depend on ``length``.
    u = jax.vmap(lambda t: jax.random.uniform(jax.random.fold_in(k_emit, t), (num_seqs,)),
                 out_axes=1)(jnp.arange(length, dtype=jnp.int32))
    xs = jnp.minimum(_categorical_jax(jnp.cumsum(emit, axis=1)[zs], u), _last_positive(emit)[zs])
    if return_states:
        return xs, zs
    return xs


def _categorical_jax(cdf, u):
    """Inverse-CDF draws (as :func:`_categorical`): ``cdf [..., K]``, ``u [...]`` in [0, 1)."""
    return jnp.sum(cdf <= (u * cdf[..., -1])[..., None], axis=-1, dtype=jnp.int32)


def _last_positive(p):
    """``[rows]`` index of each row's last nonzero entry: caps an inverse-CDF draw, so a
    float32 ``u * total`` that rounds up to ``total`` cannot land on trailing zeros."""
    k = p.shape[-1]
    return (k - 1 - jnp.argmax(p[..., ::-1] > 0, axis=-1)).astype(jnp.int32)


def log_likelihood(hmm: HMM, tokens) -> np.ndarray:
    """Exact per-token conditional log-likelihoods by the scaled forward algorithm.

    With the predictive state distribution ``q_t(s) = p(z_t = s | x_<t)`` (``q_0 = init``),
    ``p(x_t | x_<t) = sum_s q_t(s) emit[s, x_t]``; conditioning on ``x_t`` and one step of the
    chain give ``q_{t+1} = normalize(q_t * emit[:, x_t]) @ trans``. Keeping ``q_t`` normalised
    is the usual scaling that avoids underflow, and its normaliser is the conditional itself.

    Args:
      hmm: the model.
      tokens: ``[N, L]`` integer tokens in ``[0, V)``.

    Returns:
      ``[N, L]`` float64 ``log p(x_t | x_<t)``; their sum over ``t`` is ``log p(x)``. A token
      the model cannot emit gives ``-inf`` (and the state distribution is carried on
      unconditioned past it).
    """
    _check_hmm(hmm)
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens must be a 2-D integer array [N, L], got shape "
                         f"{tokens.shape} and dtype {tokens.dtype}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= hmm.vocab_size):
        raise ValueError(f"tokens must be in [0, vocab_size={hmm.vocab_size}), got values in "
                         f"[{tokens.min()}, {tokens.max()}]")
    n, length = tokens.shape
    emit_t = np.ascontiguousarray(hmm.emit.T)  # [V, S]
    q = np.broadcast_to(hmm.init, (n, hmm.num_states))  # [N, S]
    out = np.empty((n, length))
    for t in range(length):
        joint = q * emit_t[tokens[:, t]]  # [N, S] p(z_t, x_t | x_<t)
        c = joint.sum(axis=1)  # [N] p(x_t | x_<t)
        ok = c > 0
        with np.errstate(divide="ignore"):
            out[:, t] = np.log(c)
        post = np.where(ok[:, None], joint / np.where(ok, c, 1.0)[:, None], q)
        q = post @ hmm.trans
    return out


def entropy_rate(hmm: HMM, *, num_seqs: int = 256, length: int = 2048, seed: int = 0) -> float:
    """Monte-Carlo estimate of the entropy rate in nats/token: the NLL floor of the language.

    The entropy rate is ``lim_t H(x_t | x_<t)``. It is estimated as the mean of
    ``-log p(x_t | x_<t)`` (exact, :func:`log_likelihood`) over the second half of
    ``num_seqs`` sampled sequences of ``length`` tokens, where the conditional entropy has
    converged to its limit (:func:`conditional_entropy_by_position` shows how fast).

    Args:
      hmm: the model.
      num_seqs: number of sampled sequences.
      length: tokens per sequence (>= 2).
      seed: seed of the samples.

    Returns:
      The estimate, a Python float in ``[0, log V]``.
    """
    length = _check_int("length", length, 2)
    nll = -log_likelihood(hmm, sample(hmm, num_seqs, length, seed=seed))
    return float(nll[:, length // 2:].mean())


def conditional_entropy_by_position(hmm: HMM, length: int, *, num_seqs: int = 256,
                                   seed: int = 0) -> np.ndarray:
    """Monte-Carlo estimate of ``H(x_t | x_<t)`` for ``t < length``, in nats.

    This is the mean NLL of the exact predictor at every position: the floor of a language
    model's per-position loss on sequences that start at the beginning of the process. It
    starts at the unigram entropy (``t = 0``) and, on average, decreases to the entropy rate.

    Args:
      hmm: the model.
      length: number of positions ``L >= 1``.
      num_seqs: number of sampled sequences averaged over.
      seed: seed of the samples.

    Returns:
      ``[L]`` float64.
    """
    return -log_likelihood(hmm, sample(hmm, num_seqs, length, seed=seed)).mean(axis=0)


def _categorical(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws: ``cdf [N, K]`` cumulative rows, ``u [N]`` uniforms in [0, 1)."""
    # Scaling by the last cumulative value makes rounding in cumsum harmless, and counting
    # the cdf entries <= u never selects a zero-probability index.
    u = u * cdf[:, -1]
    idx = (cdf <= u[:, None]).sum(axis=1)
    return np.minimum(idx, cdf.shape[1] - 1)


def _dirichlet_rows(rng: np.random.Generator, alpha: float, shape: tuple[int, int],
                    mask: np.ndarray | None) -> np.ndarray:
    """Rows ~ Dirichlet(alpha) over the support ``mask`` (all entries when None)."""
    # Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha), drawn in log space: plain gamma draws
    # underflow to 0 for small alpha and a row could then be all zeros.
    log_g = np.log(rng.gamma(alpha + 1.0, size=shape)) + np.log(rng.random(shape)) / alpha
    if mask is not None:
        log_g = np.where(mask, log_g, -np.inf)
    log_g -= log_g.max(axis=1, keepdims=True)
    g = np.exp(log_g)
    return g / g.sum(axis=1, keepdims=True)


def _support(rng: np.random.Generator, rows: int, cols: int, sparsity: float) -> np.ndarray:
    """``[rows, cols]`` bool mask with ``max(1, round((1 - sparsity) * cols))`` True per row."""
    keep = max(1, int(round((1.0 - sparsity) * cols)))
    order = np.argsort(rng.random((rows, cols)), axis=1)
    mask = np.zeros((rows, cols), bool)
    np.put_along_axis(mask, order[:, :keep], True, axis=1)
    return mask


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {name}={value!r}")
    return int(value)


def _check_hmm(hmm: HMM) -> None:
    init, trans, emit = (np.asarray(a) for a in hmm)
    s = init.shape[0] if init.ndim == 1 else -1
    if init.ndim != 1 or trans.shape != (s, s) or emit.ndim != 2 or emit.shape[0] != s:
        raise ValueError(f"hmm must have init [S], trans [S, S], emit [S, V], got shapes "
                         f"{init.shape}, {trans.shape}, {emit.shape}")
