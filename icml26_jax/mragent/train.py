"""The MRAgent experiment (spec §Experiment): build the memory graphs, calibrate the local
policy on the dev conversations, run MRAgent, its ablations and the passive baselines on the
test conversations with one answerer and one cost counter, and write results.json.

Stages (each cached in ``<workdir>/checkpoints`` under the config's fingerprint, so an
interrupted run resumes where it stopped):

1. data: SynthMem generated from the seed (cached as LoCoMo JSON in the workdir) or a
   user's LoCoMo / LongMemEval file;
2. phase 1: sentences with pronouns resolved (``RuleExtractor``), the embedder fitted on the
   contents only, one :class:`~icml26_jax.mragent.types.MemoryGraph` per conversation;
3. the bridge-hard filter (SynthMem; reads gold bridge ids, evaluator side only);
4. calibration of theta, theta_hi, tau_stop, m_stop, tau_abstain (and the "now" margin) by
   grid search on the dev conversations only;
5. evaluation of every method on the test conversations.
"""

from __future__ import annotations

import itertools
import os
import time

import numpy as np
from absl import logging

from icml26_jax.core import checkpoint, distributed, mesh as mesh_lib
from icml26_jax.mragent import agent, baselines, configs, graph as graph_lib, metrics, synth
from icml26_jax.mragent.embed import Fitted
from icml26_jax.mragent.reasoner import LocalParams, LocalReasoner, extractive_answer, make_plan
from icml26_jax.mragent.schema import load_locomo, load_longmemeval

PAPER = "mragent"
RECORD_FIELDS = ("em", "f1", "recall", "contents_read", "tags_read", "tokens", "tool_calls",
                 "rounds", "cap_hit", "wall_ms", "confidence")


def normalise_config(c) -> None:
    """Flag strings to their types (``--config.ks=10,20``, ``--config.ablations=no_tags``)."""
    from icml26_jax.core.flags import as_tuple
    c.ks = as_tuple(c.ks, int, name="ks")
    c.hops = as_tuple(c.hops, int, name="hops")
    c.ablations = as_tuple(c.ablations, str, name="ablations")
    c.seeds = as_tuple(c.seeds, int, name="seeds")
    for name in c.calibration:
        c.calibration[name] = as_tuple(c.calibration[name], float, name=f"calibration.{name}")


def validate_config(c) -> None:
    """Raises ``ValueError`` naming the field and the allowed values."""
    if c.data not in configs.DATA:
        raise ValueError(f"config.data must be one of {', '.join(configs.DATA)}, got {c.data!r}")
    if c.data != "synthmem" and not c.data_path:
        raise ValueError(f"config.data={c.data} needs config.data_path (the user's JSON file)")
    if c.data != "synthmem" and not os.path.exists(c.data_path):
        raise ValueError(f"config.data_path {c.data_path!r} does not exist")
    if c.embedder not in configs.EMBEDDERS:
        raise ValueError(f"config.embedder must be one of {', '.join(configs.EMBEDDERS)}, got "
                         f"{c.embedder!r}")
    if c.reasoner not in configs.REASONERS:
        raise ValueError(f"config.reasoner must be one of {', '.join(configs.REASONERS)}, got "
                         f"{c.reasoner!r}")
    if c.reasoner == "openai" and not c.llm_base_url:
        raise ValueError("config.reasoner=openai needs config.llm_base_url (no default host)")
    for a in c.ablations:
        if a not in configs.ABLATIONS:
            raise ValueError(f"config.ablations: unknown {a!r}; allowed: "
                             f"{', '.join(configs.ABLATIONS)}")
    for k in c.ks:
        if isinstance(k, bool) or int(k) < 1:
            raise ValueError(f"config.ks must be integers >= 1, got {tuple(c.ks)}")
    for h in c.hops:
        if h not in (1, 2):
            raise ValueError(f"config.hops must be a subset of (1, 2), got {tuple(c.hops)}")
    if c.full_context_tokens < 1:
        raise ValueError(f"config.full_context_tokens must be >= 1, got {c.full_context_tokens}")
    s = c.synth
    if c.data == "synthmem" and not 0 <= s.n_dev < s.n_conversations:
        raise ValueError(f"config.synth.n_dev must be in [0, n_conversations), got {s.n_dev}")
    for name, values in c.calibration.items():
        if len(values) == 0:
            raise ValueError(f"config.calibration.{name} must list at least one value")
    if max(c.calibration.tau_abstain) > min(c.calibration.tau_stop):
        raise ValueError("config.calibration: every tau_abstain must be <= every tau_stop (the "
                         "abstain sweep then never changes when the walk stops)")
    budget(c)


