r"""FML benchmark, one process, the ``default`` config's data (10
clients x 3 vmapped seeds, 100 images per client, batch 20), compile time kept apart:

    python benchmarks/fml.py                # ~3 min on 2 idle CPU cores
    python benchmarks/fml.py --repeats=10

(a) client-steps per second of the vmapped local training (``clients.local_train`` of "fml"
    vmapped over clients x seeds with ``make_round``'s axes, against a real round-2 target),
    one local epoch: the model's im2col convolution (``model.conv3x3``) against
    ``lax.conv_general_dilated`` ('SAME', NHWC/HWIO/NHWC), which under ``vmap`` with per-client
    weights lowers to a grouped convolution. ``model.conv3x3`` is swapped by a context manager
    and the function re-traced; both must give the same client models before they are timed.
    client-steps = clients x seeds x epochs x batches per epoch. Target >= 3x.
(b) one "fml" round (one local epoch) with the client x seed rows placed by ``train.place``
    over the 8 simulated CPU devices (``shard_clients``: rows padded to a multiple of 8;
    ``clients.make_flat_round``, params and target replicated as in ``train.train_method``)
    against ``make_round``'s ``round_fn`` unsharded (one device): N = 10 (30 rows padded to
    32) and N = 8 (24 rows, domain_counts (2, 2, 2, 2)).
    Seconds per round and their ratio, and the new global models must agree; no target.
(c) server cost of one "fml" round at the default local_epochs = 5: the clients' summary
    (features + ``manifolds.compress``: ``clients.client_summary`` vmapped as in ``round_fn``)
    plus ``server_fn`` (MML + re-compression), as a fraction of the round's local training.
    Target <= 10 %. The reconstructed local training (+ FedAvg) and summaries are checked
    against ``round_fn``'s outputs on the same inputs (one epoch, from (a) and (b)).
(d) communication bytes per round of one federation, all clients, for every method of
    ``configs.METHODS``, from the arrays the code produces (the params pytree; the summaries of
    ``round_fn``; the targets of ``server_fn`` or, for FPL, of ``clients.fpl_target``), shapes
    and dtypes by ``jax.eval_shape`` of the same functions (checked against the arrays computed
    for "fml"); weights and summaries, up and down, next to ``report.bytes_per_round``.

Every timing is ``core.timing.median_seconds`` of an AOT-compiled function (``jit.lower(...)
.compile()``, timed apart as compile_s) after one untimed call whose output is checked.
Prints a table and writes ``benchmarks/results/fml.json``; exits non-zero (after writing) if a
check fails.
"""

import jax

# First action: the CPU device count is fixed when the backend starts, so it is set before
# anything can touch JAX (the users mesh of (b) needs 8 devices).
jax.config.update("jax_num_cpu_devices", 8)

import contextlib
import json
import os
import platform
import re
import time

import jax.numpy as jnp
import jaxlib
import numpy as np
from absl import app, flags
from jax import lax

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import results, timing
from icml26_jax.fml import clients, configs, model, report, train

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls per measurement (median).")
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/fml.json).")

METHOD = "fml"
CONV_TARGET = 3.0  # (a) im2col / lax.conv client-steps per second, >= 3x
SERVER_TARGET = 0.10  # (c) (summary + server) / local training, <= 10 %
# (a) the two convolutions differ in float32 summation order only; after 5 SGD steps (lr 0.01,
# momentum 0.9) of O(1) weights the client models agree to ~1e-6. A wrong layout, padding or
# kernel orientation changes them by O(1e-2) and more.
CONV_ATOL = 1e-4
# (b) sharding changes only the reduction order of FedAvg's mean over clients (and XLA's
# fusion per device): the test suite's tolerance for one epoch is 5e-5; 25 steps here.
SHARD_ATOL = 1e-4
# (c) the reconstructed local training + FedAvg against round_fn's new global model: the same
# operations on the same inputs and keys, only XLA's fusion can differ.
ROUND_ATOL = 1e-5


# ------------------------------------------------------------------------------ helpers


