"""MRAgent (ICML 2026): graph memory for LLM agents, reconstructed rather than retrieved.

* ``schema`` -- LoCoMo-schema conversations, the LoCoMo / LongMemEval loaders;
* ``synth`` -- SynthMem, the generated benchmark, and the bridge-hard filter;
* ``timeref`` -- relative times resolved against the session date;
* ``embed`` -- the hashed tf-idf + LSA embedder (``minilm``/``model``: the optional MiniLM);
* ``graph`` -- phase 1: the rule extractor and the Cue-Tag-Content ``MemoryGraph``;
* ``reasoner`` -- the query plan, the shared extractive answerer and the ``LocalReasoner``;
* ``agent`` -- phase 2: active reconstruction with its budgets and ablations;
* ``baselines`` -- dense, BM25, graph expansion, personalised PageRank, full context;
* ``llm`` -- the online ``OpenAIReasoner`` and ``LLMExtractor`` (OpenAI-compatible HTTP);
* ``metrics`` -- EM, token F1, evidence recall, the paired bootstrap;
* ``train`` / ``report`` / ``configs`` -- the experiment.
"""

from icml26_jax.mragent import (agent, baselines, embed, graph, metrics, reasoner, schema, synth,
                                timeref)

__all__ = ["agent", "baselines", "embed", "graph", "metrics", "reasoner", "schema", "synth",
           "timeref"]