def budget(c) -> agent.Budget:
    return agent.Budget(**{k: int(v) for k, v in c.budget.items()}).validate()


def _encode_strings(strings) -> np.ndarray:
    """Strings as one uint8 array (orbax stores arrays): utf-8 joined by NUL."""
    return np.frombuffer("\0".join(strings).encode("utf-8"), np.uint8).copy()


def _decode_strings(arr) -> list[str]:
    return bytes(np.asarray(arr, np.uint8)).decode("utf-8").split("\0")


# ----------------------------------------------------------------------------- data and graphs


def load_data(c, workdir: str):
    """(conversations, dev indices, test indices)."""
    if c.data == "locomo":
        convs = load_locomo(c.data_path)
        return convs, [], list(range(len(convs)))
    if c.data == "longmemeval":
        convs = load_longmemeval(c.data_path)
        return convs, [], list(range(len(convs)))
    # Process 0 writes the cached JSON, the others read it (one writer per file).
    convs = distributed.primary_first(
        lambda: synth.load_or_generate(c.synth, c.seed, os.path.join(workdir, "data")),
        "mragent_synthmem")
    n_dev = int(c.synth.n_dev)
    return convs, list(range(n_dev)), list(range(n_dev, len(convs)))


def make_embedder(c, contents):
    if c.embedder == "minilm":
        from icml26_jax.mragent.minilm import MiniLMEmbedder
        return MiniLMEmbedder()
    return Fitted.fit(contents, seed=0)


def build_graphs(c, convs):
    """Phase 1 for every conversation: (embedder, graphs, stage seconds)."""
    ex = graph_lib.RuleExtractor(seed=0)
    t0 = time.time()
    contents = [s[2] for conv in convs for s in ex.sentences(conv)]
    emb = make_embedder(c, contents)
    t1 = time.time()
    graphs = [graph_lib.build_graph(conv, ex, emb) for conv in convs]
    t2 = time.time()
    logging.info("phase 1: %d contents, %d graphs (fit %.1f s, build %.1f s)", len(contents),
                 len(graphs), t1 - t0, t2 - t1)
    return emb, graphs, {"fit_s": t1 - t0, "graphs_s": t2 - t1}


def synthmem_stats(convs) -> dict:
    """Shape of the benchmark: sessions, turns, questions, filler share."""
    return {"conversations": len(convs), "turns": sum(len(conv.turns()) for conv in convs),
            "sessions": sum(len(conv.sessions) for conv in convs),
            "questions": sum(len(conv.qa) for conv in convs),
            "filler_share": synth.filler_share(convs)}


# ----------------------------------------------------------------------------- methods


def method_names(c) -> list[str]:
    """Every method a run evaluates, MRAgent first."""
    names = ["mragent"] + list(c.ablations)
    for k in c.ks:
        names += [f"dense@{k}", f"bm25@{k}"] + ([f"ppr@{k}"] if c.ppr else [])
    names += [f"expand{h}" for h in c.hops] + ["full_context"]
    return names


class _Question:
    """One test item with what every method shares: its plan (answer type, cues, q_emb)."""

    def __init__(self, conv_i, qa_i, qa, graph, plan, hard, ppr_row):
        self.conv_i, self.qa_i, self.qa, self.graph, self.plan = conv_i, qa_i, qa, graph, plan
        self.hard, self.ppr_row = hard, ppr_row


def prepare(c, convs, graphs, idx, emb, masks) -> list[_Question]:
    """The test items of conversations ``idx``; PPR's question rows of each conversation are
    sharded over every device (``baselines.ppr_scores`` on a ``core.mesh.data_mesh``)."""
    mesh = mesh_lib.data_mesh()
    items = []
    for i in idx:
        g, conv = graphs[i], convs[i]
        if not conv.qa:
            continue
        qemb = emb.encode([q.question for q in conv.qa])
        plans = [make_plan(g, q.question, e) for q, e in zip(conv.qa, qemb)]
        rows = (baselines.ppr_scores(g, [p.cues for p in plans], mesh=mesh) if c.ppr
                else [None] * len(plans))
        for j, (q, p) in enumerate(zip(conv.qa, plans)):
            items.append(_Question(i, j, q, g, p, bool(masks[i][j]) if masks else False,
                                   rows[j]))
    return items


