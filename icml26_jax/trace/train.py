"""TRACE end to end (spec §Experiment): train the K-expert VAE on pure-domain data, recover
α(t) on trajectory ensembles with TRACE, the discrete-switching baselines and the controls,
the K ablation, and the claims.

``run(config, workdir)`` runs the enabled ``parts``:

- ``main``: a ``K_total = 5`` model trained on pure domains only (AdamW, stratified batches
  ``[K, batch / K, 3, d]``, resumable chunks of ``eval_every`` steps with the validation MCC
  after each); then for every family x mix mode x draw, one ensemble of ``T x 500``
  sequences, encoded once, and every method on it (TRACE, its Euclidean-projection,
  unsmoothed and penalized-LS variants, ``hard_switch``, ``soft_hmm``, ``soft_routing``,
  ``nearest_centroid``, ``hard + moving average``, the oracle on true latents, the estimator on
  raw ``x``, the constant guess, the time-permutation control).
- ``k_ablation``: a ``K_total = 10`` model, complex family, param mode, ``K_active = 2..7``.
- ``data_sweep`` (optional): the oracle over other data seeds.

Randomness: ``jax.random.key(seed)`` split into init / train / ablation keys; evaluation
ensembles from ``np.random.default_rng((seed, 100 + variant, draw))`` (spec §Data).
"""

from __future__ import annotations

import functools
import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging
from flax import nnx

from icml26_jax.core import checkpoint, distributed, mesh as mesh_lib, optim, results
from icml26_jax.core.flags import as_tuple
from icml26_jax.trace import baselines, configs, data, infer, metrics, model, report

PAPER = "trace"
METHODS = ("trace", "trace_euclid", "trace_unsmoothed", "trace_penalized", "hard_switch",
           "soft_hmm", "soft_routing", "nearest_centroid", "hard_ma", "oracle", "raw_x",
           "constant")
DISCRETE = ("hard_switch", "soft_hmm", "soft_routing", "nearest_centroid")
_OPT0 = {"xla_backend_optimization_level": 0}


def normalise_config(c) -> None:
    for k in ("parts", "families", "mix_modes"):
        c[k] = as_tuple(c[k], str, name=k)
    for k in ("abl_k_actives", "seeds", "sweep_seeds"):
        c[k] = as_tuple(c[k], int, name=k)


# ----------------------------------------------------------------------------- training


def _stack_domains(pure: data.PureData, k: int) -> np.ndarray:
    """``x [N, 3, d]`` (domains concatenated) -> ``[K, N / K, 3, d]`` float32."""
    n = len(pure.c) // k
    if not np.array_equal(pure.c, np.repeat(np.arange(k), n)):
        raise ValueError("pure data must hold the K domains in order, equally many each")
    return np.asarray(pure.x, np.float32).reshape(k, n, *pure.x.shape[1:])


def on_mesh(params, mesh):
    """``params`` replicated on every device of ``mesh`` (as they are without a mesh)."""
    if mesh is None:
        return params
    return jax.tree.map(lambda a: mesh_lib.replicate(mesh_lib.to_host(a), mesh), params)


def encode_rows(encode, params, x, mesh=None) -> np.ndarray:
    """Encoder means ``encode(params, x)`` of sequences ``x [..., L + 1, d]`` -> host float32
    ``[..., L + 1, d]``; with a ``mesh`` (``core.mesh.data_mesh``, ``params`` replicated on
    it) the sequences are sharded over its devices (``core.mesh.batched``)."""
    x = np.asarray(x, np.float32)
    rows = x.reshape((-1,) + x.shape[-2:])
    z = mesh_lib.batched(lambda xb: encode(params, xb), len(rows), len(rows), rows, mesh=mesh)
    return np.asarray(z).reshape(x.shape[:-2] + z.shape[1:])


def validation_mcc(graphdef, params, val: data.PureData, encode, mesh=None) -> float:
    """MCC of the encoder means against the true latents over every step (spec §Metrics)."""
    z = np.asarray(encode_rows(encode, on_mesh(params, mesh), val.x, mesh), np.float64)
    d = z.shape[-1]
    return metrics.mcc(z.reshape(-1, d), np.asarray(val.y, np.float64).reshape(-1, d))


def init_model(c, k: int, k_init):
    """``(graphdef, params)`` of a fresh :class:`model.TraceVAE` with ``k`` experts."""
    net = model.TraceVAE(k, c.d, c.lags, c.hidden, c.expert_hidden,
                         rngs=nnx.Rngs(params=k_init))
    return nnx.split(net, nnx.Param)


