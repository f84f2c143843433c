"""The interface the GRACE losses, controller, LSQ and packer consume (spec §Data, Real-data
path): a distillable VLM exposes ``forward(params, batch) -> VLMOut`` and
``quantizable_linears(params)``. ``FlaxVLM`` wraps our ``model.VLM``; a user with a real
checkpoint ports its weights into a Flax Llama/Qwen-style module behind the same two members,
or keeps the official PyTorch trainer and uses only ``int4.pack_int4`` (which accepts the
official per-layer ``weight``, ``log_scale`` arrays, transposed to ``[in, out]``) and
:func:`load_vqa_jsonl` + the evaluator.
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple, Protocol

from flax import nnx

from icml26_jax.grace import data as data_lib
from icml26_jax.grace import model as model_lib


class DistillableVLM(Protocol):
    """What GRACE needs from a teacher or a student."""

    vocab_size: int

    def forward(self, params, batch: data_lib.VQAData) -> model_lib.VLMOut:
        """Logits [B, S, V], penultimate hidden states [B, S, D], visual mask [B, S]."""

    def quantizable_linears(self, params) -> list[tuple]:
        """Paths of the linears that carry LSQ scales (the LLM decoder linears)."""


class FlaxVLM:
    """:class:`DistillableVLM` of a ``model.VLM`` split as ``(graphdef, frozen, trainable)``
    (``params`` = ``(frozen, trainable)``)."""

    def __init__(self, graphdef, vocab_size: int):
        self.graphdef, self.vocab_size = graphdef, int(vocab_size)

    def forward(self, params, batch):
        return nnx.merge(self.graphdef, *params)(batch.images, batch.tokens)

    def quantizable_linears(self, params):
        return [p for state in params for p in model_lib.quantizable_paths(state)]


def check_vocab(teacher: DistillableVLM, student: DistillableVLM) -> None:
    """Logit distillation compares distributions over one vocabulary: a hard check."""
    if int(teacher.vocab_size) != int(student.vocab_size):
        raise ValueError(f"teacher and student vocab sizes differ ({teacher.vocab_size} vs "
                         f"{student.vocab_size}); logit distillation needs one vocabulary")


class VQARecord(NamedTuple):
    image_path: str
    question: str
    answer: str


def load_vqa_jsonl(path: str) -> list[VQARecord]:
    """Evaluation records (``image``, ``question``, ``answer`` per line) of a real VQA set;
    ``ValueError`` naming the line of a malformed record."""
    if not os.path.exists(path):
        raise ValueError(f"VQA file {path!r} does not exist")
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not JSON ({e})") from None
            missing = {"image", "question", "answer"} - set(rec)
            if missing:
                raise ValueError(f"{path}:{i}: missing field(s) {sorted(missing)}")
            out.append(VQARecord(str(rec["image"]), str(rec["question"]), str(rec["answer"])))
    if not out:
        raise ValueError(f"VQA file {path!r} has no records")
    return out