def _passive(name, item, c):
    kind, _, k = name.partition("@")
    g, p = item.graph, item.plan
    if kind == "dense":
        return baselines.dense_topk(g, p, int(k))
    if kind == "bm25":
        return baselines.bm25_topk(g, p, int(k))
    if kind == "ppr":
        return baselines.ppr_retrieve(g, p, int(k), item.ppr_row)
    if name.startswith("expand"):
        return baselines.graph_expand(g, p, int(name[-1]))
    if name == "full_context":
        return baselines.full_context(g, p, int(c.full_context_tokens))
    raise ValueError(f"unknown method {name!r}")


def run_method(name, items, c, reasoner, params: LocalParams, bud: agent.Budget) -> dict:
    """Per-question records of one method (numeric arrays + the answers)."""
    rec = {f: np.zeros(len(items)) for f in RECORD_FIELDS}
    answers = []
    for n, it in enumerate(items):
        t0 = time.perf_counter()
        if name == "mragent" or name in configs.ABLATIONS:
            tr = agent.reconstruct(it.graph, it.qa.question, reasoner, bud,
                                   ablation="none" if name == "mragent" else name, plan=it.plan
                                   if c.reasoner == "local" else None)
            ans, ids = tr.answer, tr.evidence
            cost = {"contents_read": tr.contents_read, "tags_read": tr.tags_read,
                    "tokens": tr.tokens, "tool_calls": tr.tool_calls, "rounds": tr.rounds,
                    "cap_hit": tr.cap_hit}
        else:
            r = _passive(name, it, c)
            ans, ids, cost = extractive_answer(it.graph, it.plan, r.ids, params), r.ids, r.cost
        rec["wall_ms"][n] = 1e3 * (time.perf_counter() - t0)
        rec["em"][n] = metrics.exact_match(ans.answer, it.qa.answer)
        rec["f1"][n] = metrics.token_f1(ans.answer, it.qa.answer)
        rec["recall"][n] = metrics.evidence_recall([it.graph.content_id[i] for i in ids],
                                                   it.qa.evidence)
        rec["confidence"][n] = ans.confidence
        for f in ("contents_read", "tags_read", "tokens", "tool_calls", "rounds", "cap_hit"):
            rec[f][n] = float(cost[f])
        answers.append(ans.answer)
    rec["answers"] = _encode_strings(answers)
    return rec


# ----------------------------------------------------------------------------- calibration


def calibrate(c, items, emb, bud: agent.Budget) -> dict:
    """Grid search of the local policy's thresholds on the dev items (spec: dev only).

    The walk parameters (theta, theta_hi, tau_stop, m_stop) are run; tau_abstain and the "now"
    margin only change the final answer, so they are swept on each run's stored evidence.
    Objective: mean EM over every dev question (abstention counts on adversarial ones); ties
    go to fewer contents read.
    """
    from icml26_jax.mragent.reasoner import answer_and_margin
    cal = c.calibration
    best, table = None, []
    for theta, theta_hi, tau_stop, m_stop in itertools.product(cal.theta, cal.theta_hi,
                                                               cal.tau_stop, cal.m_stop):
        base = LocalParams(theta=theta, theta_hi=theta_hi, tau_stop=tau_stop, m_stop=m_stop,
                           tau_abstain=-np.inf)
        r = LocalReasoner(base, encode=emb.encode)
        traces = [agent.reconstruct(it.graph, it.qa.question, r, bud, plan=it.plan)
                  for it in items]
        read = float(np.mean([t.contents_read for t in traces])) if traces else 0.0
        for tau_a, now_m in itertools.product(cal.tau_abstain, cal.now_margin):
            p = base._replace(tau_abstain=tau_a, now_margin=now_m)
            ems = []
            for it, t in zip(items, traces):
                ans = answer_and_margin(it.graph, it.plan, t.evidence, p)[0]
                ems.append(metrics.exact_match(ans.answer, it.qa.answer))
            em = float(np.mean(ems)) if ems else 0.0
            table.append((theta, theta_hi, tau_stop, m_stop, tau_a, now_m, em, read))
            if best is None or (em, -read) > (best[-2], -best[-1]):
                best = table[-1]
    theta, theta_hi, tau_stop, m_stop, tau_a, now_m, em, read = best
    logging.info("calibration: %d settings on %d dev questions; best EM %.3f (theta %g, "
                 "theta_hi %g, tau_stop %g, m_stop %g, tau_abstain %g, now_margin %g)",
                 len(table), len(items), em, theta, theta_hi, tau_stop, m_stop, tau_a, now_m)
    return {"params": np.asarray([theta, theta_hi, tau_stop, m_stop, tau_a, now_m]),
            "dev_em": np.asarray(em), "dev_contents_read": np.asarray(read),
            "grid": np.asarray(table)}