def make_tx(c) -> optax.GradientTransformation:
    """AdamW at ``config.lr``, traced under standard dtype promotion (``promotion_safe``)."""
    return optim.promotion_safe(optax.adamw(c.lr, b1=0.9, b2=0.999,
                                            weight_decay=c.weight_decay))


def encoder(graphdef):
    """jit(params, x [..., L + 1, d]) -> encoder means."""
    return jax.jit(lambda p, x: model.encode_mean(graphdef, p, x))


def train_programs(c, graphdef, tx, k: int, batch: int, steps: int):
    """``(chunk, tail)``: jit((params, opt_state), start, xs [K, n, 3, d], key) -> the state
    after ``eval_every`` steps (``chunk``) or after the ``steps % eval_every`` last ones
    (``tail``), and their losses. Step i draws ``batch / k`` sequences per domain with
    ``fold_in(key, i)``. The data and the key are jit arguments: closed over, the data would
    be baked into the program as a constant that grows with ``n_per_domain``."""
    m = batch // k

    def one(xs, key, carry, i):
        p, opt = carry
        k_idx, k_eps = jax.random.split(jax.random.fold_in(key, i))
        idx = jax.random.randint(k_idx, (k, m), 0, xs.shape[1])
        xb = jnp.take_along_axis(xs, idx[:, :, None, None], axis=1)  # [K, m, 3, d]
        (loss, _), g = jax.value_and_grad(model.loss_fn, has_aux=True)(
            p, graphdef, xb, k_eps, c.beta, c.gamma)
        upd, opt = tx.update(g, opt, p)
        return (optax.apply_updates(p, upd), opt), loss

    @functools.partial(jax.jit, donate_argnums=0)
    def chunk(carry, start, xs, key):
        n = int(c.eval_every)
        return jax.lax.scan(functools.partial(one, xs, key), carry, start + jnp.arange(n))

    @functools.partial(jax.jit, donate_argnums=0)
    def tail(carry, start, xs, key):  # the last, shorter chunk (steps % eval_every)
        return jax.lax.scan(functools.partial(one, xs, key), carry,
                            start + jnp.arange(steps % int(c.eval_every)))

    return chunk, tail


