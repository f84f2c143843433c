"""Gradient Smoothing: depth-wise smoothing of block-wise optimiser updates (the method).

Equation numbers follow the paper's method section (see the README):

* (1) window operator, radius r, renormalised at the ends:
  ``(M u)_l = 1/|N(l)| sum_{j in N(l)} u_j``, ``N(l) = {j : |j - l| <= r, 1 <= j <= L}``;
* (2) smoothing ``S_a = (1 - a) I + a M``, ``u~ = (S_a (x) I_p) u`` (``plain``);
* (3) ``norm``: ``u~_l <- u~_l ||u_l|| / ||u~_l||``; ``dir``: smooth the unit directions
  ``v_l = u_l / ||u_l||`` and give each block back its own norm;
* (4) the step ``theta_l <- theta_l - eta_t (u~_l + lambda theta_l)``: learning rate and
  decoupled weight decay stay OUTSIDE the smoothing.

``u_l`` is the base optimiser's update of block l before learning-rate scaling and weight
decay (AdamW: m^/(sqrt(v^) + eps); Muon: orthogonalised momentum x width scale; SGD: the
momentum buffer). Blocks are the leaves under ``blocks`` whose leading axis is the depth L
(NNX scan-over-layers stacks them so).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from optax.contrib import MuonDimensionNumbers

from icml26_jax.core.optim import promotion_safe

MODES = ("plain", "norm", "dir")
GRANULARITIES = ("block", "leaf")
BASES = ("sgd", "adamw", "muon")
BLOCKS_KEY = "blocks"
_TINY = 1e-30


def _path_names(path) -> list[str]:
    return [str(getattr(e, "key", getattr(e, "name", getattr(e, "idx", e)))) for e in path]


# --------------------------------------------------------------------------- operators


def window_matrix(depth: int, radius: int = 1) -> np.ndarray:
    """Eq. (1): the renormalised window mean ``M [L, L]`` (rows sum to 1).

    Example: ``window_matrix(4)`` has rows ``[1/2, 1/2, 0, 0]``, ``[1/3, 1/3, 1/3, 0]``,
    ``[0, 1/3, 1/3, 1/3]``, ``[0, 0, 1/2, 1/2]``.
    """
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"depth must be a positive integer, got {depth!r}")
    if isinstance(radius, bool) or not isinstance(radius, (int, np.integer)) or radius < 1:
        raise ValueError(f"radius must be an integer >= 1, got {radius!r}")
    idx = np.arange(depth)
    w = (np.abs(idx[:, None] - idx[None, :]) <= radius).astype(np.float64)
    return w / w.sum(1, keepdims=True)


def permutation_matrix(permutation: Sequence[int]) -> np.ndarray:
    """``P`` with ``(P u)_i = u_{pi(i)}``; validates that ``permutation`` is one."""
    perm = np.asarray(permutation)
    L = perm.shape[0]
    if perm.ndim != 1 or sorted(perm.tolist()) != list(range(L)):
        raise ValueError(f"permutation must be a permutation of 0..L-1, got {permutation!r}")
    P = np.zeros((L, L))
    P[np.arange(L), perm] = 1.0
    return P


def smoothing_matrix(depth: int, alpha: float, radius: int = 1,
                     permutation: Sequence[int] | None = None) -> np.ndarray:
    """Eq. (2): ``S_a = (1 - a) I + a M`` ``[L, L]``; with ``permutation`` pi the
    permuted-depth control ``S_pi = P^T S_a P`` (same spectrum, wrong neighbours)."""
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    S = (1.0 - alpha) * np.eye(depth) + alpha * window_matrix(depth, radius)
    if permutation is not None:
        if len(permutation) != depth:
            raise ValueError(f"permutation has length {len(permutation)}, depth is {depth}")
        P = permutation_matrix(permutation)
        S = P.T @ S @ P
    return S


def default_block_filter(path, leaf, depth: int) -> bool:
    """True for a block leaf: its path contains ``blocks``.

    Raises:
      ValueError: a leaf under ``blocks`` whose leading axis is not ``depth`` (a model that
        is not stacked with scan-over-layers, or a wrong ``depth``).
    """
    if BLOCKS_KEY not in _path_names(path):
        return False
    shape = getattr(leaf, "shape", ())
    if not shape or shape[0] != depth:
        raise ValueError(f"block leaf {jax.tree_util.keystr(path)} has shape {tuple(shape)}; "
                         f"depth smoothing needs its leading axis to be the depth {depth}")
    return True


# --------------------------------------------------------------------------- transformation


def _infer_depth(updates, matrix) -> int:
    if matrix is not None:
        return int(matrix.shape[0])
    for path, x in jax.tree_util.tree_leaves_with_path(updates):
        if BLOCKS_KEY in _path_names(path) and getattr(x, "ndim", 0) >= 1:
            return int(x.shape[0])
    return 0


def _mix(S, x):
    """``(S (x) I) x`` on the leading axis, in x's dtype."""
    return jnp.tensordot(S.astype(x.dtype), x, axes=1)


