"""MRAgent (ICML 2026): graph memory for LLM agents, reconstructed rather than retrieved.

In progress (issue 12): ``schema`` the LoCoMo-schema conversations and the LoCoMo /
LongMemEval loaders; ``timeref`` relative times resolved against the session date; ``embed`` the
deterministic hashed tf-idf + LSA embedder; ``baselines`` top-k with id tie-breaks, BM25 and
personalised PageRank (the passive retrieval cores);
``metrics`` answer normalisation, EM, token F1, evidence recall and the paired bootstrap.
"""

from icml26_jax.mragent import baselines, embed, metrics, schema, timeref

__all__ = ["baselines", "embed", "metrics", "schema", "timeref"]
