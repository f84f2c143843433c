"""The LAD experiment (spec §Experiment): train the retrieval transformer on digit episodes
with skewed ground-truth positions (checkpointed, resumable), freeze it, then evaluate
vanilla, PriDe, permutation averaging, the attention readouts and LAD on Random N=4,
Adversarial N=4 and Random N=8 (1000 episodes x T shuffles each); claims, figures and
``results.json``.
"""

from __future__ import annotations

import hashlib
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import nnx

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core.flags import as_tuple
from icml26_jax.core.optim import promotion_safe
from icml26_jax.lad import adapter, agd, baselines, configs, data, metrics
from icml26_jax.lad import model as model_lib
from icml26_jax.lad import report

PAPER = "lad"
SETTINGS = {"random4": ("random", 4), "adversarial4": ("adversarial", 4),
            "random8": ("random", 8), "adversarial8": ("adversarial", 8)}
ALL_CLAIMS = ("position_bias_emerges", "vanilla_inconsistent", "logit_attention_divergence",
              "bias_is_conditional", "lad_beats_vanilla", "lad_beats_pride", "lad_low_rstd",
              "lad_rstd_vs_pride", "lad_consistency", "lad_near_perm_average",
              "lad_beats_pride_adversarial", "lad_gain_grows_with_n", "lad_training_free",
              "small_calibration_suffices")
METHODS = ("vanilla", "pride", "pride_global_bias", "perm_average", "raw_attention",
           "purified_attention", "lad_all_layers", "lad", "lad_ncal_sweep")


def normalise_config(c) -> None:
    """List fields given as ``a,b`` strings become tuples (in place)."""
    c.settings = as_tuple(c.settings, str, name="settings")
    c.train_n = as_tuple(c.train_n, int, name="train_n")
    c.layers = as_tuple(c.layers, int, name="layers")


def validate_config(c) -> None:
    """Raises ``ValueError`` naming the first bad field of config ``c``."""
    if c.variant not in configs.VARIANTS:
        raise ValueError(f"variant must be one of {configs.VARIANTS}, got {c.variant!r}")
    bad = [s for s in as_tuple(c.settings, str, name="settings") if s not in SETTINGS]
    if bad or not as_tuple(c.settings, str, name="settings"):
        raise ValueError(f"settings must be a non-empty subset of {tuple(SETTINGS)}, got "
                         f"settings={c.settings!r}")
    if not float(c.tau) > 0:
        raise ValueError(f"tau must be > 0, got tau={c.tau}")
    if int(c.n_cal) < 1 or int(c.n_cal_sweep) < 1:
        raise ValueError(f"n_cal and n_cal_sweep must be >= 1, got n_cal={c.n_cal}, "
                         f"n_cal_sweep={c.n_cal_sweep}")
    for name, allowed in (("agg", agd.AGGS), ("mix", agd.MIXES), ("bias", ("code", "paper")),
                          ("pos_skew", ("default", "none"))):
        if c[name] not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {name}={c[name]!r}")
    if c.bias != ("code" if c.mix == "log" else "paper"):
        raise ValueError(f"mix={c.mix!r} needs bias={'code' if c.mix == 'log' else 'paper'!r} "
                         f"(log-space B with mix='log', log P_bias with mix='prob'), got "
                         f"bias={c.bias!r}")
    if int(c.num_shuffles) < 2:
        raise ValueError(f"num_shuffles must be >= 2 (consistency is undefined for one), got "
                         f"num_shuffles={c.num_shuffles}")
    for name in ("train_steps", "batch", "n_test", "chunk", "num_layers", "d_model"):
        if int(c[name]) < 1:
            raise ValueError(f"{name} must be >= 1, got {name}={c[name]}")
    tn = as_tuple(c.train_n, int, name="train_n")
    if not tn or min(tn) < 2 or max(tn) > data.MAX_N:
        raise ValueError(f"train_n must be integers in [2, {data.MAX_N}], got {c.train_n!r}")
    lc = len(candidate_layers(c))
    if not 1 <= int(c.topk) <= lc:
        raise ValueError(f"topk must be in [1, {lc}] (the candidate layers), got "
                         f"topk={c.topk}")


