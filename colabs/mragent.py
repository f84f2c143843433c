# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # MRAgent: memory is reconstructed, not retrieved
#
# *Memory is Reconstructed, Not Retrieved: Graph Memory for LLM Agents*, ICML 2026 (Ji, Li,
# Hooi). An agent's long conversation history is stored as a **Cue-Tag-Content graph**: cues
# (names, places, dates, content words) point through short **tags** (topic labels) to the
# sentences that mention them. Instead of retrieving a fixed top-k for the question,
# **active reconstruction** walks the graph: expand a (cue, tag) pair, read, harvest the new
# names in what was read, expand again. Step t + 1 depends on what step t read, so the agent
# can follow a chain whose middle link the question never names.
#
# Offline there is no LLM: a deterministic `LocalReasoner` plays the reasoner and one
# extractive answerer answers for every method. The data is SynthMem, a generated benchmark
# in the LoCoMo schema (numbers here are not LoCoMo numbers).
#
# 1. a SynthMem conversation and a multi-hop question over a hidden bridge;
# 2. phase 1: the rule extractor and the memory graph;
# 3. phase 2: the walk on a bridge-hard question, next to what dense top-20 reads;
# 4. the experiment at smoke size (`train.run`: calibration on dev, every method, claims).

# %% tags=["parameters"]
# Parameters (papermill sets them when it runs the notebook). REPO_URL: where to install
# icml26_jax from in a kernel that cannot import it, such as a fresh Colab runtime: its git
# URL, or a wheel or directory pip accepts. SMOKE = True shrinks every size so the notebook
# runs in a minute or two on a CPU; its numbers then mean nothing. WORKDIR: where results
# and figures go (empty: a new temporary directory).
REPO_URL = ""
SMOKE = False
WORKDIR = ""

# %%
# Install icml26_jax if this kernel cannot import it: from the checkout the notebook was
# opened in, else from REPO_URL. The install is not editable, so no restart is needed. On a
# GPU or TPU runtime the matching JAX extra comes with it.
import importlib
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

if importlib.util.find_spec("icml26_jax") is None:
    _here = pathlib.Path.cwd().resolve()
    _checkout = next((p for p in (_here, *_here.parents) if (p / "setup.cfg").is_file()
                      and (p / "icml26_jax" / "__init__.py").is_file()), None)
    _source = str(_checkout) if _checkout else REPO_URL.strip()
    if not _source:
        raise SystemExit("Set REPO_URL in the parameters cell to the icml26_jax git URL "
                         "(or a wheel), then run the notebook again.")
    if _source.startswith(("https://", "http://", "ssh://")) and not _source.endswith(
            (".whl", ".zip", ".tar.gz")):
        _source = "git+" + _source
    _extra = (["jax[cuda12]"] if shutil.which("nvidia-smi") else ["jax[tpu]"]
              if os.path.exists("/dev/accel0") or os.environ.get("TPU_ACCELERATOR_TYPE")
              else [])
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", _source, *_extra],
                   check=True)
    importlib.invalidate_caches()
    importlib.import_module("icml26_jax")  # fails here, not in a later cell, if it did not install

# %%
import jax

jax.config.update("jax_num_cpu_devices", 8)

import os
import tempfile

import numpy as np
from IPython.display import Image, display

from icml26_jax.mragent import agent, baselines, configs, graph, synth, train
from icml26_jax.mragent.reasoner import LocalParams, LocalReasoner, extractive_answer
from icml26_jax.mragent.types import EventKeywords, ExpandTag

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="mragent_")

# %% [markdown]
# ## 1. SynthMem
#
# Two speakers talk over 15-30 dated sessions about ~30 other people: pets given away and
# adopted, moves, jobs, purchases, events. Most turns are small talk or distractors; each fact
# uses one of >= 5 paraphrases, often with a relative time ("last Friday") that only the
# session date resolves.

# %%
cfg = configs.get_config("smoke")
convs = synth.generate(cfg.synth, seed=0)
conv = convs[1]
print(f"{len(convs)} conversations; this one: {len(conv.sessions)} sessions, "
      f"{len(conv.turns())} turns, {len(conv.qa)} questions")
for t in conv.sessions[0].turns[:8]:
    print(f"  {t.dia_id:6s} {t.speaker:8s} {t.text}")
turn_text = {t.dia_id: t.text for t in conv.turns()}
q = next(q for q in conv.qa if q.qtype == "multi_hop_2")
print("\nmulti-hop:", q.question, "->", q.answer)
for e in q.evidence:
    print(f"  evidence {e}: {turn_text[e]}")

