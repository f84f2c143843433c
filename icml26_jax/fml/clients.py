"""One federated round of every method (spec §Method "Round r"), vmapped over clients and seeds.

Layout: every client-side array has leading axes ``[N, S]`` (clients, seeds), flattened to rows
``[N * S]`` and padded to a multiple of the device count for training (``make_flat_round``:
every device trains some clients of some seeds); the global model
and the server's target have a leading ``[S]``. A round is

1. broadcast ``theta^r`` to the clients, fresh optimiser state;
2. ``E`` local epochs of SGD (lr 0.01, momentum 0.9, weight decay 1e-5, batch 20, random crop
   with 2-px padding) on the method's loss — ``jax.vmap`` over clients and seeds of a
   ``lax.scan`` over masked minibatches; round 1 uses CE only for every prototype or manifold
   method (``use_target = 0``), FedProx's proximal term is active from round 1;
3. ``theta^{r+1} = sum_i n_i theta_i / sum_i n_i`` per seed (on every device, after gathering
   the client models when the client x seed rows are sharded: the same summation order on any
   number of devices or processes);
4. clients compute features of their own training data with their updated model (no
   augmentation) and upload the method's summary; the server builds the next target
   (``server`` below; FPL's FINCH runs on the host).

Methods (``METHODS``): ``fedavg`` (CE), ``fedprox`` (CE + mu/2 ||theta - theta^r||^2),
``fedproto`` (CE + MSE to averaged class prototypes), ``fpl`` (CE + cluster-prototype
InfoNCE + MSE to the unbiased prototype), ``fml`` (CE + manifold approximation + separation
losses against the MML-fused global manifold), ``fml_k1`` (the same with one point per class),
``fml_no_mml`` (beta_m = 0).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from icml26_jax.core import mesh as mesh_lib, optim
from icml26_jax.fml import baselines, data, manifolds, model
from icml26_jax.fml.configs import METHODS


class MethodSpec(NamedTuple):
    """What a method is, as static Python values."""

    kind: str  # "ce", "prox", "proto", "fpl", "fml"
    k_m: int = 1
    k_g: int = 1
    beta_m: float = 0.0


def method_spec(method: str, c) -> MethodSpec:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    if method == "fedavg":
        return MethodSpec("ce")
    if method == "fedprox":
        return MethodSpec("prox")
    if method == "fedproto":
        return MethodSpec("proto")
    if method == "fpl":
        return MethodSpec("fpl")
    if method == "fml_k1":
        return MethodSpec("fml", 1, 1, float(c.beta_m))
    if method == "fml_no_mml":
        return MethodSpec("fml", int(c.k_m), int(c.k_g), 0.0)
    return MethodSpec("fml", int(c.k_m), int(c.k_g), float(c.beta_m))


def optimizer(c) -> optax.GradientTransformation:
    """PyTorch SGD with weight decay (added to the gradient before momentum)."""
    return optim.promotion_safe(optax.chain(optax.add_decayed_weights(float(c.weight_decay)),
                                            optax.sgd(float(c.lr), momentum=float(c.momentum))))


def init_target(spec: MethodSpec, c, n_clients: int):
    """The server target of round 1 (zeros; unused because ``use_target = 0``), fixed shapes."""
    C, p = int(c.n_classes), int(c.feat_dim)
    if spec.kind == "proto":
        return (jnp.zeros((C, p)), jnp.zeros((C,), bool))
    if spec.kind == "fpl":
        return (jnp.zeros((C, n_clients, p)), jnp.zeros((C, n_clients), bool), jnp.zeros((C, p)),
                jnp.zeros((C,), bool))
    if spec.kind == "fml":
        return manifolds.GlobalManifold(jnp.zeros((C, spec.k_g, p)), jnp.zeros((C, spec.k_g)))
    return jnp.zeros(())


def _aux_loss(spec: MethodSpec, c, h, y, w, target):
    if spec.kind == "proto":
        protos, present = target
        return baselines.fedproto_loss(h, y, protos, present, w=w, mu=float(c.proto_mu))
    if spec.kind == "fpl":
        cp, cmask, unbiased, present = target
        return baselines.fpl_loss(h, y, cp, cmask, unbiased, w=w, T=float(c.fpl_temp))
    if spec.kind == "fml":
        return (float(c.lam_app) * manifolds.approx_loss(h, y, target, tau=float(c.tau), w=w)
                + float(c.lam_sep) * manifolds.sep_loss(h, y, target, T=float(c.sep_temp), w=w))
    return jnp.zeros(())


def _sq_dist(a, b):
    return sum(jnp.sum((x - y) ** 2) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def local_train(method: str, c, graphdef, tx=None):
    """``fn(global_params, x [n, H, W, 3], y [n], mask [n], key, target, use_target) ->
    params``: one client's E local epochs (spec §Method step 2), pure; vmap it over clients."""
    spec = method_spec(method, c)
    tx = tx or optimizer(c)
    batch, epochs = int(c.batch), int(c.local_epochs)

    def loss_fn(params, global_params, xb, yb, wb, target, use_target):
        h, logits = model.forward(graphdef, params, xb)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, yb)
        denom = jnp.maximum(jnp.sum(wb), 1.0)
        loss = jnp.sum(wb * ce) / denom
        if spec.kind == "prox":
            loss = loss + 0.5 * float(c.prox_mu) * _sq_dist(params, global_params)
        elif spec.kind != "ce":
            loss = loss + use_target * _aux_loss(spec, c, h, yb, wb, target)
        return loss

    def fn(global_params, x, y, mask, key, target, use_target):
        n = x.shape[0]
        if n % batch:
            raise ValueError(f"client arrays must be padded to a multiple of batch={batch}, "
                             f"got {n}")
        nb = n // batch
        k_perm, k_aug = jax.random.split(key)
        perms = jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(k_perm, epochs))
        idx = perms.reshape(epochs * nb, batch)
        aug_keys = jax.random.split(k_aug, epochs * nb)

        def step(carry, inp):
            params, opt = carry
            ids, k = inp
            xb = data.augment(x[ids], k)
            wb = mask[ids].astype(jnp.float32)
            g = jax.grad(loss_fn)(params, global_params, xb, y[ids], wb, target, use_target)
            upd, opt = tx.update(g, opt, params)
            return (optax.apply_updates(params, upd), opt), None

        (params, _), _ = jax.lax.scan(step, (global_params, tx.init(global_params)),
                                      (idx, aug_keys), unroll=int(c.get("unroll", 1)))
        return params

    return fn