def _sq_norms(x):
    """Per-block squared norms ``[L]`` of one leaf (float32)."""
    return jnp.sum(jnp.square(x.astype(jnp.float32)).reshape(x.shape[0], -1), axis=1)


def _bcast(v, x):
    return v.reshape((-1,) + (1,) * (x.ndim - 1)).astype(x.dtype)


def _smooth_blocks(blocks: list, S, mode: str, granularity: str) -> list:
    """Applies eqs. (2)-(3) to the list of block leaves (each ``[L, ...]``)."""
    if mode == "plain":
        return [_mix(S, x) for x in blocks]
    if granularity == "block":
        norm = jnp.sqrt(sum(_sq_norms(x) for x in blocks))  # [L], all leaves of a block
        norms = [norm] * len(blocks)
    else:
        norms = [jnp.sqrt(_sq_norms(x)) for x in blocks]
    safe = [jnp.where(n > _TINY, n, 1.0) for n in norms]
    if mode == "norm":
        out = [_mix(S, x) for x in blocks]
    else:  # dir: smooth the unit directions
        out = [_mix(S, x / _bcast(s, x)) for x, s in zip(blocks, safe)]
    if granularity == "block":
        new = jnp.sqrt(sum(_sq_norms(y) for y in out))
        new_norms = [new] * len(out)
    else:
        new_norms = [jnp.sqrt(_sq_norms(y)) for y in out]
    res = []
    for y, n, m in zip(out, norms, new_norms):
        ratio = jnp.where(m > _TINY, n / jnp.where(m > _TINY, m, 1.0), 0.0)
        res.append(y * _bcast(ratio, y))
    return res