# %% [markdown]
# ## 2. Phase 1: the memory graph
#
# `RuleExtractor` splits turns into sentences, resolves pronouns ("I" -> the speaker, "they"
# -> the latest person), types names by majority vote over their contexts, resolves times
# against the session date, and tags each sentence with the top TF-IDF words of its k-means
# cluster. The embedder (hashed tf-idf + LSA) is fitted on the contents only.

# %%
ex = graph.RuleExtractor()
emb, graphs, _ = train.build_graphs(cfg, convs)
g = graphs[1]
print(f"{g.n_contents} contents, {g.n_cues} cues, {len(g.tag_text)} tags, {len(g.edges)} edges")
for c in range(6):
    cues = [f"{g.cue_text[x]}/{g.cue_type[x]}" for x in g.content_cues[c]]
    print(f"  {g.content_id[c]:8s} [{g.tag_text[g.content_tag[c]]}] {g.content_text[c]}  {cues}")

# %% [markdown]
# ## 3. Phase 2: reconstruction vs. retrieval on a bridge-hard question
#
# A question is *bridge-hard* when its bridge turn is outside both the dense and the BM25
# top-20 of the question. Thresholds of the local policy come from the dev conversations.

# %%
masks = synth.bridge_hard_mask(convs, graphs, emb)
dev = train.prepare(cfg, convs, graphs, [0], emb, masks)
params = train.params_from(train.calibrate(cfg, dev, emb, train.budget(cfg)))
print("calibrated on dev:", {k: v for k, v in params._asdict().items()
                             if k in ("theta", "theta_hi", "tau_stop", "tau_abstain")})
reasoner = LocalReasoner(params, encode=emb.encode)
items = train.prepare(cfg, convs, graphs, [1, 2, 3], emb, masks)
hard = [it for it in items if it.hard]
wins = 0
for it in hard:
    tr = agent.reconstruct(it.graph, it.qa.question, reasoner, plan=it.plan)
    dense = baselines.dense_topk(it.graph, it.plan, 20)
    wins += (tr.answer.answer == it.qa.answer) and \
        extractive_answer(it.graph, it.plan, dense.ids, params).answer != it.qa.answer
print(f"{len(hard)} bridge-hard test questions; MRAgent right and dense@20 wrong on {wins}")

it = next(it for it in hard if agent.reconstruct(it.graph, it.qa.question, reasoner,
                                                 plan=it.plan).answer.answer == it.qa.answer)
g = it.graph
tr = agent.reconstruct(g, it.qa.question, reasoner, plan=it.plan)
print("\nQ:", it.qa.question, "| gold:", it.qa.answer)
print("question cues:", [g.cue_text[c] for c in it.plan.cues], "| answer type:",
      it.plan.answer_type)
for a in tr.actions:
    if isinstance(a, ExpandTag):
        print(f"  expand ({g.cue_text[a.cue]}, '{g.tag_text[a.tag]}')")
    elif isinstance(a, EventKeywords):
        print(f"  harvest keywords of: {g.content_text[a.content]}")
print(f"MRAgent answer: {tr.answer.answer} after {tr.rounds} rounds, {tr.tool_calls} calls, "
      f"{tr.contents_read} contents read")
dense = baselines.dense_topk(g, it.plan, 20)
print(f"dense@20 answer: {extractive_answer(g, it.plan, dense.ids, params).answer} from 20 "
      f"contents; the bridge turn {it.qa.evidence[1]} among them: "
      f"{any(g.content_id[i].startswith(it.qa.evidence[1] + '-') for i in dense.ids)}")

# %% [markdown]
# ## 4. The experiment at smoke size
#
# `train.run` calibrates on the dev conversation, runs MRAgent, the single-step ablation,
# dense / BM25 / PPR at k in {20, 40}, 1- and 2-hop expansion and full context on the test
# conversations, and evaluates the smoke claims (the default config adds k in {5, 10, 80},
# all four ablations and the other nine claims).

# %%
out = train.run(cfg, WORKDIR)
for c in out["claims"]:
    print(f"claim {c['name']}: {c['measured']:.3f} ({c['threshold']}) "
          f"{'holds' if c['holds'] else 'FAILS'}")
display(Image(os.path.join(WORKDIR, "em_vs_contents.png")))
display(Image(os.path.join(WORKDIR, "per_category.png")))
