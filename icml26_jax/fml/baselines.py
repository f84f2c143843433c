"""The baselines of spec §Baselines, implemented for real: FedAvg, FedProx, FedProto and FPL.

- FedAvg (McMahan et al. 2017): ``theta^{r+1} = Σ_i n_i theta_i / Σ_i n_i``.
- FedProx (Li et al. 2020): CE + (mu/2) ||theta - theta^r||^2, mu = 0.01.
- FedProto (Tan et al. 2022), in the RethinkFL port: the server prototype of class c is the
  mean, over the clients holding c, of their class means of raw features; the local loss adds
  ``mu · MSE(h, P_y)`` (mu = 1).
- FPL (Huang et al., CVPR 2023, https://github.com/WenkeHuang/RethinkFL ``models/fpl.py``):
  per class, FINCH (cosine) on the client prototypes; cluster prototypes are member means and
  the unbiased prototype is their mean; the local loss adds the cluster-prototype InfoNCE
  (T = 0.02) and ``MSE(h, P̄_y)``.

Reading of RethinkFL, followed here:
- MSE terms are ``nn.MSELoss`` on raw features, i.e. a mean over feature elements; a sample
  whose class has no server prototype contributes 0 but still counts in the batch mean
  (FedProto copies ``f`` into the target for such samples; FPL divides the summed per-sample
  loss by the batch size). With a mask ``w`` the mean is ``Σ_b w_b ℓ_b / Σ_b w_b``.
- FPL's InfoNCE (``calculate_infonce``) puts the *sum* over positives in the numerator:
  ``-log Σ_pos e^{s/T} / (Σ_pos e^{s/T} + Σ_neg e^{s/T})`` with cosine similarities s. The
  per-positive average form is available as ``per_positive=True``.
- FINCH (``utils/finch.py``) keeps the first partition even when it is a single cluster and
  drops a later one-cluster partition; FPL then takes the last kept partition. So a class
  held by 2 clients (each the other's first neighbour) gets one cluster (their mean), and a
  class held by one client gets that client's prototype.

FedAvg, FedProx, FedProto and the losses are pure jit-able JAX; FINCH and the FPL server run
in numpy on the host (m <= N points per class); ``fpl_server_callback`` wraps the latter in a
``jax.pure_callback`` for use under ``jit`` / ``vmap``.
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from icml26_jax.fml.manifolds import _masked_lse, _weighted_mean, normalise


def fedavg_aggregate(params, n: jax.Array):
    """FedAvg aggregation ``Σ_i n_i theta_i / Σ_i n_i`` (spec §Method "Round r", step 3).

    Args:
      params: pytree whose float leaves have a leading client axis [N, ...].
      n: [N] sample counts (int or float).

    Returns:
      The pytree without the client axis.
    """
    wt = n / jnp.sum(n)  # [N]

    def avg(x):
        if x.shape[:1] != n.shape:
            raise ValueError(f"params leaves need a leading client axis of size {n.shape[0]} "
                             f"(n), got shape {x.shape}")
        return jnp.tensordot(wt.astype(x.dtype), x, axes=1)

    return jax.tree.map(avg, params)


def prox_penalty(params, global_params, mu) -> jax.Array:
    """FedProx proximal term ``(mu / 2) ||theta - theta^r||^2`` summed over all leaves.

    Args:
      params: a client's pytree theta.
      global_params: the round's global pytree theta^r (same structure).
      mu: proximal weight (0.01 in the spec).

    Returns:
      Scalar penalty.
    """
    sq = [jnp.sum((a - b) ** 2) for a, b in zip(jax.tree.leaves(params),
                                                  jax.tree.leaves(global_params), strict=True)]
    return 0.5 * mu * functools.reduce(operator.add, sq)


def fedproto_server(h: jax.Array, y: jax.Array, mask: jax.Array, n_classes: int
                    ) -> tuple[jax.Array, jax.Array]:
    """FedProto's server prototypes (RethinkFL ``proto_aggregation``).

    Client i's prototype of class c is the mean of its raw features of class c; P_c is the
    unweighted mean over the clients that have class c.

    Args:
      h: [N, n, p] raw features of every client; y: [N, n] labels; mask: [N, n] (padding).
      n_classes: C (static).

    Returns:
      ``(protos [C, p], present [C] bool)``; protos are 0 for a class no client has.
    """
    onehot = jax.nn.one_hot(y, n_classes, dtype=h.dtype) * mask.astype(h.dtype)[..., None]
    count = onehot.sum(1)  # [N, C]
    means = jnp.einsum("inc,inp->icp", onehot, h) / jnp.maximum(count, 1.0)[..., None]
    has = (count > 0).astype(h.dtype)  # [N, C]
    n_has = has.sum(0)  # [C]
    protos = jnp.einsum("ic,icp->cp", has, means) / jnp.maximum(n_has, 1.0)[:, None]
    return protos, n_has > 0


def fedproto_loss(h: jax.Array, y: jax.Array, protos: jax.Array, present: jax.Array,
                  w: jax.Array | None = None, mu=1.0) -> jax.Array:
    """FedProto's regulariser ``mu · MSE(h, P_y)`` on raw features (RethinkFL form).

    ``ℓ_b = mean_d (h_bd - P_{y_b, d})^2`` if class y_b has a prototype, else 0; the loss is
    ``mu · Σ_b w_b ℓ_b / Σ_b w_b`` (plain mean without ``w``).

    Args:
      h: [B, p] raw features; y: [B] labels.
      protos: [C, p] server prototypes; present: [C] bool.
      w: optional [B] weights / mask.
      mu: weight (1 in the spec).

    Returns:
      Scalar loss.
    """
    per = jnp.mean((h - protos.astype(h.dtype)[y]) ** 2, axis=-1)  # [B]
    return mu * _weighted_mean(jnp.where(present[y], per, 0.0), w)


def _first_neighbours(x: np.ndarray) -> np.ndarray:
    """kappa_i = argmax_{j != i} cos(x_i, x_j) (ties: the lowest index)."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    xh = x / np.maximum(norm, 1e-12)
    sim = xh @ xh.T
    np.fill_diagonal(sim, -np.inf)
    return np.argmax(sim, axis=1)