def _compile(fn, *args):
    """``(compiled, seconds to trace + lower + compile, lowered)`` of ``jax.jit(fn)``."""
    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    compiled = lowered.compile()
    return compiled, time.perf_counter() - t0, lowered


def _run(compiled, *args):
    """One untimed call (its output is what the checks compare); also the timing's warm-up."""
    return jax.block_until_ready(compiled(*args))


def _seconds(compiled, args, repeats):
    return timing.median_seconds(compiled, *args, repeats=repeats, warmup=0)


def _max_abs_diff(a, b) -> float:
    return float(max(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))
                     for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))))


def _rel_l2(a, b) -> float:
    """``||a - b|| / ||b||`` over all leaves."""
    num = sum(float(np.sum((np.asarray(x, np.float64) - np.asarray(y, np.float64)) ** 2))
              for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    den = sum(float(np.sum(np.asarray(y, np.float64) ** 2)) for y in jax.tree.leaves(b))
    return float(np.sqrt(num / den))


def _nbytes(tree) -> int:
    """Bytes of every leaf of a pytree of arrays or ``ShapeDtypeStruct``s."""
    return int(sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize
                   for a in jax.tree.leaves(tree)))


def _shapes(tree) -> list:
    return [[list(a.shape), str(np.dtype(a.dtype))] for a in jax.tree.leaves(tree)]


