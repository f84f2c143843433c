"""FML (reconstructed from the abstract) against FedAvg, FedProx, FedProto and FPL on the
digits-like domain suite (spec §Experiment).

``run(config, workdir)``: for every method, ``num_seeds`` seeds run at once (vmapped; seed s
has its own data split, client assignment and initialisation, shared by all methods, and the
same round keys for every method). Clients x seeds are the leading axis of params, data and
keys, flattened to rows, padded to a multiple of the device count and sharded over a ``USERS``
mesh of every device when ``shard_clients`` (``place``). Each method trains in resumable
chunks of ``eval_every`` rounds (orbax); the global model is evaluated on every domain's test
set every ``eval_every`` rounds; the final accuracy is the mean of the last ``final_evals``
evaluations, never the best round.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from icml26_jax.core import checkpoint, distributed, mesh as mesh_lib, results
from icml26_jax.core.flags import as_tuple
from icml26_jax.fml import clients, configs, data, model, report

PAPER = "fml"


def normalise_config(c) -> None:
    c.methods = as_tuple(c.methods, str, name="methods")
    for k in ("domain_counts", "channels", "seeds"):
        c[k] = as_tuple(c[k], int, name=k)


def seed_list(c) -> list[int]:
    return [int(c.seed) + i for i in range(int(c.num_seeds))]


def make_data(c) -> list:
    """One ``FedData`` per seed."""
    return [data.make_digits_domains(s, n_clients=int(c.n_clients),
                                     domain_counts=tuple(c.domain_counts),
                                     per_client=int(c.per_client),
                                     label_skew=float(c.label_skew) or None,
                                     rand_assign=bool(c.rand_assign),
                                     test_per_domain=int(c.test_per_domain) or None,
                                     val_per_domain=0)  # validation: only the optional sweep
            for s in seed_list(c)]


def stack_clients(sets: list, batch: int) -> dict:
    """Client arrays ``[N, S, n, ...]`` (n padded to a multiple of ``batch``) and test sets
    ``[S, M, ...]`` per domain."""
    n_max = max(fd.x.shape[1] for fd in sets)
    n_pad = -(-n_max // batch) * batch

    def pad(a, fill):
        w = [(0, 0)] * a.ndim
        w[1] = (0, n_pad - a.shape[1])
        return np.pad(a, w, constant_values=fill)

    out = {"x": np.stack([pad(np.asarray(fd.x, np.float32), 0) for fd in sets], 1),
           "y": np.stack([pad(np.asarray(fd.y, np.int32), 0) for fd in sets], 1),
           "mask": np.stack([pad(np.asarray(fd.mask, bool), False) for fd in sets], 1),
           "n": np.stack([np.asarray(fd.n, np.int32) for fd in sets], 1),
           "domain": np.stack([np.asarray(fd.domain) for fd in sets], 1)}
    names = tuple(sets[0].test)
    out["test"] = {d: (np.stack([np.asarray(fd.test[d][0], np.float32) for fd in sets]),
                       np.stack([np.asarray(fd.test[d][1], np.int32) for fd in sets]))
                   for d in names}
    return out


def init_params(c, graphdef_only=False):
    """``(graphdef, params [S, ...])``: seed s's initialisation from ``key(seed_s)``."""
    nets = [model.CNN(tuple(c.channels), int(c.hidden), int(c.feat_dim), int(c.n_classes),
                      int(c.groups), rngs=nnx.Rngs(params=jax.random.fold_in(
                          jax.random.key(s), 0))) for s in seed_list(c)]
    splits = [nnx.split(n, nnx.Param) for n in nets]
    graphdef = splits[0][0]
    params = jax.tree.map(lambda *a: jnp.stack(a), *[p for _, p in splits])
    return graphdef, params


def _round_keys(seeds: jax.Array, tag: int, n_clients: int) -> jax.Array:
    """``[N, S]``: ``fold_in(fold_in(key(seed_s), tag), i)`` for client ``i``, vmapped."""
    base = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), tag))(seeds)  # [S]
    return jax.vmap(lambda i: jax.vmap(lambda k: jax.random.fold_in(k, i))(base))(
        jnp.arange(n_clients))


def round_keys(c, r: int, n_clients: int) -> jax.Array:
    """``[N, S]`` keys of round ``r``: identical for every method (paired comparisons)."""
    return _round_keys(jnp.asarray(seed_list(c)), 1 + r, n_clients)


