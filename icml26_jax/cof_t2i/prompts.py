"""CoF-T2I prompt metadata: the fixed test and validation prompt sets (their own seeds, like
GenEval's fixed metadata file), their JSONL files and their tokenisation."""

from __future__ import annotations

import json

import numpy as np

from icml26_jax.cof_t2i import scenes
from icml26_jax.cof_t2i import trajectories as traj

TEST_SEED = 20260116  # fixed test metadata (independent of the run seed)
VAL_SEED = 20260117
COMBO_TAGS = ("colors", "position", "color_attr")  # tags with held-out combinations


def prompt_set(per_tag: int, seed: int, exclude=frozenset()) -> list[dict]:
    """``per_tag`` prompts' metadata for each of the six tags, drawn with ``seed``.

    For tags with combinations, half of the prompts (rounded up) name a held-out
    combination. Prompt strings are distinct within the set and avoid ``exclude`` while the
    tag's prompt space allows (``single_object`` has only 4 prompts, ``two_object`` and
    ``counting`` 12: those repeat).
    """
    rng = np.random.default_rng(seed)
    out = []
    for tag in scenes.TAGS:
        n_held = (per_tag + 1) // 2 if tag in COMBO_TAGS else 0
        chosen: list[dict] = []
        for k in range(per_tag):
            kind = "heldout" if k < n_held else "train"
            md = None
            for _ in range(200):
                _, cand = scenes.sample_prompt(tag, rng, kind)
                if cand["prompt"] not in exclude and all(
                        cand["prompt"] != c["prompt"] for c in chosen):
                    md = cand
                    break
            if md is None:  # the tag's prompt space is exhausted: allow a repeat
                md = scenes.sample_prompt(tag, rng, kind)[1]
            chosen.append(md)
        out += chosen
    return out


def test_metadata(per_tag: int) -> list[dict]:
    return prompt_set(per_tag, TEST_SEED)


def val_metadata(per_tag: int, test: list[dict]) -> list[dict]:
    return prompt_set(per_tag, VAL_SEED, exclude=frozenset(m["prompt"] for m in test))


def write_metadata_jsonl(path: str, rows: list[dict]) -> str:
    """GenEval's metadata format: one JSON object per line."""
    with open(path, "w") as f:
        for md in rows:
            f.write(json.dumps(md) + "\n")
    return path


def load_metadata_jsonl(path: str) -> list[dict]:
    """Reads GenEval-format metadata (ours, or the official ``evaluation_metadata.jsonl``)."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for i, md in enumerate(rows):
        if md.get("tag") not in scenes.TAGS or "include" not in md:
            raise ValueError(f"{path} line {i + 1}: needs a 'tag' in {scenes.TAGS} and an "
                             "'include' list")
    return rows


def tokenize_all(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.stack([traj.tokenize(md["prompt"]) for md in rows])
    return ids, ids != traj.PAD