def depth_smoothing(alpha: float = 0.2, radius: int = 1, mode: str = "plain",
                    is_block_leaf: Callable[[Any, Any, int], bool] = default_block_filter,
                    norm_granularity: str = "block",
                    permutation: Sequence[int] | None = None,
                    matrix: jax.Array | None = None) -> optax.GradientTransformation:
    """Depth-wise smoothing of block-wise updates (Gradient Smoothing, eqs. 1-3).

    Stateless. Every block leaf ``[L, ...]`` (``is_block_leaf(path, leaf, L)``) is replaced
    by ``S @ leaf`` along its leading (depth) axis; other leaves pass unchanged. Place it
    after the base optimiser's preconditioning and before weight decay and the learning
    rate (see :func:`smoothed_optimizer`).

    Args:
      alpha: smoothing strength a in [0, 1] (0: identity; 1: pure window mean).
      radius: window radius r >= 1 (window 2r + 1).
      mode: ``plain`` (eq. 2), ``norm`` (rescale each block to its unsmoothed norm) or
        ``dir`` (smooth unit directions, keep each block's norm) (eq. 3).
      is_block_leaf: ``(path, leaf, depth) -> bool``; the default selects leaves under
        ``blocks`` and raises a ``ValueError`` if their leading axis is not the depth.
      norm_granularity: ``block`` (norms over all leaves of a block jointly) or ``leaf``.
      permutation: smooth along this fixed order of the blocks (the permuted control).
      matrix: an explicit ``[L, L]`` operator, possibly traced (so alpha and the
        permutation can vary per vmapped replica); overrides alpha/radius/permutation.

    Returns:
      An ``optax.GradientTransformation``.

    References:
      Meng, Sugolov and Papyan, `Gradient Smoothing: Coupling Layer-wise Updates for
      Improved Optimization <https://arxiv.org/abs/2606.30813>`_, ICML 2026.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; allowed: {', '.join(MODES)}")
    if norm_granularity not in GRANULARITIES:
        raise ValueError(f"norm_granularity={norm_granularity!r}; allowed: "
                         f"{', '.join(GRANULARITIES)}")
    if matrix is None:
        alpha = float(alpha)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if isinstance(radius, bool) or not isinstance(radius, (int, np.integer)) or radius < 1:
            raise ValueError(f"radius must be an integer >= 1, got {radius!r}")
    elif getattr(matrix, "ndim", 0) != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"matrix must be square [L, L], got shape {getattr(matrix, 'shape', None)}")

    def update_fn(updates, state, params=None):
        del params
        depth = _infer_depth(updates, matrix)
        if depth == 0:
            return updates, state
        flat, treedef = jax.tree_util.tree_flatten_with_path(updates)
        sel = [i for i, (p, x) in enumerate(flat) if x is not None
               and not isinstance(x, optax.MaskedNode) and is_block_leaf(p, x, depth)]
        if not sel:
            return updates, state
        if matrix is None:
            if alpha == 0.0 and permutation is None:
                return updates, state  # exactly the base optimiser
            S = jnp.asarray(smoothing_matrix(depth, alpha, radius, permutation), jnp.float32)
        else:
            S = jnp.asarray(matrix)
        leaves = [x for _, x in flat]
        new = _smooth_blocks([leaves[i] for i in sel], S, mode, norm_granularity)
        for i, y in zip(sel, new):
            leaves[i] = y
        return jax.tree_util.tree_unflatten(treedef, leaves), state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)


# --------------------------------------------------------------------------- optimisers


def _is_block_kernel(path, leaf) -> bool:
    names = _path_names(path)
    return BLOCKS_KEY in names and "kernel" in names and getattr(leaf, "ndim", 0) == 3


def muon_dimension_numbers(params):
    """Muon dimension numbers: ``MuonDimensionNumbers(reduction_axis=1, output_axis=2)`` for
    scanned block kernels ``[L, d_in, d_out]`` (axis 0, the depth, is a batch axis), None
    for every other leaf (those go to Muon's Adam branch).

    optax's default 2-D rule would send every 3-D scanned kernel to AdamW silently.
    """
    return jax.tree_util.tree_map_with_path(
        lambda p, x: MuonDimensionNumbers(reduction_axis=1, output_axis=2)
        if _is_block_kernel(p, x) else None, params)


def _muon_labels(params):
    return jax.tree_util.tree_map_with_path(
        lambda p, x: "muon" if _is_block_kernel(p, x) else "adam", params)


def _masked_dims(params):
    """Dimension numbers for the Muon branch of a partition (MaskedNode elsewhere)."""
    return jax.tree.map(
        lambda x: optax.MaskedNode() if isinstance(x, optax.MaskedNode)
        else MuonDimensionNumbers(reduction_axis=1, output_axis=2), params,
        is_leaf=lambda x: isinstance(x, optax.MaskedNode))


class _Empty(NamedTuple):
    pass


def width_scale() -> optax.GradientTransformation:
    """Muon's width scale ``sqrt(max(1, fan_out / fan_in))`` for ``[L, d_in, d_out]``
    kernels (what ``optax.contrib.muon`` applies by default)."""
    def update_fn(updates, state, params=None):
        del params

        def one(u):
            if u is None or isinstance(u, optax.MaskedNode):
                return u
            fan_in, fan_out = u.shape[-2], u.shape[-1]
            return u * jnp.asarray(np.sqrt(max(1.0, fan_out / fan_in)), u.dtype)

        return jax.tree.map(one, updates, is_leaf=lambda x: isinstance(x, optax.MaskedNode)), state

    return optax.GradientTransformation(lambda _: _Empty(), update_fn)


def default_wd_mask(params):
    """Weight decay on matrices only: leaves named ``kernel`` or ``embedding``."""
    return jax.tree_util.tree_map_with_path(
        lambda p, _: bool({"kernel", "embedding"} & set(_path_names(p))), params)


def smoothed_optimizer(base: str, learning_rate, *, alpha: float = 0.0, mode: str = "plain",
                       radius: int = 1, weight_decay: float = 0.1, wd_mask=None,
                       b1: float = 0.9, b2: float = 0.95, eps: float = 1e-8,
                       momentum: float = 0.9, sgd_nesterov: bool = False,
                       muon_beta: float = 0.95, muon_nesterov: bool = True, adam_lr=None,
                       muon_dims=None, permutation: Sequence[int] | None = None,
                       matrix: jax.Array | None = None,
                       norm_granularity: str = "block") -> optax.GradientTransformation:
    """A base optimiser with :func:`depth_smoothing` on its block-wise updates (eq. 4).

    * ``adamw``: chain(scale_by_adam, smoothing, add_decayed_weights, scale_by_lr).
    * ``sgd``: chain(trace(momentum, nesterov), smoothing, add_decayed_weights, scale_by_lr).
    * ``muon``: chain(partition{muon: scale_by_muon + width scale, adam: scale_by_adam
      (Nesterov)}, smoothing, add_decayed_weights, partition{muon: lr, adam: adam_lr}).

    Traced under standard dtype promotion (``core.optim.promotion_safe``: optax's Adam
    needs it). With ``alpha = 0`` (and no ``matrix``/``permutation``) each equals optax's own
    ``adamw``, ``sgd`` (with ``weight_decay=0``) and ``contrib.muon`` (tested).

    Args:
      base: ``sgd`` | ``adamw`` | ``muon``.
      learning_rate: float, schedule or (traced) scalar array.
      alpha, mode, radius, permutation, matrix, norm_granularity: see
        :func:`depth_smoothing`.
      weight_decay: decoupled decay lambda (not smoothed).
      wd_mask: pytree/callable mask of decayed leaves; default :func:`default_wd_mask`.
      b1, b2, eps: Adam moments (also Muon's Adam branch).
      momentum, sgd_nesterov: SGD.
      muon_beta, muon_nesterov: Muon momentum; 5 Newton-Schulz steps.
      adam_lr: Muon's Adam-branch learning rate (default ``learning_rate``).
      muon_dims: Muon dimension numbers; default :func:`muon_dimension_numbers`.
    """
    if base not in BASES:
        raise ValueError(f"base={base!r}; allowed: {', '.join(BASES)}")
    smooth = depth_smoothing(alpha, radius, mode, norm_granularity=norm_granularity,
                             permutation=permutation, matrix=matrix)
    mask = default_wd_mask if wd_mask is None else wd_mask
    decay = optax.add_decayed_weights(weight_decay, mask)
    if base == "adamw":
        pre = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)
        return promotion_safe(optax.chain(pre, smooth, decay,
                                          optax.scale_by_learning_rate(learning_rate)))
    if base == "sgd":
        pre = optax.trace(decay=momentum, nesterov=sgd_nesterov)
        return promotion_safe(optax.chain(pre, smooth, decay,
                                          optax.scale_by_learning_rate(learning_rate)))
    if muon_dims is None:
        labels = _muon_labels
        dims = _masked_dims
    else:
        def labels(params):
            d = muon_dims(params) if callable(muon_dims) else muon_dims
            return jax.tree.map(lambda dn, _: "adam" if dn is None else "muon", d, params,
                                is_leaf=lambda x: x is None or isinstance(x, MuonDimensionNumbers))

        def dims(params):
            d = muon_dims(params) if callable(muon_dims) else muon_dims
            return jax.tree.map(
                lambda m, dn: m if isinstance(m, optax.MaskedNode) else dn, params, d,
                is_leaf=lambda x: isinstance(x, optax.MaskedNode))
    pre = optax.partition({
        "muon": optax.chain(
            optax.contrib.scale_by_muon(beta=muon_beta, eps=eps, nesterov=muon_nesterov,
                                        weight_dimension_numbers=dims),
            width_scale()),
        "adam": optax.scale_by_adam(b1=b1, b2=b2, eps=eps, nesterov=muon_nesterov),
    }, labels)
    lr = optax.partition({"muon": optax.scale_by_learning_rate(learning_rate),
                          "adam": optax.scale_by_learning_rate(
                              learning_rate if adam_lr is None else adam_lr)}, labels)
    return promotion_safe(optax.chain(pre, smooth, decay, lr))