def server_keys(c, r: int) -> jax.Array:
    """``[S]`` keys of the server step after round ``r``."""
    return _round_keys(jnp.asarray(seed_list(c)), 10_000 + r, 1)[0]


def place(c, arrays: dict):
    """The client x seed rows of ``arrays`` (``x``, ``y``, ``mask`` ``[N, S, ...]``) flattened
    to ``[N * S, ...]`` with their ``seed`` index (``clients.make_flat_round``), and ``n [N,
    S]``. With ``shard_clients`` the rows are padded to a multiple of the device count
    (``core.mesh.padded_size``; padded rows repeat the last one and are dropped before the
    server) and sharded over a ``USERS`` mesh of EVERY device (Auto axes: XLA propagates the
    sharding through the vmapped round); ``n`` is replicated on it. Returns ``(placed, mesh)``,
    mesh None when unsharded."""
    N, S = np.shape(arrays["n"])
    rows = {k: clients.flatten_clients(np.asarray(arrays[k]), N, S) for k in ("x", "y", "mask")}
    rows["seed"] = clients.seed_index(N, S)
    if not c.shard_clients:
        return {**{k: jnp.asarray(v) for k, v in rows.items()},
                "n": jnp.asarray(arrays["n"])}, None
    mesh = client_mesh()
    size = mesh_lib.padded_size(N * S, mesh, mesh_lib.USERS)
    placed = {k: mesh_lib.shard_leading(mesh_lib.pad_leading(v, size), mesh)
              for k, v in rows.items()}
    placed["n"] = mesh_lib.replicate(arrays["n"], mesh)
    return placed, mesh


def client_mesh():
    """A 1-D ``USERS`` mesh with Auto axes over every device (the client x seed rows)."""
    return mesh_lib.make_mesh((jax.device_count(),), (mesh_lib.USERS,), auto=True)


def place_keys(keys: jax.Array, mesh, rows: int | None = None) -> jax.Array:
    """Key data of typed ``keys`` (``[N, S]`` or ``[S]``) on ``mesh``: flattened, padded to
    ``rows`` and sharded over ``USERS`` when ``rows`` is given (the round's keys), else
    replicated (the server's). Without a mesh: the key data as they are, flattened if rows."""
    data = np.asarray(jax.random.key_data(keys))
    if rows is not None:
        data = data.reshape((-1,) + data.shape[-1:])  # [N * S, 2]
    if mesh is None:
        return jnp.asarray(data)
    if rows is None:
        return mesh_lib.replicate(data, mesh)
    return mesh_lib.shard_leading(mesh_lib.pad_leading(data, rows), mesh)


def make_steps(c, method: str, graphdef, mesh):
    """``(spec, round_jit, server_jit, evaluate_jit)`` of one method on ``mesh`` (or None).

    ``round_jit(global, target, use_target, x, y, mask, seed, n, key_data)``,
    ``server_jit(summaries, key_data)`` and ``evaluate_jit(params, x, y)``: the client data
    and test sets are arguments, never closed over (a closed-over array is baked into the
    program as a constant)."""
    spec, _, server_fn = clients.make_round(method, c, graphdef)
    flat = clients.make_flat_round(method, c, graphdef, mesh)
    wrap = jax.random.wrap_key_data
    # Every output replicated: the next round (and the server) start there, one compile.
    rep = {} if mesh is None else {"out_shardings": NamedSharding(mesh, P())}
    round_jit = jax.jit(lambda g, t, u, x, y, m, s, n, k: flat(g, t, u, x, y, m, s, n, wrap(k)),
                        **rep)
    server_jit = jax.jit(lambda s, k: server_fn(s, wrap(k)), **rep)
    evaluate = jax.jit(lambda p, x, y: clients.evaluate(graphdef, p, x, y), **rep)
    return spec, round_jit, server_jit, evaluate


def replicated(mesh):
    """``put(array)``: the array on the device (no mesh) or replicated on ``mesh``."""
    return (jnp.asarray if mesh is None else
            lambda a: mesh_lib.replicate(mesh_lib.to_host(a), mesh))


def initial_target(c, spec: clients.MethodSpec):
    """The server target of round 1, stacked over seeds ``[S, ...]``."""
    S = len(seed_list(c))
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (S,) + a.shape),
                        clients.init_target(spec, c, int(c.n_clients)))