def client_summary(spec: MethodSpec, c, graphdef, params, x, y, mask, key):
    """What a client uploads after local training (features of its own data, no augmentation):
    class means of raw h and presence (FedProto, FPL), the compressed manifold (FML)."""
    h = model.features(graphdef, params, x)  # [n, p]
    C = int(c.n_classes)
    if spec.kind in ("proto", "fpl"):
        onehot = jax.nn.one_hot(y, C) * mask[:, None].astype(jnp.float32)  # [n, C]
        count = onehot.sum(0)
        means = (onehot.T @ h) / jnp.maximum(count, 1.0)[:, None]
        return means, count > 0
    if spec.kind == "fml":
        return manifolds.compress(h, y, mask, spec.k_m, key, n_classes=C,
                                  method=str(c.compression) if spec.k_m > 1 else "kmeans")
    return jnp.zeros(())


def server(spec: MethodSpec, c, summaries, key, host_fpl=None):
    """Next round's target from the clients' summaries (leading axis N), one seed."""
    if spec.kind == "proto":
        means, present = summaries
        w = present.astype(jnp.float32)  # [N, C]
        cnt = w.sum(0)
        protos = jnp.einsum("nc,ncp->cp", w, means) / jnp.maximum(cnt, 1.0)[:, None]
        return protos, cnt > 0
    if spec.kind == "fml":
        anchors, mass = summaries  # [N, C, K_m, p], [N, C, K_m]
        fused = manifolds.mml(anchors, mass, spec.beta_m, float(c.tau_a), int(c.mml_iters))
        if c.recompress:
            return manifolds.recompress(fused, mass, spec.k_g, key)
        return manifolds.union(fused, mass)
    return jnp.zeros(())


def fpl_target(summaries) -> tuple:
    """FPL's server on the host, per seed: FINCH over the client prototypes of each class."""
    means, present = mesh_lib.to_host(summaries)  # [N, S, C, p], [N, S, C]
    outs = [baselines.fpl_server(means[:, s], present[:, s]) for s in range(means.shape[1])]
    cp, cm, unb = (np.stack([o[i] for o in outs]) for i in range(3))
    pres = present.any(axis=0)  # [S, C]
    return (jnp.asarray(cp, jnp.float32), jnp.asarray(cm, bool), jnp.asarray(unb, jnp.float32),
            jnp.asarray(pres))


