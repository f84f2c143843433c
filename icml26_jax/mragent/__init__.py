"""MRAgent (ICML 2026): graph memory for LLM agents, reconstructed rather than retrieved.

In progress (issue 12): ``schema`` the LoCoMo-schema conversations and the LoCoMo /
LongMemEval loaders; ``timeref`` relative times resolved against the session date; ``embed`` the
deterministic hashed tf-idf + LSA embedder;
``metrics`` answer normalisation, EM, token F1, evidence recall and the paired bootstrap.
"""

from icml26_jax.mragent import embed, metrics, schema, timeref

__all__ = ["embed", "metrics", "schema", "timeref"]
