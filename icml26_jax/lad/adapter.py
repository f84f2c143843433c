"""The scorer protocol every calibration, debiasing and metric function consumes (spec §Data,
Real-data path): a model that, for a tokenized batch of episodes, returns the candidate
log-probabilities and the per-layer attention scores of the images, from ONE forward pass.

``FlaxRetrievalScorer`` wraps the substitute ``model.RetrievalLM``; a user with a real
multimodal checkpoint implements the same two members (e.g. with PyTorch hooks on the
``self_attn`` modules of the candidate layers) and runs the same calibration.
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import PartitionSpec as P

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.lad import agd
from icml26_jax.lad import data as data_lib
from icml26_jax.lad import model as model_lib


class RetrievalScorer(Protocol):
    """What LAD needs from a model."""

    num_layers: int

    def score(self, episodes, layers) -> tuple[np.ndarray, np.ndarray]:
        """``(logp [B, N], layer_scores [B, len(layers), N])`` of B episodes (N candidates
        each), one forward pass per episode; the scorer builds its own prompts."""


class FlaxRetrievalScorer:
    """:class:`RetrievalScorer` of a split :class:`model.RetrievalLM`, jitted once per
    (N, layers), counting forward passes (``n_forward``: one per instance).

    Args:
      graphdef, params: ``nnx.split(model, nnx.Param)``.
      mesh: optional ``core.mesh.data_mesh()``; each chunk is padded to a multiple of the
        device count and sharded over ``DATA`` (sharded == unsharded, tested), and the
        scores are gathered from every process.
      chunk: instances per call (bounds memory).
    """

    def __init__(self, graphdef, params, *, mesh=None, chunk: int = 2048):
        self.graphdef, self.params = graphdef, params
        self.num_layers = int(nnx.merge(graphdef, params).num_layers)
        self.mesh = mesh
        if mesh is not None:
            self._replicated = jax.tree.map(lambda x: mesh_lib.replicate(np.asarray(x), mesh),
                                            params)
        self.chunk = int(chunk)
        self.n_forward = 0  # forward passes (instances scored) so far
        self._fns = {}

    def _fn(self, spans, layers):
        key = (tuple(map(tuple, np.asarray(spans).tolist())), tuple(layers))
        if key not in self._fns:
            index_ids = jnp.asarray(data_lib.index_token_ids(len(spans)))
            sp, ly = jnp.asarray(spans), jnp.asarray(layers)

            def f(params, tokens, patches, is_patch, last_idx):
                logits, attn = model_lib.logits_and_attention(
                    self.graphdef, params, data_lib.Batch(tokens, patches, is_patch, last_idx,
                                                          None))
                return agd.candidate_logprobs(logits, index_ids), agd.layer_scores(attn, sp, ly)

            if self.mesh is not None:  # a local map per device over the batch axis
                f = jax.shard_map(f, mesh=self.mesh, in_specs=(P(),) + (P(mesh_lib.DATA),) * 4,
                                  out_specs=P(mesh_lib.DATA), check_vma=False)
            self._fns[key] = jax.jit(f)
        return self._fns[key]

    def score(self, episodes: data_lib.Episodes, layers):
        """``(logp [B, N], layer_scores [B, Lc, N])`` of the episodes as host arrays."""
        return self.score_batch(data_lib.tokenize(episodes), layers)

    def score_batch(self, batch: data_lib.Batch, layers):
        """:meth:`score` of an already tokenized batch."""
        layers = tuple(int(x) for x in layers)
        bad = [x for x in layers if not 0 <= x < self.num_layers]
        if bad or not layers:
            raise ValueError(f"layers must be a non-empty subset of 0..{self.num_layers - 1}, "
                             f"got {layers}")
        fn = self._fn(batch.spans, layers)
        B = len(batch.last_idx)
        params = self.params if self.mesh is None else self._replicated
        # core.mesh.batched pads every chunk to a multiple of the device count, shards it over
        # DATA and gathers the outputs from every process.
        lp, sc = mesh_lib.batched(lambda *b: fn(params, *b), B, min(self.chunk, B),
                                  batch.tokens, batch.patches, batch.is_patch, batch.last_idx,
                                  mesh=self.mesh)
        self.n_forward += B
        return lp, sc