def make_flat_round(method: str, c, graphdef, mesh=None):
    """``flat_round_fn(global_params [S], target [S], use_target, x, y, mask [P, ...], seed [P],
    n [N, S], keys [P]) -> (global_params [S], summaries [N, S, ...])`` (jit it): one round on
    the FLATTENED client x seed rows (row ``i * S + s`` is client ``i`` of seed ``s``), padded
    to ``P >= N * S`` rows so that they shard over every device (``core.mesh.padded_size``).

    Each row trains from its seed's global model and target (``seed`` holds the row's seed
    index); padded rows train too and are dropped before FedAvg and the summaries, so they
    change nothing. With a ``mesh`` (Auto axes, rows sharded over it), the client models and
    summaries are gathered to every device before the weighted mean over clients: the mean
    is then summed in the same order on any number of devices or processes.
    """
    spec = method_spec(method, c)
    over = jax.vmap(local_train(method, c, graphdef), in_axes=(0, 0, 0, 0, 0, 0, None))
    summ = jax.vmap(lambda p, x, y, m, k: client_summary(spec, c, graphdef, p, x, y, m, k))
    gather = ((lambda t: t) if mesh is None else
              (lambda t: jax.lax.with_sharding_constraint(t, NamedSharding(mesh, P()))))

    def flat_round_fn(global_params, target, use_target, x, y, mask, seed, n, keys):
        N, S = n.shape
        k_train = jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys)
        k_sum = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
        take = lambda a: a[seed]  # [S, ...] -> [P, ...]: each row's seed's copy
        params = over(jax.tree.map(take, global_params), x, y, mask, k_train,
                      jax.tree.map(take, target), use_target)  # [P, ...]
        summaries = summ(params, x, y, mask, k_sum)
        unflat = lambda a: a[:N * S].reshape((N, S) + a.shape[1:])  # drops the padded rows
        params, summaries = gather(jax.tree.map(unflat, (params, summaries)))  # [N, S, ...]
        w = n.astype(jnp.float32)  # [N, S]
        new_global = jax.tree.map(
            lambda p: jnp.einsum("ns,ns...->s...", w, p) / w.sum(0).reshape(
                (-1,) + (1,) * (p.ndim - 2)), params)
        return new_global, summaries

    return flat_round_fn


def flatten_clients(a, n_clients: int, n_seeds: int):
    """``[N, S, ...]`` -> the flat rows ``[N * S, ...]`` of :func:`make_flat_round`."""
    return a.reshape((n_clients * n_seeds,) + a.shape[2:])


def seed_index(n_clients: int, n_seeds: int) -> np.ndarray:
    """``[N * S]`` int32: the seed of each flat row (row ``i * S + s`` -> ``s``)."""
    return np.tile(np.arange(n_seeds, dtype=np.int32), n_clients)


def make_round(method: str, c, graphdef):
    """``round_fn(global_params [S], target [S], use_target, x, y, mask, n [N, S, ...], keys
    [N, S]) -> (global_params [S], summaries [N, S, ...])`` (jit it): :func:`make_flat_round`
    on unpadded rows, unsharded. FPL's target is then built on the host (``fpl_target``),
    every other server inside ``server_fn``."""
    spec = method_spec(method, c)
    flat = make_flat_round(method, c, graphdef)

    def round_fn(global_params, target, use_target, x, y, mask, n, keys):
        N, S = n.shape
        f = lambda a: flatten_clients(a, N, S)
        return flat(global_params, target, use_target, f(x), f(y), f(mask),
                    jnp.asarray(seed_index(N, S)), n, f(keys))

    def server_fn(summaries, keys):
        """``summaries [N, S, ...]``, ``keys [S]`` -> target [S]."""
        moved = jax.tree.map(lambda a: jnp.moveaxis(a, 1, 0), summaries)  # [S, N, ...]
        return jax.vmap(lambda s, k: server(spec, c, s, k))(moved, keys)

    return spec, round_fn, server_fn


def evaluate(graphdef, params, x, y) -> jax.Array:
    """Accuracy of the global models ``params [S, ...]`` on their seeds' test sets ``x [S, M, H,
    W, 3]``, ``y [S, M]`` -> ``[S]``."""
    def one(p, xs, ys):
        _, logits = model.forward(graphdef, p, xs)
        return jnp.mean((jnp.argmax(logits, -1) == ys).astype(jnp.float32))
    return jax.vmap(one)(params, x, y)
