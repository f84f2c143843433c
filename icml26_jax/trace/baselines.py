"""Discrete-switching baselines for trajectory recovery (spec §Baselines and peers).

Every baseline sees what TRACE sees (the same trained encoder and experts, the same active
set, the same 500-sequence ensembles) and differs only in assuming that the mechanism
switches between discrete domains. All are [R] reconstructions: the NCTRL-hard/soft
adaptations are not released.

Model-independent part (float64 NumPy, this block):
  - :func:`hard_switch`: Viterbi path of a sticky HMM over the active domains, one-hot
    (NCTRL-hard analogue).
  - :func:`soft_hmm`: forward-backward posterior marginals of the same HMM (NCTRL-soft
    analogue; nearly one-hot, because pooled emissions are sums over 500 samples).
  - :func:`soft_routing`: per-sample expert responsibilities under a uniform prior, averaged
    over the ensemble (the "probabilistic routing" reading of NCTRL-soft).
  - :func:`nearest_centroid`: one-hot of the nearest centroid (the paper's centroid heuristic).
  - :func:`moving_average_of`: the "hard + moving average" diagnostic, reported apart from
    the claims: a smoothed one-hot path is no longer discrete switching.

The emissions come from the trained experts: ``pooled_loglik`` (model-dependent, beside
these functions) gives ``pooled [T, K_a]``, ``l_k(t) = sum_b log p_k(z_t^b | history^b)``, and
``per_sample [T, K_a, B]``. Baselines are never smoothed.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from scipy.special import logsumexp

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.trace import infer, model


def _check_p_stay(p_stay: float) -> float:
    if not 0.0 < p_stay < 1.0:
        raise ValueError(f"p_stay must be in the open interval (0, 1), got {p_stay!r}")
    return float(p_stay)


def _check_loglik(x, name: str, ndim: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != ndim or 0 in x.shape:
        want = "[T, K_a]" if ndim == 2 else "[T, K_a, B]"
        raise ValueError(f"{name} must be a non-empty {ndim}-D array {want}, got shape {x.shape}")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"{name} must hold log-likelihoods (no NaN or +inf)")
    return x


def log_transition(k: int, p_stay: float = 0.9) -> np.ndarray:
    """Log transition matrix of the sticky HMM.

    ``A[i, i] = p_stay`` and ``A[i, j] = (1 - p_stay) / (K - 1)`` for ``j != i``; with a single
    state the chain stays put (``A = [[1]]``).

    Args:
      k: number of states ``K >= 1``.
      p_stay: self-transition probability in ``(0, 1)``.

    Returns:
      ``[K, K]`` float64 ``log A``, rows indexed by the previous state.
    """
    p_stay = _check_p_stay(p_stay)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    if k == 1:
        return np.zeros((1, 1))
    log_a = np.full((k, k), np.log((1.0 - p_stay) / (k - 1)))
    np.fill_diagonal(log_a, np.log(p_stay))
    return log_a


def _one_hot(idx: np.ndarray, k: int) -> np.ndarray:
    return np.eye(k)[idx]  # [T, K]


def hard_switch(pooled, p_stay: float = 0.9) -> np.ndarray:
    """Viterbi path of the sticky HMM, one-hot (NCTRL-hard analogue).

    ``argmax_{s_1..T} log pi(s_1) + sum_t log A[s_{t-1}, s_t] + sum_t pooled[t, s_t]`` with a
    uniform initial distribution ``pi``; ties go to the lower state index.

    Args:
      pooled: ``[T, K_a]`` emission log-likelihoods.
      p_stay: self-transition probability in ``(0, 1)``.

    Returns:
      ``[T, K_a]`` float64 one-hot rows.

    Raises:
      ValueError: for ``p_stay`` outside ``(0, 1)`` or a malformed ``pooled``.
    """
    pooled = _check_loglik(pooled, "pooled", ndim=2)
    t_len, k = pooled.shape
    log_a = log_transition(k, p_stay)  # [K, K]
    delta = pooled[0] - np.log(k)  # [K], best log score of a path ending in each state
    back = np.zeros((t_len, k), dtype=np.int64)  # [T, K] argmax predecessor
    for t in range(1, t_len):
        scores = delta[:, None] + log_a  # [K_prev, K]
        back[t] = np.argmax(scores, axis=0)
        delta = scores[back[t], np.arange(k)] + pooled[t]
    path = np.empty(t_len, dtype=np.int64)
    path[-1] = np.argmax(delta)
    for t in range(t_len - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return _one_hot(path, k)


def soft_hmm(pooled, p_stay: float = 0.9) -> np.ndarray:
    """Posterior marginals ``p(s_t = k | all emissions)`` of the sticky HMM (NCTRL-soft
    analogue), by the forward-backward recursions in log space.

    ``log f_t = pooled_t + logsumexp_i(log f_{t-1}[i] + log A[i, :])`` forwards,
    ``log g_t = logsumexp_j(log A[:, j] + pooled_{t+1}[j] + log g_{t+1}[j])`` backwards, and
    the marginal is ``softmax_k(log f_t + log g_t)``.

    Args:
      pooled: ``[T, K_a]`` emission log-likelihoods.
      p_stay: self-transition probability in ``(0, 1)``.

    Returns:
      ``[T, K_a]`` float64 rows on the simplex.

    Raises:
      ValueError: for ``p_stay`` outside ``(0, 1)`` or a malformed ``pooled``.
    """
    pooled = _check_loglik(pooled, "pooled", ndim=2)
    t_len, k = pooled.shape
    log_a = log_transition(k, p_stay)  # [K, K]
    log_f = np.empty((t_len, k))  # [T, K] forward
    log_f[0] = pooled[0] - np.log(k)
    for t in range(1, t_len):
        log_f[t] = pooled[t] + logsumexp(log_f[t - 1][:, None] + log_a, axis=0)
    log_g = np.zeros((t_len, k))  # [T, K] backward, log 1 at the end
    for t in range(t_len - 2, -1, -1):
        log_g[t] = logsumexp(log_a + (pooled[t + 1] + log_g[t + 1])[None, :], axis=1)
    log_post = log_f + log_g
    return np.exp(log_post - logsumexp(log_post, axis=1, keepdims=True))


def soft_routing(per_sample) -> np.ndarray:
    """Per-sample expert responsibilities, averaged over the ensemble.

    ``r_{t,k,b} = softmax_k(per_sample[t, :, b])`` (a uniform prior over the active experts),
    returned as ``mean_b r_{t,k,b}``.

    Args:
      per_sample: ``[T, K_a, B]`` log-likelihood of each ensemble member under each expert.

    Returns:
      ``[T, K_a]`` float64 rows on the simplex.

    Raises:
      ValueError: for a malformed ``per_sample``.
    """
    per_sample = _check_loglik(per_sample, "per_sample", ndim=3)
    resp = np.exp(per_sample - logsumexp(per_sample, axis=1, keepdims=True))  # [T, K, B]
    return resp.mean(axis=2)


def nearest_centroid(zbar, basis: infer.Basis) -> np.ndarray:
    """One-hot of ``argmin_k ||zbar_t - mu^(k)||`` (the paper's centroid heuristic).

    Args:
      zbar: ``[T, d]`` ensemble-mean latents.
      basis: the :class:`~icml26_jax.trace.infer.Basis` holding the centroids ``mus [K_a, d]``.

    Returns:
      ``[T, K_a]`` float64 one-hot rows; ties go to the lower index.

    Raises:
      ValueError: for a ``zbar`` of the wrong shape.
    """
    mus = np.asarray(basis.mus, dtype=np.float64)  # [K, d]
    zbar = np.asarray(zbar, dtype=np.float64)
    if zbar.ndim != 2 or zbar.shape[1] != mus.shape[1]:
        raise ValueError(f"zbar must have shape [T, d] with d = {mus.shape[1]}, got {zbar.shape}")
    dist2 = np.sum((zbar[:, None, :] - mus[None, :, :]) ** 2, axis=-1)  # [T, K]
    return _one_hot(np.argmin(dist2, axis=1), mus.shape[0])


def moving_average_of(onehot, window: int = 5) -> np.ndarray:
    """The "hard + moving average" diagnostic: :func:`infer.smooth` of a one-hot path.

    Not a baseline (a smoothed switch is no longer discrete); reported apart from the claims.

    Args:
      onehot: ``[T, K_a]`` path, usually :func:`hard_switch`'s output.
      window: half-width of the centred, end-truncated average.

    Returns:
      ``[T, K_a]`` float64 smoothed path.
    """
    return infer.smooth(onehot, window)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _expert_log_probs(graphdef, params, z, active):
    return model.expert_log_probs(graphdef, params, z, active).T  # [B, K_a]


def pooled_loglik(graphdef, params, z, active, mesh=None) -> tuple[np.ndarray, np.ndarray]:
    """Emissions of the discrete-switching baselines from the trained experts.

    Args:
      graphdef, params: a split :class:`model.TraceVAE` (the same one TRACE uses); with a
        ``mesh``, ``params`` replicated on it.
      z: ``[T, B, L + 1, d]`` encoder means of one trajectory ensemble.
      active: the active domains (expert indices), in the order of the estimates' columns.
      mesh: a ``core.mesh.data_mesh``: the ``T * B`` sequences are sharded over its devices
        (``core.mesh.batched``); None computes them on one device.

    Returns:
      ``(pooled [T, K_a], per_sample [T, K_a, B])``, float64: ``per_sample[t, k, b] =
      log p_{active[k]}(z_t^b | history^b)`` and ``pooled = per_sample.sum(-1)``.
    """
    z = np.asarray(z, np.float32)
    if z.ndim != 4:
        raise ValueError(f"z must be [T, B, L + 1, d], got shape {z.shape}")
    t, b = z.shape[:2]
    rows = z.reshape((t * b,) + z.shape[2:])
    active = tuple(int(a) for a in active)
    lp = mesh_lib.batched(lambda zb: _expert_log_probs(graphdef, params, zb, active), t * b,
                          t * b, rows, mesh=mesh)  # [T * B, K_a]
    per = np.asarray(lp, np.float64).reshape(t, b, len(active)).transpose(0, 2, 1)
    return per.sum(axis=-1), per