def train_model(c, k: int, batch: int, steps: int, pure: data.PureData, val: data.PureData,
                key, directory: str, fingerprint: int, name: str):
    """Trains a :class:`model.TraceVAE` with ``k`` experts on pure-domain data (resumable).

    Returns ``(graphdef, params, curve)`` with ``curve = {"step": [...], "mcc": [...],
    "loss": [...]}`` (MCC at init and after every chunk of ``eval_every`` steps).
    """
    k_init, k_train = jax.random.split(key)
    graphdef, params = init_model(c, k, k_init)
    tx = make_tx(c)
    xs = jnp.asarray(_stack_domains(pure, k))  # [K, n, 3, d]
    encode = encoder(graphdef)
    mesh = mesh_lib.data_mesh()
    chunk, tail = train_programs(c, graphdef, tx, k, batch, steps)

    n_chunks = -(-steps // int(c.eval_every))
    logs = {"mcc": np.full(n_chunks + 1, np.nan), "loss": np.full(n_chunks + 1, np.nan),
            "step": np.zeros(n_chunks + 1)}
    logs["mcc"][0] = validation_mcc(graphdef, params, val, encode, mesh)

    def advance(state, lg, start, n):
        state = jax.tree.map(jnp.asarray, state)  # a host state (fresh or restored)
        state, losses = (chunk if n == int(c.eval_every) else tail)(state, jnp.int32(start),
                                                                    xs, k_train)
        j = -(-(start + n) // int(c.eval_every))
        lg["step"][j] = start + n
        lg["loss"][j] = float(np.mean(np.asarray(losses)))
        lg["mcc"][j] = validation_mcc(graphdef, state[0], val, encode, mesh)
        # Back to the host: the checkpoint holds host arrays, which process 0 alone writes
        # (orbax writes per-process metadata for device arrays).
        return mesh_lib.to_host(state), (f"loss {lg['loss'][j]:.3f}, validation MCC "
                                         f"{lg['mcc'][j]:.3f}")

    state = (params, tx.init(params))
    if steps:
        state, logs = checkpoint.run_chunks(directory, fingerprint=fingerprint, state=state,
                                            logs=logs, steps=steps, chunk=int(c.eval_every),
                                            advance=advance, name=name)
    curve = {k_: np.asarray(v).tolist() for k_, v in logs.items()}
    return graphdef, state[0], curve


# ----------------------------------------------------------------------------- evaluation


class Encoded(NamedTuple):
    """What the estimators need of one ensemble ``[T, B, 3, d]``: observations ``x``, true
    latents ``y`` and encoder means ``z`` (None without a model)."""

    x: np.ndarray
    y: np.ndarray
    z: np.ndarray | None

    def zbar(self, space: str) -> np.ndarray:
        """Ensemble mean of the last step, ``[T, d]`` float64."""
        return np.asarray(getattr(self, space)[:, :, -1, :], np.float64).mean(axis=1)


def bases(pure: data.PureData, z_pure: np.ndarray, active) -> dict:
    """Centroid bases in learned, true and raw space (spec §Method TRACE inference 1)."""
    last = lambda a: np.asarray(a[:, -1, :], np.float64)
    return {"z": infer.centroid_basis(last(z_pure), pure.c, active),
            "y": infer.centroid_basis(last(pure.y), pure.c, active),
            "x": infer.centroid_basis(last(pure.x), pure.c, active)}


def estimate(c, enc: Encoded, basis: dict, loglik, T: int, methods=METHODS) -> dict:
    """``alpha_hat [T, K_a]`` of each of ``methods`` (TRACE, its variants, the baselines on the
    same encoder and experts, the oracle and raw-x controls) on one ensemble."""
    zbar = enc.zbar("z")
    out = {}
    raw = infer.solve_alpha(zbar, basis["z"], c.projection)
    out["trace"] = infer.smooth(raw, c.window)
    if "trace_euclid" in methods:
        out["trace_euclid"] = infer.smooth(infer.solve_alpha(zbar, basis["z"], "euclid"),
                                           c.window)
    if "trace_unsmoothed" in methods:
        out["trace_unsmoothed"] = raw
    if "trace_penalized" in methods:
        out["trace_penalized"] = infer.penalized_ls(zbar, basis["z"],
                                                    infer.lambda_of(c.lam_c, T), c.ls_steps)
    if {"hard_switch", "soft_hmm", "soft_routing", "hard_ma"} & set(methods):
        pooled, per_sample = loglik(enc.z)
        hard = baselines.hard_switch(pooled, c.p_stay)
        out["hard_switch"] = hard
        out["soft_hmm"] = baselines.soft_hmm(pooled, c.p_stay)
        out["soft_routing"] = baselines.soft_routing(per_sample)
        out["hard_ma"] = infer.smooth(hard, c.window)
    if "nearest_centroid" in methods:
        out["nearest_centroid"] = baselines.nearest_centroid(zbar, basis["z"])
    out["oracle"] = infer.smooth(infer.solve_alpha(enc.zbar("y"), basis["y"], c.projection),
                                 c.window)
    if "raw_x" in methods:
        out["raw_x"] = infer.smooth(infer.solve_alpha(enc.zbar("x"), basis["x"], c.projection),
                                    c.window)
    return {k: v for k, v in out.items() if k in methods}


def score(alpha_hat: np.ndarray, alpha: np.ndarray, mp: data.MechParams, active) -> dict:
    return {"corr": metrics.traj_corr(alpha_hat, alpha),
            "w_r2": metrics.w_r2(alpha_hat, alpha, mp, active),
            "w_corr_full": metrics.w_corr_full(alpha_hat, alpha, mp, active),
            "dw_centred_corr": metrics.dw_centred_corr(alpha_hat, alpha, mp, active),
            "interior_mae": metrics.interior_mae(alpha_hat, alpha)}


def evaluate(c, mp, pure, graphdef, params, active, families, mix_modes, draws,
             with_model=True, methods=METHODS) -> dict:
    """Per family x mode: the mean over draws of every method's scores, the trajectories of
    the first draw, and the permutation control. ``with_model=False`` evaluates only the
    estimator on true latents and raw observations (no encoder)."""
    T = int(c.T)
    encode = encoder(graphdef) if with_model else None
    mesh = mesh_lib.data_mesh()  # sequences of every encoding sharded over every device
    if with_model:
        params = on_mesh(params, mesh)
        z_pure = encode_rows(encode, params, pure.x, mesh)
        basis = bases(pure, z_pure, active)
        experts = tuple(int(a) for a in active)
        loglik = lambda z: baselines.pooled_loglik(graphdef, params, z, experts, mesh)
    else:
        basis = bases(pure, np.asarray(pure.y), active)
    out = {"sigma_min": {s: infer.sigma_min(b) for s, b in basis.items()}}
    if not with_model:
        out["sigma_min"].pop("z")
    for fi, family in enumerate(families):
        alpha = data.trajectory(family, T, len(active))
        for mi, mode in enumerate(mix_modes):
            scores, perm, first = [], [], None
            for draw in range(draws):
                rng = np.random.default_rng((int(c.seed), 100 + 10 * fi + mi, draw))
                x, y = data.sample_trajectory(rng, mp, alpha, active, batch=int(c.ensemble),
                                              mix_mode=mode)
                if with_model:
                    z = encode_rows(encode, params, x, mesh)
                    enc = Encoded(x, y, z)
                    est = estimate(c, enc, basis, loglik, T, methods)
                else:
                    enc = Encoded(x, y, None)
                    est = {"oracle": infer.smooth(infer.solve_alpha(
                        enc.zbar("y"), basis["y"], c.projection), c.window),
                        "raw_x": infer.smooth(infer.solve_alpha(
                            enc.zbar("x"), basis["x"], c.projection), c.window)}
                est["constant"] = np.broadcast_to(alpha.mean(0), alpha.shape).copy()
                scores.append({k: score(v, alpha, mp, active) for k, v in est.items()})
                lead = "trace" if with_model else "oracle"
                perm.append(metrics.permutation_control(est[lead], alpha, seed=draw,
                                                        n=int(c.permutations)))
                if draw == 0:
                    first = {k: np.asarray(v).tolist() for k, v in est.items()}
            cell = {meth: {k: float(np.mean([s[meth][k] for s in scores]))
                           for k in scores[0][meth]} for meth in scores[0]}
            for meth in cell:
                cell[meth]["corr_sd"] = float(np.std([s[meth]["corr"] for s in scores]))
                cell[meth]["w_r2_sd"] = float(np.std([s[meth]["w_r2"] for s in scores]))
            nv = metrics.nearest_vertex(alpha)
            out[f"{family}/{mode}"] = {
                "methods": cell, "permutation_corr": float(np.mean(perm)),
                "onehot_bound_mae": metrics.interior_mae(nv, alpha),
                "onehot_bound_w_r2": metrics.w_r2(nv, alpha, mp, active),
                "interior_fraction": float(np.mean(alpha.max(axis=1) <= 0.9)),
                "alpha_true": alpha.tolist(), "alpha_hat": first}
    return out


def _pure_sets(c, mp, k):
    train = data.sample_pure(np.random.default_rng((int(c.data_seed), 1)), mp, int(c.n_per_domain))
    val = data.sample_pure(np.random.default_rng((int(c.data_seed), 2)), mp,
                           -(-int(c.n_val) // k))
    return train, val


def _active_set(pure: data.PureData, k: int, k_active: int) -> list[int]:
    means = np.stack([np.asarray(pure.x[pure.c == j, -1, :], np.float64).mean(0)
                      for j in range(k)])
    return [int(a) for a in data.select_active(means, k_active)]


def part_main(c, workdir: str, key) -> dict:
    t0 = time.time()
    k = int(c.k_total)
    mp = data.make_mechanisms(int(c.data_seed), int(c.d), k)
    pure, val = _pure_sets(c, mp, k)
    active = _active_set(pure, k, int(c.k_active))
    logging.info("main: K_total %d, active domains %s, edges %s", k, active, mp.edges.tolist())
    fp = checkpoint.config_fingerprint({kk: c[kk] for kk in (
        "seed", "data_seed", "d", "k_total", "n_per_domain", "n_val", "hidden", "expert_hidden",
        "beta", "gamma", "lr", "weight_decay", "batch", "steps", "eval_every")})
    graphdef, params, curve = train_model(c, k, int(c.batch), int(c.steps), pure, val, key,
                                          os.path.join(workdir, "checkpoints", "main"), fp,
                                          "main")
    t_train = time.time() - t0
    ev = evaluate(c, mp, pure, graphdef, params, active, c.families, c.mix_modes, int(c.draws))
    return {"active": active, "edges": mp.edges.tolist(), "mcc_curve": curve,
            "mcc_init": curve["mcc"][0], "mcc": curve["mcc"][-1], "eval": ev,
            "train_s": t_train, "eval_s": time.time() - t0 - t_train}


def part_k_ablation(c, workdir: str, key) -> dict:
    t0 = time.time()
    k = int(c.abl_k_total)
    mp = data.make_mechanisms(int(c.data_seed), int(c.d), k)
    pure, val = _pure_sets(c, mp, k)
    learned = bool(c.abl_learned)
    graphdef = params = None
    curve = None
    if learned:
        fp = checkpoint.config_fingerprint({kk: c[kk] for kk in (
            "seed", "data_seed", "d", "abl_k_total", "n_per_domain", "n_val", "hidden",
            "expert_hidden", "beta", "gamma", "lr", "weight_decay", "abl_batch", "abl_steps",
            "eval_every")})
        graphdef, params, curve = train_model(c, k, int(c.abl_batch), int(c.abl_steps), pure,
                                              val, key, os.path.join(workdir, "checkpoints",
                                                                     "k_ablation"), fp,
                                              "k_ablation")
    rows = []
    for ka in c.abl_k_actives:
        active = _active_set(pure, k, int(ka))
        ev = evaluate(c, mp, pure, graphdef, params, active, ("complex",), ("param",),
                      int(c.abl_draws), with_model=learned, methods=("trace", "oracle"))
        meths = ev["complex/param"]["methods"]
        lead = "trace" if learned else "oracle"
        rows.append({"k_active": int(ka), "active": active, "corr": meths[lead]["corr"],
                     "w_r2": meths[lead]["w_r2"], "oracle_corr": meths["oracle"]["corr"],
                     "oracle_w_r2": meths["oracle"]["w_r2"],
                     "sigma_min": ev["sigma_min"]})
        logging.info("k_ablation K_active %d: corr %.3f, w_r2 %.3f (oracle corr %.3f), "
                     "sigma_min %s", ka, rows[-1]["corr"], rows[-1]["w_r2"],
                     rows[-1]["oracle_corr"], {s: round(v, 4) for s, v in
                                               ev["sigma_min"].items()})
    return {"learned": learned, "rows": rows, "mcc": curve["mcc"][-1] if curve else None,
            "mcc_curve": curve, "runtime_s": time.time() - t0}


def part_data_sweep(c) -> dict:
    """The oracle (true latents) over ``sweep_seeds`` data seeds: the draw matters (spec §Data)."""
    rows = []
    for ds in c.sweep_seeds:
        cc = c.copy_and_resolve_references()
        cc.data_seed = int(ds)
        cc.n_per_domain = min(int(c.n_per_domain), 4000)
        mp = data.make_mechanisms(int(ds), int(c.d), int(c.k_total))
        pure, _ = _pure_sets(cc, mp, int(c.k_total))
        active = _active_set(pure, int(c.k_total), int(c.k_active))
        ev = evaluate(cc, mp, pure, None, None, active, c.families, ("param",), 1,
                      with_model=False)
        corr = float(np.mean([ev[f"{f}/param"]["methods"]["oracle"]["corr"]
                              for f in c.families]))
        rows.append({"data_seed": int(ds), "oracle_corr": corr,
                     "sigma_min_true": ev["sigma_min"]["y"]})
    corrs = [r["oracle_corr"] for r in rows]
    return {"rows": rows, "min": float(np.min(corrs)), "max": float(np.max(corrs)),
            "below_0.9": int(np.sum(np.asarray(corrs) < 0.9))}


def run(c: ml_collections.ConfigDict, workdir: str) -> dict:
    """Runs the experiment of config ``c`` in ``workdir``; returns the results dict."""
    normalise_config(c)
    configs.validate(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    k_main, k_abl = jax.random.split(jax.random.key(int(c.seed)))
    m = {"runtime_s": {}}
    if "main" in c.parts:
        m["main"] = part_main(c, workdir, k_main)
        m["runtime_s"]["main"] = time.time() - t_start
    if "k_ablation" in c.parts:
        t0 = time.time()
        m["k_ablation"] = part_k_ablation(c, workdir, k_abl)
        m["runtime_s"]["k_ablation"] = time.time() - t0
    if "data_sweep" in c.parts:
        t0 = time.time()
        m["data_sweep"] = part_data_sweep(c)
        m["runtime_s"]["data_sweep"] = time.time() - t0
    summary = report.summarise(c, m)
    claims = report.claims(c, summary, m)
    figures = report.plots(c, m, workdir) if distributed.is_primary() else []
    runtime = time.time() - t_start
    m["summary"] = summary
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed, config=c,
                                 metrics=m, claims=claims, runtime_s=runtime, figures=figures)
    if distributed.is_primary():
        print(report.table(c, summary, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": m,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}