def candidate_layers(c) -> tuple:
    """The candidate layers: ``config.layers`` or the upper half of the stack."""
    layers = as_tuple(c.layers, int, name="layers")
    L = int(c.num_layers)
    if layers:
        if min(layers) < 0 or max(layers) >= L:
            raise ValueError(f"layers must be in [0, {L - 1}], got layers={c.layers!r}")
        return layers
    return tuple(range(L // 2, L))


# --------------------------------------------------------------------------- training


def build(c):
    """``(graphdef, params)`` of a fresh model (``nnx.Rngs(seed)``)."""
    m = model_lib.RetrievalLM(data.VOCAB, int(c.d_model), int(c.num_layers), int(c.num_heads),
                              int(c.mlp), data.T_MAX, rngs=nnx.Rngs(int(c.seed)))
    return nnx.split(m, nnx.Param)


def make_tx(c):
    sched = optax.warmup_cosine_decay_schedule(0.0, float(c.lr), int(c.warmup),
                                               max(int(c.train_steps), int(c.warmup) + 1))
    return promotion_safe(optax.adamw(sched, weight_decay=float(c.weight_decay)))


def train_batches(c, pool, s0: int, n: int, tables: data.SplitTables | None = None
                  ) -> tuple[np.ndarray, ...]:
    """Training batches of steps ``s0 .. s0 + n - 1``, stacked: tokens [n, B, T_MAX],
    patches [n, B, T_MAX, 16], is_patch [n, B, T_MAX], last_idx [n, B] and the answer token
    ids [n, B].

    Step s draws from ``default_rng((seed, s))``: every episode's N (from ``train_n``) and
    mode (adversarial with probability ``train_adversarial_frac``), then, group by group in
    order of (N, random before adversarial), the episodes of ``data.make_episodes`` with the
    skewed ground-truth positions. Only the generator calls run per step and group
    (``data.draw_episodes``, the same draws ``make_episodes`` makes); the episodes and their
    tokens are built for all ``n`` steps at once. Equal, array for array, to stacking the
    per-step ``make_episodes`` batches (tests/lad/test_data.py).

    Args:
      c: the config.
      pool: the digits.
      s0, n: the first step and the number of steps.
      tables: ``data.split_tables(pool, "train")``, built here if not given (build it once).
    """
    tables = data.split_tables(pool, "train") if tables is None else tables
    B, frac = int(c.batch), float(c.train_adversarial_frac)
    train_n = as_tuple(c.train_n, int, name="train_n")
    probs = {k: data.position_probs(k, c.pos_skew) for k in set(train_n)}
    n_cand = np.empty((n, B), np.int64)
    adv = np.empty((n, B), bool)
    gts = np.empty((n, B), np.int64)
    anchors = np.empty((n, B), np.int64)
    draws = np.zeros((n, B, data.MAX_DRAWS), np.int64)
    for i in range(n):
        rng = np.random.default_rng((int(c.seed), s0 + i))
        ns = rng.choice(train_n, size=B)
        a = rng.random(B) < frac
        # make_episodes' call order: N ascending, random before adversarial.
        order = np.argsort(2 * ns + a, kind="stable")
        n_cand[i], adv[i] = ns[order], a[order]
        starts = np.flatnonzero(np.diff(2 * n_cand[i] + adv[i], prepend=-1))
        for lo, hi in zip(starts, list(starts[1:]) + [B]):
            k, mode = int(n_cand[i, lo]), data.MODES[int(adv[i, lo])]
            g, an, d = data.draw_episodes(rng, tables, k, hi - lo, mode, probs[k])
            gts[i, lo:hi], anchors[i, lo:hi], draws[i, lo:hi, :d.shape[1]] = g, an, d
    flat = lambda x: x.reshape((n * B,) + x.shape[2:])  # noqa: E731
    ep = data.episodes_from_draws(pool, tables, flat(n_cand), flat(adv), flat(gts),
                                  flat(anchors), flat(draws))
    b = data.tokenize_mixed(ep, flat(n_cand))
    out = (b.tokens, b.patches, b.is_patch, b.last_idx, data.INDEX0 + ep.gt)
    return tuple(x.reshape((n, B) + x.shape[1:]) for x in out)


def _train_chunk(graphdef, tx, params, opt_state, tokens, patches, is_patch, last_idx,
                 targets):
    def body(carry, b):
        p, o = carry

        def loss_fn(q):
            m = nnx.merge(graphdef, q)
            logits, _ = m(*b[:4])
            lp = jax.nn.log_softmax(logits.astype(jnp.float32))
            return -jnp.mean(jnp.take_along_axis(lp, b[4][:, None], -1))

        loss, g = jax.value_and_grad(loss_fn)(p)
        u, o = tx.update(g, o, p)
        return (optax.apply_updates(p, u), o), loss

    (params, opt_state), loss = jax.lax.scan(
        body, (params, opt_state), (tokens, patches, is_patch, last_idx, targets))
    return params, opt_state, loss


def train_program(graphdef, tx):
    """jit(params, opt_state, tokens, patches, is_patch, last_idx, targets) -> params,
    opt_state and losses after the chunk of batches ``[n, B, ...]``; the batches are jit
    arguments, never closed over (they would be baked into the program as constants)."""
    return jax.jit(lambda p, o, *b: _train_chunk(graphdef, tx, p, o, *b),
                   donate_argnums=(0, 1))


def checksum(params) -> str:
    """sha256 of the parameters' bytes (the model is frozen during evaluation)."""
    h = hashlib.sha256()
    for x in jax.tree.leaves(params):
        h.update(np.ascontiguousarray(np.asarray(x)).tobytes())
    return h.hexdigest()


def train(c, pool, ckpt_dir: str):
    """Trains the model (resumable per chunk); returns ``(graphdef, params, logs)``."""
    graphdef, params = build(c)
    tx = make_tx(c)
    opt_state = tx.init(params)
    steps = int(c.train_steps)
    logs = {"loss": np.zeros((steps,), np.float32),
            "step_time": np.zeros((-(-steps // int(c.chunk)),), np.float64)}
    program = train_program(graphdef, tx)
    tables = data.split_tables(pool, "train")

    def advance(state, logs, s0, n):
        stack = train_batches(c, pool, s0, n, tables)
        t0 = time.perf_counter()
        p, o, loss = program(*jax.device_put(state), *stack)  # host copy: see below
        loss = np.asarray(loss)
        logs["step_time"][s0 // int(c.chunk)] = (time.perf_counter() - t0) / n
        logs["loss"][s0:s0 + n] = loss
        # Every process trains the same model on its first device (see the README's
        # Multi-host paragraph); the checkpointed state is a host copy, which orbax writes
        # from process 0 (a process-local device array has no multi-host checkpoint form).
        return jax.device_get((p, o)), f"loss {loss.mean():.4f}"

    fp = checkpoint.config_fingerprint({k: c[k] for k in (
        "seed", "pool_seed", "d_model", "num_layers", "num_heads", "mlp", "train_steps", "batch",
        "lr", "warmup", "weight_decay", "pos_skew", "train_n", "train_adversarial_frac")})
    (params, _), logs = checkpoint.run_chunks(
        ckpt_dir, fingerprint=fp, state=(params, opt_state), logs=logs, steps=steps,
        chunk=int(c.chunk), advance=advance, name="train")
    return graphdef, params, logs


# --------------------------------------------------------------------------- evaluation


def _lad(c, cal: agd.CalStats, logp, sc, k=None):
    """LAD's scores from calibration ``cal``: the code-form B with ``mix='log'``, the paper's
    log P_bias with ``mix='prob'``; top-``k`` layers (default ``config.topk``)."""
    bias = (agd.bias_matrix(cal.l_obs)[0] if c.mix == "log"
            else agd.bias_matrix_paper(cal.p_obs)[0])
    return np.asarray(agd.lad_scores(logp, sc, bias, cal.a_prior, int(k or c.topk),
                                     float(c.tau), c.agg, c.mix))


def attention_diagnostic(scorer, sh: data.Episodes, gt0, E: int, T: int) -> dict:
    """Where the answering token looks, in *every* layer (not only the candidate ones), on the
    identity shuffle of the test episodes: the % of episodes whose head-averaged attention
    (Eq. 6) peaks on the ground-truth image, and the attention mass on the ground-truth image
    over the mean mass on a distractor (1 = no preference). A diagnostic of the mechanism the
    ``logit_attention_divergence`` gate measures; an extra scorer, outside the pass counts."""
    first = data.Episodes(*(np.asarray(x).reshape((E, T) + np.shape(x)[1:])[:, 0] for x in sh))
    _, sc = scorer.score(first, tuple(range(scorer.num_layers)))
    n = sc.shape[-1]
    on_gt = sc[np.arange(E), :, gt0]  # [E, L]
    off = (sc.sum(-1) - on_gt) / (n - 1)
    return {"argmax_acc": (100.0 * np.mean(np.argmax(sc, -1) == gt0[:, None], 0)).tolist(),
            "gt_over_distractor": (on_gt.mean(0) / np.maximum(off.mean(0), 1e-20)).tolist()}


def evaluate_setting(c, pool, scorer_factory, setting: str) -> dict:
    """Every method on one setting; returns metrics, matrices and forward-pass counts."""
    mode, N = SETTINGS[setting]
    layers = candidate_layers(c)
    rng = np.random.default_rng((int(c.seed), 1, list(SETTINGS).index(setting)))
    test = data.make_episodes(pool, "test", N, int(c.n_test), mode, np.full(N, 1.0 / N), rng)
    sh = data.shuffle(test, int(c.num_shuffles), rng)
    E, T = int(c.n_test), int(c.num_shuffles)
    gt = sh.gt.reshape(E, T)
    ids = sh.image_ids.reshape(E, T, N)
    cal_rng = np.random.default_rng((int(c.seed), 2, list(SETTINGS).index(setting)))
    cal_pool = data.make_episodes(pool, "cal", N, max(int(c.n_cal), int(c.n_cal_sweep)),
                                  mode, np.full(N, 1.0 / N), cal_rng)
    first = lambda n: data.Episodes(*(x[:n] for x in cal_pool))  # noqa: E731

    cal_scorer = scorer_factory()
    cal = agd.calibrate(cal_scorer, first(int(c.n_cal)), layers)
    n_cal_forward = cal_scorer.n_forward
    B_code, log_gamma = agd.bias_matrix(cal.l_obs)
    log_gamma_paper = agd.bias_matrix_paper(cal.p_obs)[1]
    cal50 = agd.calibrate(scorer_factory(), first(int(c.n_cal_sweep)), layers)

    scorer = scorer_factory()
    t0 = time.perf_counter()
    logp, sc = scorer.score(sh, layers)
    n_test_forward = scorer.n_forward
    pi = np.asarray(agd.attention_posterior(sc, cal.a_prior, int(c.topk), float(c.tau), c.agg))
    out = {"vanilla": logp, "lad": _lad(c, cal, logp, sc),
           "lad_all_layers": _lad(c, cal, logp, sc, k=len(layers)),
           "lad_ncal_sweep": _lad(c, cal50, logp, sc),
           "pride": np.asarray(baselines.pride_scores(
               logp, baselines.pride_log_prior(cal.cyclic_logp))),
           "pride_global_bias": logp - np.asarray(baselines.pride_global_bias(B_code)),
           "raw_attention": np.asarray(baselines.raw_attention(sc)),
           "purified_attention": pi}
    eval_s = time.perf_counter() - t0
    perm_scorer = scorer_factory()
    out["perm_average"] = baselines.perm_average(perm_scorer, sh, layers)
    res = {"methods": {}, "n_forward": {"calibration": n_cal_forward, "test": n_test_forward,
                                        "perm_average": perm_scorer.n_forward,
                                        "instances": E * T}}
    preds = {}
    for name, s in out.items():
        pred = np.argmax(np.asarray(s), axis=1).reshape(E, T)
        preds[name] = pred
        res["methods"][name] = metrics.summary(pred, gt, ids, N)
    res["confusion"] = {m: metrics.confusion(gt, preds[m], N) for m in ("vanilla", "lad")}
    res["recall_by_position"] = {m: metrics.recall_by_position(preds[m], gt, N)
                                 for m in ("vanilla", "pride", "lad")}
    res["bias"] = np.asarray(B_code)
    res["log_gamma"] = float(log_gamma)
    res["log_gamma_paper"] = float(log_gamma_paper)
    Bc = np.asarray(B_code) - np.asarray(B_code).mean(1, keepdims=True)
    res["bias_conditionality"] = float(np.max(np.abs(Bc - Bc.mean(0, keepdims=True))))
    res["eval_s"] = eval_s
    res["attention_diagnostic"] = attention_diagnostic(scorer_factory(), sh, gt[:, 0], E, T)
    logging.info("%s: %s", setting, ", ".join(
        f"{m} {v['acc']:.1f}" for m, v in res["methods"].items()))
    return res


def claims(m: dict, c) -> list[results.Claim]:
    """The 14 claims of spec §Claims (Random N=4 unless stated), in percentage points."""
    out = []
    r4 = m["settings"].get("random4")
    if r4 is None:
        return out
    M = r4["methods"]
    gap = lambda a, b, s=M: s[a]["acc"] - s[b]["acc"]  # noqa: E731
    out += [results.at_least("position_bias_emerges", M["vanilla"]["rstd"], 15),
            results.at_most("vanilla_inconsistent", M["vanilla"]["cons"], 50),
            results.at_least("logit_attention_divergence", gap("purified_attention", "vanilla"),
                             10),
            results.at_least("bias_is_conditional", r4["bias_conditionality"], 1.0),
            results.at_least("lad_beats_vanilla", gap("lad", "vanilla"), 20),
            results.at_least("lad_beats_pride", gap("lad", "pride"), 10),
            results.at_most("lad_low_rstd", M["lad"]["rstd"], 5),
            results.at_most("lad_rstd_vs_pride",
                            M["lad"]["rstd"] / max(M["pride"]["rstd"], 1e-9), 0.5),
            results.at_least("lad_consistency", M["lad"]["cons"], 70),
            results.at_most("lad_near_perm_average", gap("perm_average", "lad"), 5)]
    # A setting the variant does not evaluate gives NaN (the claim is listed, not held).
    nan = float("nan")
    a4 = m["settings"].get("adversarial4")
    out.append(results.at_least("lad_beats_pride_adversarial",
                                gap("lad", "pride", a4["methods"]) if a4 else nan, 5))
    r8 = m["settings"].get("random8")
    out.append(results.at_least(
        "lad_gain_grows_with_n", (r8["methods"]["lad"]["acc"] - r8["methods"]["vanilla"]["acc"])
        - gap("lad", "vanilla") if r8 else nan, 0))
    free = all(m["params_unchanged"]
               and s["n_forward"]["calibration"] == int(c.n_cal) * SETTINGS[k][1]
               and s["n_forward"]["test"] == s["n_forward"]["instances"]
               for k, s in m["settings"].items())
    out.append(results.at_least("lad_training_free", float(free), 1.0))
    out.append(results.at_most("small_calibration_suffices",
                               gap("lad_ncal_sweep", "lad"), 3))
    return out


def run(config, workdir: str) -> dict:
    """Trains (or restores) the model, evaluates every setting, writes ``results.json`` and
    the figures; returns the results dict."""
    c = config
    normalise_config(c)
    validate_config(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer of the workdir's own files
        os.makedirs(workdir, exist_ok=True)
    pool = data.load_pool(int(c.pool_seed))
    graphdef, params, logs = train(c, pool, os.path.join(workdir, "ckpt", "train"))
    before = checksum(params)
    # Test episodes are sharded over every device of every process (None on one device).
    mesh = mesh_lib.data_mesh() if c.shard else None
    factory = lambda: adapter.FlaxRetrievalScorer(graphdef, params, mesh=mesh)  # noqa: E731
    m = {"settings": {}, "train_loss_end": float(np.mean(logs["loss"][-50:])),
         "train_step_s": float(np.median(logs["step_time"][logs["step_time"] > 0])),
         "layers": list(candidate_layers(c))}
    for s in as_tuple(c.settings, str, name="settings"):
        m["settings"][s] = evaluate_setting(c, pool, factory, s)
    # The verdict, not the hashes: the trained weights agree across device layouts only to
    # float rounding (XLA:CPU's threading), so their hash is no metric to compare.
    m["params_unchanged"] = before == checksum(params)
    cl = claims(m, c)
    figs = report.figures(m, workdir)
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=int(c.seed),
                                 config=c, metrics=m, claims=cl,
                                 runtime_s=time.time() - t_start, figures=figs)
    logging.info("\n%s", report.tables(m))
    logging.info("\n%s", results.claims_table(cl))
    logging.info("results: %s (%.0f s)", path, time.time() - t_start)
    return results.load_results(workdir) if path else {"metrics": m, "claims": cl}