def train_method(c, method: str, arrays: dict, graphdef, params0, workdir: str) -> dict:
    """Trains one method for ``rounds`` rounds (resumable); returns its accuracy log."""
    client_arrays = {k: arrays[k] for k in ("x", "y", "mask", "n")}
    placed, mesh = place(c, client_arrays)
    spec, round_jit, server_jit, evaluate = make_steps(c, method, graphdef, mesh)
    N = int(c.n_clients)
    rows = placed["x"].shape[0]
    put = replicated(mesh)
    test = {d: (put(x), put(y)) for d, (x, y) in arrays["test"].items()}
    target0 = initial_target(c, spec)
    S = len(seed_list(c))
    restore = lambda tree: jax.tree.map(put, tree)  # a host (or restored) state, placed
    n_evals = int(c.rounds) // int(c.eval_every)
    logs = {"acc": np.full((n_evals, S, len(test)), np.nan), "round": np.zeros(n_evals),
            "round_s": np.zeros(int(c.rounds))}

    def advance(state, lg, start, n):
        g, target = restore(state)
        for r in range(start, start + n):
            t0 = time.time()
            use = jnp.float32(0.0 if r == 0 else 1.0)  # round 1: CE only
            g, summaries = round_jit(g, target, use, placed["x"], placed["y"], placed["mask"],
                                     placed["seed"], placed["n"],
                                     place_keys(round_keys(c, r, N), mesh, rows))
            if spec.kind == "fpl":
                target = restore(clients.fpl_target(summaries))
            elif spec.kind in ("proto", "fml"):
                target = server_jit(summaries, place_keys(server_keys(c, r), mesh))
            jax.block_until_ready(g)
            lg["round_s"][r] = time.time() - t0
            if r == start:
                logging.info("%s round %d: %.2f s", method, r + 1, lg["round_s"][r])
        j = (start + n) // int(c.eval_every) - 1
        lg["round"][j] = start + n
        lg["acc"][j] = np.stack([mesh_lib.to_host(evaluate(g, x, y)) for x, y in test.values()],
                                -1)
        # The chunk's state goes back to the host: the checkpoint holds host arrays, which
        # process 0 alone writes (orbax writes per-process metadata for device arrays).
        message = f"AVG acc {np.mean(lg['acc'][j]):.3f} (" + ", ".join(
            f"{d} {a:.3f}" for d, a in zip(test, lg["acc"][j].mean(0))) + ")"
        return mesh_lib.to_host((g, target)), message

    fp = checkpoint.config_fingerprint({**{k: c[k] for k in c if k not in (
        "methods", "seeds", "variant")}, "method": method})
    (g, target), logs = checkpoint.run_chunks(
        os.path.join(workdir, "checkpoints", method), fingerprint=fp, state=(params0, target0),
        logs=logs, steps=int(c.rounds), chunk=int(c.eval_every), advance=advance, name=method)
    logging.info("%s: %d compilation(s) of the round", method, round_jit._cache_size())
    return {"acc": logs["acc"].tolist(), "round": logs["round"].tolist(),
            "round_s": float(np.mean(logs["round_s"][1:])) if c.rounds > 1 else 0.0,
            "domains": list(test), "spec": spec._asdict()}


def run(c: ml_collections.ConfigDict, workdir: str) -> dict:
    """Runs the experiment of config ``c`` in ``workdir``; returns the results dict."""
    normalise_config(c)
    configs.validate(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    sets = make_data(c)
    arrays = stack_clients(sets, int(c.batch))
    graphdef, params0 = init_params(c)
    n_params = int(sum(np.prod(a.shape[1:]) for a in jax.tree.leaves(params0)))
    logging.info("fml: %d clients x %d seeds, domains %s, %d parameters", c.n_clients,
                 len(seed_list(c)), list(arrays["test"]), n_params)
    runs = {}
    stage_s = {}
    for method in c.methods:
        t0 = time.time()
        runs[method] = train_method(c, method, arrays, graphdef, params0, workdir)
        stage_s[method] = time.time() - t0
        logging.info("%s done in %.1f s", method, stage_s[method])
    m = report.metrics(c, runs, arrays, n_params)
    m["stage_s"] = stage_s
    claims = report.claims(c, m)
    figures = report.plots(c, m, workdir) if distributed.is_primary() else []
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed, config=c,
                                 metrics=m, claims=claims, runtime_s=runtime, figures=figures)
    if distributed.is_primary():
        print(report.table(c, m, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": m,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}