def params_from(cal) -> LocalParams:
    theta, theta_hi, tau_stop, m_stop, tau_a, now_m = (float(x) for x in cal["params"])
    return LocalParams(theta=theta, theta_hi=theta_hi, tau_stop=tau_stop, m_stop=m_stop,
                       tau_abstain=tau_a, now_margin=now_m)


# ----------------------------------------------------------------------------- run


def run(config, workdir: str) -> dict:
    """Runs the experiment of ``config`` in ``workdir``; returns the results dict."""
    from icml26_jax.core import results
    from icml26_jax.mragent import report

    c = config
    validate_config(c)
    t_start = time.time()
    stage = {}
    fp = checkpoint.config_fingerprint(c)
    ck = os.path.join(workdir, "checkpoints")
    bud = budget(c)

    t0 = time.time()
    convs, dev, test = load_data(c, workdir)
    stage["data_s"] = time.time() - t0
    emb, graphs, times = build_graphs(c, convs)
    stage.update(times)
    t0 = time.time()
    masks = None
    if c.data == "synthmem":
        masks = synth.bridge_hard_mask(convs, graphs, emb, int(c.hard_k))
        n_hard = int(sum(masks[i].sum() for i in test))
        pets = int(c.synth.pets)
        while n_hard < c.min_bridge_hard and pets < 4 * int(c.synth.pets):
            # Spec: the generator adds multi-hop questions until enough qualify.
            pets += 4
            logging.info("%d bridge-hard test questions < %d: regenerating with %d pets", n_hard,
                         c.min_bridge_hard, pets)
            c = c.copy_and_resolve_references()
            c.synth.pets = pets
            convs, dev, test = load_data(c, workdir)
            emb, graphs, _ = build_graphs(c, convs)
            masks = synth.bridge_hard_mask(convs, graphs, emb, int(c.hard_k))
            n_hard = int(sum(masks[i].sum() for i in test))
    stage["mask_s"] = time.time() - t0
    dev_items = prepare(c, convs, graphs, dev, emb, masks)
    test_items = prepare(c, convs, graphs, test, emb, masks)
    logging.info("%d dev / %d test questions, %d bridge-hard", len(dev_items), len(test_items),
                 sum(it.hard for it in test_items))

    t0 = time.time()
    if c.reasoner == "local" and dev_items:
        cal = checkpoint.cached(os.path.join(ck, "calibration"), fingerprint=fp,
                                compute=lambda: calibrate(c, dev_items, emb, bud),
                                name="calibration")
        params = params_from(cal)
    else:
        cal, params = None, LocalParams()
    stage["calibrate_s"] = time.time() - t0
    if c.reasoner == "openai":
        from icml26_jax.mragent.llm import OpenAIReasoner
        reasoner = OpenAIReasoner(c.llm_base_url, c.llm_model, encode=emb.encode)
    else:
        reasoner = LocalReasoner(params, encode=emb.encode)

    records = {}
    names = method_names(c)
    for i, name in enumerate(names):
        t0 = time.time()
        records[name] = checkpoint.cached(
            os.path.join(ck, "method_" + name.replace("@", "_at_")), fingerprint=fp,
            compute=lambda name=name: run_method(name, test_items, c, reasoner, params, bud),
            name=name)
        stage[f"eval_{name}_s"] = time.time() - t0
        r = records[name]
        logging.info("[%d/%d] %-14s EM %.3f  F1 %.3f  contents %.1f  tokens %.0f", i + 1,
                     len(names), name, float(np.mean(r["em"])), float(np.mean(r["f1"])),
                     float(np.mean(r["contents_read"])), float(np.mean(r["tokens"])))

    meta = {"category": np.asarray([it.qa.category for it in test_items]),
            "qtype": [it.qa.qtype for it in test_items],
            "hard": np.asarray([it.hard for it in test_items], bool)}
    m, claims = report.evaluate(c, records, meta, cal)
    m["stage_s"] = stage
    if c.data == "synthmem":
        m["data"] = synthmem_stats([convs[i] for i in test])
    if hasattr(reasoner, "usage"):  # online: the server's token counts next to chars / 4
        m["llm_usage"] = dict(reasoner.usage)
    figures = []
    if distributed.is_primary():
        figures = report.plots(c, records, meta, workdir)
        report.write_predictions(workdir, test_items, records)
    runtime = time.time() - t_start
    m["stage_s"]["total_s"] = runtime
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed, config=c,
                                 metrics=m, claims=claims, runtime_s=runtime, figures=figures)
    if distributed.is_primary():
        print(report.summary(c, m, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": m,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}