def _cluster_means(x: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """[k, p] means of the original points per label."""
    sums = np.zeros((k, x.shape[1]), x.dtype)
    np.add.at(sums, labels, x)
    return sums / np.bincount(labels, minlength=k)[:, None]


def finch(x) -> list[np.ndarray]:
    """FINCH (Sarfraz et al., CVPR 2019) with cosine first neighbours, in numpy.

    One level: first neighbours kappa; the adjacency ``A_ij = 1 if j = kappa_i or
    i = kappa_j or kappa_i = kappa_j`` (the nonzero pattern of ``(K + I)(K + I)^T`` off the
    diagonal, K the first-neighbour matrix); its connected components are the clusters. The
    next level repeats this on the cluster means (means of the *original* member points, as
    in the authors' code), until one cluster remains or nothing merges.

    Args:
      x: [m, p] points (m >= 1).

    Returns:
      Every level's labels ``[m]`` in terms of the original points, finest first; the last
      level is the single cluster when the recursion reaches it. One point gives
      ``[array([0])]``.
    """
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"x must be [m, p] with m >= 1, got shape {x.shape}")
    m = x.shape[0]
    if m == 1:
        return [np.zeros(1, np.int64)]
    levels: list[np.ndarray] = []
    labels = np.arange(m)
    pts = x
    while pts.shape[0] > 1:
        k = pts.shape[0]
        kappa = _first_neighbours(pts)
        first = sp.csr_matrix((np.ones(k), (np.arange(k), kappa)), shape=(k, k))
        b = first + sp.eye(k, format="csr")
        adj = (b @ b.T).tolil()
        adj.setdiag(0)
        n_comp, comp = csgraph.connected_components(adj.tocsr(), directed=False)
        if n_comp == k:  # no merge (cannot happen for k >= 2, kept as a guard)
            break
        labels = comp[labels]
        levels.append(labels.copy())
        pts = _cluster_means(x, labels, n_comp)
    return levels