def conv3x3_lax(x, kernel, bias):
    """``model.conv3x3``'s contract by ``lax.conv_general_dilated``: 'SAME', NHWC/HWIO/NHWC."""
    return lax.conv_general_dilated(x, kernel, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC")) + bias


@contextlib.contextmanager
def conv_impl(fn):
    """Replaces ``model.conv3x3`` (looked up when ``CNN.features`` is traced) inside the block
    and restores it on exit, also on error."""
    saved = model.conv3x3
    model.conv3x3 = fn
    try:
        yield
    finally:
        model.conv3x3 = saved


def _conv_stats(lowered) -> dict:
    """Convolutions in the lowered program and their largest ``feature_group_count`` (> 1: the
    per-client weights became a grouped convolution)."""
    text = lowered.as_text()
    groups = [int(g) for g in re.findall(r"feature_group_count = (\d+)", text)]
    return {"convolutions": len(re.findall(r"stablehlo\.convolution", text)),
            "max_feature_group_count": max(groups, default=0)}


def local_training(method: str, c, graphdef):
    """The round's local training alone: ``clients.local_train`` vmapped over clients and seeds
    with ``make_round``'s axes and key derivation (``fold_in(key, 0)``); returns the client
    models ``[N, S, ...]``. ``make_round`` does not expose this part, so (c) checks that these
    client models average to ``round_fn``'s new global model."""
    local = clients.local_train(method, c, graphdef)
    over_s = jax.vmap(local, in_axes=(0, 0, 0, 0, 0, 0, None))
    over_ns = jax.vmap(over_s, in_axes=(None, 0, 0, 0, 0, None, None))

    def fn(global_params, target, use_target, x, y, mask, keys):
        k_train = jax.vmap(jax.vmap(lambda k: jax.random.fold_in(k, 0)))(keys)
        return over_ns(global_params, x, y, mask, k_train, target, use_target)

    return fn


def summaries_fn(method: str, c, graphdef):
    """``clients.client_summary`` vmapped over clients and seeds, keys as in ``round_fn``."""
    spec = clients.method_spec(method, c)

    def fn(params, x, y, mask, keys):
        k_sum = jax.vmap(jax.vmap(lambda k: jax.random.fold_in(k, 1)))(keys)
        return jax.vmap(jax.vmap(lambda p, xx, yy, m, k: clients.client_summary(
            spec, c, graphdef, p, xx, yy, m, k)))(params, x, y, mask, k_sum)

    return fn


def fedavg(params, n):
    """``round_fn``'s weighted mean over clients: ``[N, S, ...]``, ``n [N, S]`` -> ``[S, ...]``."""
    w = n.astype(jnp.float32)
    return jax.tree.map(lambda p: jnp.einsum("ns,ns...->s...", w, p) / w.sum(0).reshape(
        (-1,) + (1,) * (p.ndim - 2)), params)


def _config(**overrides):
    c = configs.get_config("default")
    for k, v in overrides.items():
        c[k] = v
    train.normalise_config(c)
    configs.validate(c)
    return c


def _client_arrays(c):
    """Host client arrays ``{x, y, mask, n}`` ``[N, S, ...]`` of config ``c``."""
    arrays = train.stack_clients(train.make_data(c), int(c.batch))
    return {k: arrays[k] for k in ("x", "y", "mask", "n")}


# ------------------------------------------------------------------- (b) round on mesh


def bench_round(c, graphdef, g, target, host: dict, repeats: int, unsharded=None
                ) -> tuple[dict, dict]:
    """One "fml" round (round index 1, use_target = 1) from the global model ``g`` and target
    ``target``, clients placed by ``train.place`` with ``shard_clients`` False, then True.
    ``unsharded``: an already compiled unsharded round ``(compiled, compile_s)`` of the same
    shapes, or None. Returns the record and the unsharded round's inputs and outputs (for
    (c))."""
    N = int(c.n_clients)
    _, round_fn, _ = clients.make_round(METHOD, c, graphdef)
    keys = train.round_keys(c, 1, N)
    use = jnp.float32(1.0)
    out = {"n_clients": N, "seeds": len(train.seed_list(c)),
           "domain_counts": list(c.domain_counts), "local_epochs": int(c.local_epochs)}
    outputs = {}
    for shard in (False, True):
        if not shard:  # round_fn's [N, S] layout on one device
            fn, devices = round_fn, 1
            args = (g, target, use, *(jnp.asarray(host[k]) for k in ("x", "y", "mask", "n")),
                    keys)
        else:  # as train.train_method: flat rows over every device, the rest replicated
            cs = c.copy_and_resolve_references()
            cs.shard_clients = True
            placed, mesh = train.place(cs, host)
            flat = clients.make_flat_round(METHOD, c, graphdef, mesh)
            fn = lambda g_, t_, u, x, y, m, s, n, k: flat(g_, t_, u, x, y, m, s, n,
                                                          jax.random.wrap_key_data(k))
            gg, tt = jax.tree.map(lambda a: mesh_lib.replicate(np.asarray(a), mesh),
                                  (g, target))
            args = (gg, tt, use, placed["x"], placed["y"], placed["mask"], placed["seed"],
                    placed["n"], train.place_keys(keys, mesh, placed["x"].shape[0]))
            devices = len(placed["x"].sharding.device_set)
        if shard or unsharded is None:
            compiled, compile_s, _ = _compile(fn, *args)
        else:
            compiled, compile_s = unsharded
        outputs[shard] = _run(compiled, *args)
        sec = _seconds(compiled, args, repeats)
        name = "sharded" if shard else "unsharded"
        out[name] = {"round_s": sec, "compile_s": compile_s, "devices": devices}
        if not shard:
            ref = {"args": args, "outputs": outputs[False]}
        print(f"(b) N={N} {name:>9} ({out[name]['devices']} device(s)): {sec:.3f} s/round "
              f"(compile {compile_s:.1f} s)", flush=True)
    out["max_abs_diff_new_global"] = _max_abs_diff(outputs[True][0], outputs[False][0])
    out["rel_l2_diff_new_global"] = _rel_l2(outputs[True][0], outputs[False][0])
    out["new_global_match"] = out["max_abs_diff_new_global"] <= SHARD_ATOL
    out["ratio_sharded_over_unsharded"] = out["sharded"]["round_s"] / out["unsharded"]["round_s"]
    return out, ref


# ------------------------------------------------------------------ (c) server cost


def bench_server(c, graphdef, args: tuple, server_compiled, skeys, repeats: int,
                 check: dict) -> dict:
    """(c) at ``c.local_epochs`` (5): local training, summaries and server of one "fml" round
    on the inputs ``args`` of (b)'s unsharded N = 10 round. ``check``: (a)'s im2col client
    models at one epoch and (b)'s round outputs on the same inputs, against which the
    reconstructed local training and summaries are compared."""
    g, target, use, x, y, mask, n, keys = args
    local, compile_local, _ = _compile(local_training(METHOD, c, graphdef), g, target, use, x,
                                       y, mask, keys)
    params = _run(local, g, target, use, x, y, mask, keys)
    t_local = _seconds(local, (g, target, use, x, y, mask, keys), repeats)
    summ, compile_summ, _ = _compile(summaries_fn(METHOD, c, graphdef), params, x, y, mask, keys)
    s = _run(summ, params, x, y, mask, keys)
    t_summ = _seconds(summ, (params, x, y, mask, keys), repeats)
    _run(server_compiled, s, skeys)
    t_server = _seconds(server_compiled, (s, skeys), repeats)
    # local_training + fedavg and summaries_fn are round_fn's parts (one epoch, same inputs)
    ref_global, ref_summ = check["round_outputs"]
    d_global = _max_abs_diff(jax.jit(fedavg)(check["client_models"], n), ref_global)
    d_summ = _max_abs_diff(_run(summ, check["client_models"], x, y, mask, keys), ref_summ)
    steps = (int(x.shape[0]) * int(x.shape[1]) * int(c.local_epochs)
             * (int(x.shape[2]) // int(c.batch)))
    frac = (t_summ + t_server) / t_local
    print(f"(c) local training {t_local:.3f} s, summary {1e3 * t_summ:.1f} ms, server "
          f"{1e3 * t_server:.1f} ms: {100 * frac:.1f} % (compile local {compile_local:.1f} s, "
          f"summary {compile_summ:.1f} s)", flush=True)
    return {"local_epochs": int(c.local_epochs), "client_steps": steps,
            "local_train_s": t_local, "summary_s": t_summ, "server_s": t_server,
            "compile_local_s": compile_local, "compile_summary_s": compile_summ,
            "fraction_summary": t_summ / t_local, "fraction_server": t_server / t_local,
            "fraction": frac, "target": SERVER_TARGET,
            "max_abs_diff_fedavg_vs_round_fn": d_global,
            "max_abs_diff_summaries_vs_round_fn": d_summ,
            "parts_match_round_fn": d_global <= ROUND_ATOL and d_summ <= ROUND_ATOL}


# --------------------------------------------------------------- (a) im2col vs lax.conv


def bench_conv(c, graphdef, g, target, host: dict, repeats: int) -> dict:
    x, y, mask = (jnp.asarray(host[k]) for k in ("x", "y", "mask"))
    keys = train.round_keys(c, 1, int(c.n_clients))
    args = (g, target, jnp.float32(1.0), x, y, mask, keys)
    steps = (int(x.shape[0]) * int(x.shape[1]) * int(c.local_epochs)
             * (int(x.shape[2]) // int(c.batch)))
    out = {"local_epochs": int(c.local_epochs), "client_steps_per_call": steps,
           "clients": int(x.shape[0]), "seeds": int(x.shape[1])}
    params = {}
    for name, impl in (("im2col", model.conv3x3), ("lax_conv", conv3x3_lax)):
        with conv_impl(impl):  # traced (and compiled) inside: the swap is in the program
            compiled, compile_s, lowered = _compile(local_training(METHOD, c, graphdef), *args)
        params[name] = _run(compiled, *args)
        out[name] = {"compile_s": compile_s, **_conv_stats(lowered)}
        if name == "lax_conv":  # verified before timing
            d = _max_abs_diff(params["lax_conv"], params["im2col"])
            out["max_abs_diff_client_models"] = d
            if not d <= CONV_ATOL:
                raise AssertionError(f"(a) lax.conv and im2col client models differ by {d:.2e} "
                                     f"> {CONV_ATOL}")
        sec = _seconds(compiled, args, repeats)
        out[name].update(call_s=sec, client_steps_per_s=steps / sec)
        print(f"(a) {name:>8}: {steps / sec:,.0f} client-steps/s ({sec:.3f} s per "
              f"{steps} client-steps; compile {compile_s:.1f} s; {out[name]['convolutions']} "
              f"convolution(s), feature groups <= {out[name]['max_feature_group_count']})",
              flush=True)
    assert model.conv3x3 is not conv3x3_lax  # restored
    out["speedup"] = out["im2col"]["client_steps_per_s"] / out["lax_conv"]["client_steps_per_s"]
    out["target"] = CONV_TARGET
    out["target_met"] = bool(out["speedup"] >= CONV_TARGET)
    return out, params["im2col"]


# ------------------------------------------------------------------ (d) bytes per round


def bench_bytes(c, graphdef, params0, host: dict, fml_actual: dict) -> dict:
    """Bytes per round of one federation (one seed), all N clients together, from the shapes
    and dtypes of the arrays each method's round produces."""
    N = int(c.n_clients)
    S = len(train.seed_list(c))
    x, y, mask, n = (jnp.asarray(host[k]) for k in ("x", "y", "mask", "n"))
    keys = train.round_keys(c, 1, N)
    skeys = train.server_keys(c, 1)
    w_client = _nbytes(params0) // S  # one seed's model, sent down and up by each client
    n_params = int(sum(np.prod(a.shape[1:]) for a in jax.tree.leaves(params0)))
    out = {"n_clients": N, "n_params": n_params, "methods": {}}
    rng = np.random.default_rng(0)
    for method in configs.METHODS:
        spec, round_fn, server_fn = clients.make_round(method, c, graphdef)
        target0 = jax.tree.map(lambda a: jnp.broadcast_to(a, (S,) + a.shape),
                               clients.init_target(spec, c, N))
        g_shape, summ = jax.eval_shape(round_fn, params0, target0, jnp.float32(1.0), x, y, mask,
                                       n, keys)
        assert _shapes(g_shape) == _shapes(params0), method
        if spec.kind == "fpl":  # host FINCH: run it on summaries of the produced shapes
            means, present = summ
            tgt = clients.fpl_target((rng.standard_normal(means.shape).astype(means.dtype),
                                      np.ones(present.shape, bool)))
        else:
            tgt = jax.eval_shape(server_fn, summ, skeys)
        assert _shapes(tgt) == _shapes(target0), (method, _shapes(tgt), _shapes(target0))
        # FedAvg and FedProx upload no summary and get no target: round_fn / server_fn return
        # a placeholder scalar per client and seed, counted apart.
        none = spec.kind in ("ce", "prox")
        s_client = _nbytes(summ) // (N * S)
        t_seed = _nbytes(tgt) // S
        measured = {"weights_up": N * w_client, "weights_down": N * w_client,
                    "summary_up": 0 if none else N * s_client,
                    "summary_down": 0 if none else N * t_seed}
        rep = report.bytes_per_round(c, method, n_params)
        out["methods"][method] = {
            "measured": measured, "report": rep,
            "diff_measured_minus_report": {k: measured[k] - rep[k] for k in measured},
            "summary_up_over_weights": measured["summary_up"] / measured["weights_up"],
            "placeholder_bytes": {"summary": s_client, "target": t_seed} if none else None,
            "summary_arrays_per_client": _shapes(jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape[2:], a.dtype), summ)),
            "target_arrays": _shapes(jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), tgt))}
    # eval_shape agrees with the arrays "fml" really produced in (b)/(c)
    _, round_fn, server_fn = clients.make_round(METHOD, c, graphdef)
    summ = jax.eval_shape(round_fn, params0, fml_actual["target"], jnp.float32(1.0), x, y, mask,
                          n, keys)[1]
    out["fml_shapes_match_computed"] = bool(
        _shapes(fml_actual["summaries"]) == _shapes(summ)
        and _shapes(fml_actual["target"]) == _shapes(jax.eval_shape(server_fn, summ, skeys)))
    return out


# ---------------------------------------------------------------------------- report


def _claim(claim) -> dict:
    return {"name": claim.name, "measured": claim.measured, "threshold": claim.threshold,
            "met": claim.holds}


def _tables(res: dict) -> str:
    a, c = res["a_conv"], res["c_server"]
    rows = [[f"(a) im2col vs lax.conv, client-steps/s (E={a['local_epochs']})",
             a["im2col"]["client_steps_per_s"], a["lax_conv"]["client_steps_per_s"],
             f"{a['speedup']:.2f}x", ">= 3x", a["target_met"]]]
    for b in res["b_mesh"]:
        rows.append([f"(b) N={b['n_clients']} round s, {b['sharded']['devices']} devices vs 1",
                     b["sharded"]["round_s"], b["unsharded"]["round_s"],
                     f"{b['ratio_sharded_over_unsharded']:.2f}x", "-", None])
    rows.append([f"(c) summary + server vs local training s (E={c['local_epochs']})",
                 c["summary_s"] + c["server_s"], c["local_train_s"],
                 f"{100 * c['fraction']:.1f} %", "<= 10 %", c["fraction"] <= SERVER_TARGET])
    out = [results.format_table(rows, ["measurement", "ours", "other", "ratio", "target",
                                       "met"], floatfmt=".4g",
                                title=f"FML benchmark ({res['device_count']} "
                                      f"{res['platform']} devices, {res['host_cpu_count']} "
                                      f"host cores, median of {res['repeats']})")]
    d = res["d_bytes"]
    rows = []
    for m, r in d["methods"].items():
        me, rep = r["measured"], r["report"]
        rows.append([m, me["weights_up"], me["weights_down"], me["summary_up"],
                     me["summary_down"], rep["summary_up"], rep["summary_down"],
                     f"{100 * r['summary_up_over_weights']:.2f} %"])
    out.append(results.format_table(
        rows, ["method", "weights up", "weights down", "summ up", "summ down", "report up",
               "report down", "summ/weights up"],
        title=f"(d) bytes per round, one federation of {d['n_clients']} clients "
              f"({d['n_params']} parameters); report = report.bytes_per_round"))
    return "\n\n".join(out)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    r = int(REPEATS.value)
    if r < 1:
        raise app.UsageError(f"--repeats must be >= 1, got {r}")
    t_start = time.perf_counter()
    print(f"jax {jax.__version__}, {jax.device_count()} {jax.devices()[0].platform} devices",
          flush=True)
    res = {"paper": "fml", "jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
           "platform": jax.devices()[0].platform, "device": str(jax.devices()[0]),
           "device_count": jax.device_count(), "host_cpu_count": os.cpu_count(),
           "python": platform.python_version(), "machine": platform.platform(), "repeats": r,
           "method": METHOD, "load_average_start": list(os.getloadavg())}

    c = _config()  # (c), (d): the default config (local_epochs = 5)
    cs = _config(local_epochs=1)  # (a), (b): one local epoch keeps them short
    host10 = _client_arrays(c)
    graphdef, params0 = train.init_params(c)
    res["config"] = {"n_clients": int(c.n_clients), "num_seeds": int(c.num_seeds),
                     "per_client": int(c.per_client), "batch": int(c.batch),
                     "local_epochs": int(c.local_epochs),
                     "local_epochs_a_b": int(cs.local_epochs), "k_m": int(c.k_m),
                     "k_g": int(c.k_g)}

    # A real round-2 state: round 1 (CE only) from the initialisation, then the server. The
    # unsharded N = 10 round compiled here is the one (b) times (use_target is an argument).
    _, round_fn, server_fn = clients.make_round(METHOD, cs, graphdef)
    spec = clients.method_spec(METHOD, cs)
    S, N = len(train.seed_list(cs)), int(cs.n_clients)
    target0 = jax.tree.map(lambda a: jnp.broadcast_to(a, (S,) + a.shape),
                           clients.init_target(spec, cs, N))
    dev = {k: jnp.asarray(v) for k, v in host10.items()}  # round_fn's [N, S] layout
    args1 = (params0, target0, jnp.float32(0.0), dev["x"], dev["y"], dev["mask"], dev["n"],
             train.round_keys(cs, 0, N))
    round_c, compile_round, _ = _compile(round_fn, *args1)
    g1, summ0 = _run(round_c, *args1)
    skeys = train.server_keys(cs, 0)
    server_c, compile_server, _ = _compile(server_fn, summ0, skeys)
    target1 = _run(server_c, summ0, skeys)
    print(f"round-1 state: compile round {compile_round:.1f} s, server {compile_server:.1f} s",
          flush=True)

    b10, ref = bench_round(cs, graphdef, g1, target1, host10, r,
                           unsharded=(round_c, compile_round))
    res["a_conv"], models = bench_conv(cs, graphdef, g1, target1, host10, r)
    res["c_server"] = bench_server(c, graphdef, ref["args"], server_c, train.server_keys(c, 1),
                                   r, {"client_models": models, "round_outputs": ref["outputs"]})
    res["c_server"]["compile_server_s"] = compile_server
    # train.train_method also builds each round's [N, S] keys eagerly on the host
    res["c_server"]["round_keys_host_s"] = timing.median_seconds(
        train.round_keys, c, 1, N, repeats=r, warmup=1)
    c8 = _config(local_epochs=1, n_clients=8, domain_counts=(2, 2, 2, 2))
    # the global model and the fml target do not depend on N: the same state serves N = 8
    b8, _ = bench_round(c8, graphdef, g1, target1, _client_arrays(c8), r)
    res["b_mesh"] = [b10, b8]

    res["d_bytes"] = bench_bytes(c, graphdef, params0, host10,
                                 {"summaries": ref["outputs"][1], "target": target1})

    res["targets"] = [
        _claim(results.at_least("conv_im2col_over_lax_client_steps", res["a_conv"]["speedup"],
                                CONV_TARGET)),
        _claim(results.at_most("server_over_local_training", res["c_server"]["fraction"],
                               SERVER_TARGET))]
    res["checks"] = {
        "conv_client_models_match": res["a_conv"]["max_abs_diff_client_models"] <= CONV_ATOL,
        "sharded_round_matches": all(b["new_global_match"] for b in res["b_mesh"]),
        "local_training_and_summary_match_round_fn": res["c_server"]["parts_match_round_fn"],
        "fml_shapes_match_computed": res["d_bytes"]["fml_shapes_match_computed"]}
    res["notes"] = [
        "(a) times the local training alone (one epoch, the fml loss against a real round-2 "
        "target); client-steps = clients x seeds x epochs x batches per epoch.",
        "(b) one local epoch; the 8 simulated CPU devices share the host's cores. Measured "
        "here, one device's round does not keep every core busy, so the mesh gains by running "
        "devices in parallel, net of partitioning and FedAvg's all-reduce; on 2 cores this "
        "says nothing about real multi-device scaling.",
        "(c) summary = features of the client's own data + k-means compression, timed "
        "vmapped over clients and seeds; server = server_fn (MML + re-compression).",
        "(d) one federation (one seed); FedAvg/FedProx summaries and targets are placeholder "
        "scalars the protocol does not send (placeholder_bytes); boolean masks (presence, "
        "cluster masks) are counted at 1 byte each, report.bytes_per_round omits them.",
        "compile_s = trace + lower + XLA compile; timings are medians of calls after one "
        "untimed, checked call."]
    res["wall_s"] = time.perf_counter() - t_start
    res["load_average_end"] = list(os.getloadavg())

    print()
    print(_tables(res))
    print(f"\nchecks: {res['checks']}")
    print(f"wall time {res['wall_s']:.0f} s")
    path = OUT.value or os.path.join(REPO_ROOT, "benchmarks", "results", "fml.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results.to_jsonable(res), f, indent=2, allow_nan=False)
        f.write("\n")
    print(f"wrote {path}")
    failed = [k for k, v in res["checks"].items() if not v]
    if failed:  # written first so the numbers survive; the exit status flags the mismatch
        raise SystemExit(f"checks failed: {failed}")


if __name__ == "__main__":
    app.run(main)