def fpl_server(client_protos, present) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FPL's server (RethinkFL ``proto_aggregation``), host numpy.

    Per class c, over the clients holding it: FINCH on their prototypes; the partition used
    is the coarsest one with more than one cluster; if every level is a single cluster (two
    clients, each the other's first neighbour) that single cluster is used, and one client's
    prototype is its own cluster. Cluster prototypes P_c^j are member means (raw features);
    the unbiased prototype P̄_c is their unweighted mean.

    Args:
      client_protos: [N, C, p] client class means of raw features.
      present: [N, C] bool, client i holds class c.

    Returns:
      ``(cluster_protos [C, N, p], cluster_mask [C, N] bool, unbiased [C, p])``, padded to
      J_max = N clusters (zeros and False beyond a class's clusters; all zeros / False for a
      class no client holds). Floats keep the dtype of ``client_protos``.
    """
    protos = np.asarray(client_protos)
    present = np.asarray(present).astype(bool)
    if protos.ndim != 3 or present.shape != protos.shape[:2]:
        raise ValueError(f"client_protos must be [N, C, p] and present [N, C], got "
                         f"{protos.shape} and {present.shape}")
    N, C, p = protos.shape
    cluster_protos = np.zeros((C, N, p), protos.dtype)
    cluster_mask = np.zeros((C, N), bool)
    unbiased = np.zeros((C, p), protos.dtype)
    for c in range(C):  # host loop over classes: FINCH is a graph algorithm on <= N points
        pts = protos[present[:, c], c].astype(np.float64)  # [m, p]
        if pts.shape[0] == 0:
            continue
        levels = finch(pts)
        multi = [lab for lab in levels if lab.max() > 0]
        labels = multi[-1] if multi else levels[0]
        j = int(labels.max()) + 1
        means = _cluster_means(pts, labels, j)  # [j, p]
        cluster_protos[c, :j] = means
        cluster_mask[c, :j] = True
        unbiased[c] = means.mean(0)
    return cluster_protos, cluster_mask, unbiased


def fpl_server_callback(client_protos: jax.Array, present: jax.Array
                        ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``fpl_server`` as a ``jax.pure_callback`` (static output shapes), usable under
    ``jit`` and ``vmap`` (sequential over mapped axes). Same arguments and returns."""
    N, C, p = client_protos.shape
    shapes = (jax.ShapeDtypeStruct((C, N, p), client_protos.dtype),
              jax.ShapeDtypeStruct((C, N), jnp.bool_),
              jax.ShapeDtypeStruct((C, p), client_protos.dtype))
    return jax.pure_callback(fpl_server, shapes, client_protos, present,
                             vmap_method="sequential")


def fpl_loss(h: jax.Array, y: jax.Array, cluster_protos: jax.Array, cluster_mask: jax.Array,
             unbiased: jax.Array, w: jax.Array | None = None, T=0.02,
             per_positive: bool = False) -> jax.Array:
    """FPL's regulariser: cluster-prototype InfoNCE + MSE to the unbiased prototype.

    With s_{c,j} = cos(h, P_c^j) / T over the valid cluster prototypes, positives P_y^j and
    negatives P_{c != y}^j (RethinkFL ``calculate_infonce``):

        ℓ_info = -log Σ_pos e^{s} / (Σ_pos e^{s} + Σ_neg e^{s})                (default)
        ℓ_info = mean_pos [-log e^{s_pos} / (e^{s_pos} + Σ_neg e^{s})]        (per_positive)
        ℓ_b = ℓ_info + mean_d (h_bd - P̄_{y_b, d})^2   if class y_b has clusters, else 0

    and the loss is ``Σ_b w_b ℓ_b / Σ_b w_b`` (plain mean without ``w``).

    Args:
      h: [B, p] raw features; y: [B] labels.
      cluster_protos: [C, J, p]; cluster_mask: [C, J] bool; unbiased: [C, p]
        (``fpl_server`` output).
      w: optional [B] weights / mask.
      T: InfoNCE temperature (0.02 in FPL).
      per_positive: use the per-positive average form instead of RethinkFL's.

    Returns:
      Scalar loss.
    """
    if isinstance(T, (int, float)) and not T > 0:
        raise ValueError(f"T must be > 0, got {T!r}")
    C = cluster_protos.shape[0]
    dtype = h.dtype
    s = jnp.einsum("bp,cjp->bcj", normalise(h), normalise(cluster_protos.astype(dtype))) / T
    valid = cluster_mask.astype(bool)[None]  # [1, C, J]
    own = (y[:, None] == jnp.arange(C, dtype=y.dtype)[None, :])[:, :, None]  # [B, C, 1]
    pos = valid & own  # [B, C, J]
    if per_positive:
        lse_neg, _ = _masked_lse(s, valid & ~own, axis=(1, 2))  # [B]; 0 / unused if none
        has_neg = jnp.any(valid & ~own, axis=(1, 2))
        neg = jnp.where(has_neg, lse_neg, -jnp.inf)[:, None, None]
        term = jnp.logaddexp(s, neg) - s  # [B, C, J]
        n_pos = jnp.sum(pos, axis=(1, 2))
        has = n_pos > 0
        info = jnp.sum(jnp.where(pos, term, 0.0), axis=(1, 2)) / jnp.maximum(n_pos, 1).astype(
            dtype)
    else:
        lse_all, _ = _masked_lse(s, jnp.broadcast_to(valid, pos.shape), axis=(1, 2))
        lse_pos, has = _masked_lse(s, pos, axis=(1, 2))
        info = lse_all - lse_pos
    mse = jnp.mean((h - unbiased.astype(dtype)[y]) ** 2, axis=-1)  # [B]
    return _weighted_mean(jnp.where(has, info + mse, 0.0), w)
