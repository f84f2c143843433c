"""Chain-of-Frame trajectories (F1 draft, F2 semantically correct but flat, F3 refined) and
training batches per arm (spec §Data [R]: the CoF-Evol-Instruct substitute).

* **F1** is a ``flat`` render of a minimally edited scene with exactly one semantic error of
  the prompt's type (count +-1, wrong colour, swapped relation, missing object, wrong shape,
  or swapped attribution), plus a small layout jitter.
* **F2** is the ``flat`` render and **F3** the ``refined`` render of one and the same scene
  graph, which satisfies the prompt.
* **Construction modes**, mixed 30 / 42 / 28 % as CoF-Evol-Instruct's: ``forward`` (a loose
  draft is drawn first, then minimally fixed, then refined), ``bidirectional`` (a correct
  flat scene is corrupted for F1 and refined for F3), ``backward`` (a refined scene is
  stripped to flat for F2 and then corrupted for F1).
* **Check**: the scene graph verifies every trajectory (F2 and F3 satisfy the metadata, F1
  violates it), with up to 3 retries.

The text side is a closed word vocabulary (``VOCAB``, 40 words) and ``tokenize``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from icml26_jax.cof_t2i import scenes

MODES = ("forward", "bidirectional", "backward")
MODE_P = (0.30, 0.42, 0.28)
ARMS_FRAMES = {"cof": (0, 1, 2), "repeat": (2, 2, 2), "single": (2,), "single_3x": (2,),
               "cof_f2f3": (1, 2)}
JITTER = 1.0  # pixels of layout jitter in the draft
MAX_TOKENS = 12
PAD = 0

VOCAB = ("<pad>", "a", "an", "photo", "of", "and", "two", "three", "four",
         *scenes.SHAPES, "circles", "squares", "triangles", "crosses",
         *scenes.COLORS, "left", "right", "above", "below")
VOCAB = VOCAB + tuple(f"<unused{i}>" for i in range(40 - len(VOCAB)))
_IDS = {w: i for i, w in enumerate(VOCAB)}


def tokenize(prompt: str, max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """Words -> ``int32[max_tokens]`` ids, 0-padded. Every prompt word is in ``VOCAB``."""
    words = prompt.lower().split()
    unknown = [w for w in words if w not in _IDS]
    if unknown:
        raise ValueError(f"prompt words {unknown} are not in the vocabulary")
    if len(words) > max_tokens:
        raise ValueError(f"prompt has {len(words)} words, more than max_tokens={max_tokens}")
    out = np.zeros((max_tokens,), np.int32)
    out[:len(words)] = [_IDS[w] for w in words]
    return out


# --------------------------------------------------------------------------- corruption

def _jitter(scene: scenes.Scene, rng: np.random.Generator, res: int) -> scenes.Scene:
    """Moves every object by up to ``JITTER`` px where the gaps allow it."""
    objs = list(scene.objs)
    for i, o in enumerate(objs):
        moved = o._replace(x=scenes.snap(o.x + rng.uniform(-JITTER, JITTER), o.size),
                           y=scenes.snap(o.y + rng.uniform(-JITTER, JITTER), o.size))
        others = objs[:i] + objs[i + 1:]
        if scenes._gap_ok(moved, others, res):
            objs[i] = moved
    return scenes.Scene(tuple(objs))


def _place(o: scenes.Obj, others, rng, res) -> scenes.Obj | None:
    h = o.size / 2 + 1
    for _ in range(60):
        x, y = (scenes.snap(v, o.size) for v in rng.uniform(h, res - h, 2))
        cand = o._replace(x=x, y=y)
        if scenes._gap_ok(cand, others, res):
            return cand
    return None


def corrupt(scene: scenes.Scene, metadata: dict, rng: np.random.Generator,
            avoid: frozenset = frozenset(), res: int = scenes.RES) -> scenes.Scene:
    """A minimal edit with exactly one semantic error of the prompt's type.

    single_object / two_object: a missing object or a wrong shape; counting: count +-1;
    colors: a wrong colour; position: the two objects swap places (swapped relation);
    color_attr: swapped attribution or a wrong colour. New colours never form a pair in
    ``avoid``. Raises ``RuntimeError`` when no violating edit is found.
    """
    tag = metadata["tag"]
    objs = list(scene.objs)
    for _ in range(30):
        new = None
        if tag in ("single_object", "two_object"):
            i = int(rng.integers(len(objs)))
            if rng.random() < 0.5:
                new = objs[:i] + objs[i + 1:]  # missing object
            else:
                named = {c["class"] for c in metadata["include"]}
                shapes = [s for s in scenes.SHAPES if s not in named
                          and (objs[i].color, s) not in avoid]
                if shapes:
                    new = list(objs)
                    new[i] = objs[i]._replace(shape=shapes[int(rng.integers(len(shapes)))])
        elif tag == "counting":
            if rng.random() < 0.5 and len(objs) > 1:
                i = int(rng.integers(len(objs)))
                new = objs[:i] + objs[i + 1:]
            else:
                extra = _place(objs[int(rng.integers(len(objs)))], objs, rng, res)
                if extra is not None:
                    new = objs + [extra]
        elif tag == "colors" or (tag == "color_attr" and rng.random() < 0.5):
            i = int(rng.integers(len(objs)))
            colors = [c for c in scenes.COLORS if c != objs[i].color
                      and (c, objs[i].shape) not in avoid]
            new = list(objs)
            new[i] = objs[i]._replace(color=colors[int(rng.integers(len(colors)))])
        elif tag == "color_attr":  # swapped attribution
            a, b = objs
            if (b.color, a.shape) not in avoid and (a.color, b.shape) not in avoid:
                new = [a._replace(color=b.color), b._replace(color=a.color)]
        elif tag == "position":  # the two objects trade places
            a, b = objs
            new = [a._replace(x=scenes.snap(b.x, a.size), y=scenes.snap(b.y, a.size)),
                   b._replace(x=scenes.snap(a.x, b.size), y=scenes.snap(a.y, b.size))]
            if not all(scenes._gap_ok(o, [p for p in new if p is not o], res) for o in new):
                new = None
        else:
            raise ValueError(f"tag must be one of {scenes.TAGS}, got {tag!r}")
        if new is not None:
            out = _jitter(scenes.Scene(tuple(new)), rng, res)
            if not scenes.satisfies(out, metadata):
                return out
    raise RuntimeError(f"could not corrupt a scene for {metadata['prompt']!r}")


def _fix_draft(draft: scenes.Scene, metadata: dict, rng, avoid, res) -> scenes.Scene:
    """Forward mode: the smallest fix of a draft that satisfies the metadata (keep every
    object the prompt can use where it is, add or recolour the rest)."""
    # Start from the draft's layout; re-sample only if the draft cannot be repaired in place.
    for _ in range(20):
        target = scenes.sample_scene(metadata, rng, res, avoid)
        kept = []
        for t in target.objs:  # reuse a draft object's place when shape and colour allow
            match = [o for o in draft.objs if o.shape == t.shape and o not in kept
                     and o.size == t.size]
            cand = t if not match else t._replace(x=match[0].x, y=match[0].y)
            kept.append(cand if scenes._gap_ok(cand, kept, res) else t)
        fixed = scenes.Scene(tuple(kept))
        spaced = all(scenes._gap_ok(o, kept[:i] + kept[i + 1:], res) for i, o in enumerate(kept))
        if (spaced and scenes.satisfies(fixed, metadata)
                and scenes._clear_relations(fixed, metadata)):
            return fixed
    return scenes.sample_scene(metadata, rng, res, avoid)


class Trajectory(NamedTuple):
    frames: np.ndarray  # uint8 [3, res, res, 3]: F1, F2, F3
    draft: scenes.Scene  # F1's scene
    scene: scenes.Scene  # F2's and F3's scene
    mode: str


def build(metadata: dict, mode: str, rng: np.random.Generator, avoid: frozenset = frozenset(),
          res: int = scenes.RES) -> Trajectory:
    """One verified trajectory for ``metadata`` in construction ``mode`` (3 retries)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    for _ in range(4):
        try:
            if mode == "forward":
                loose = scenes.sample_scene(metadata, rng, res, avoid)
                draft = corrupt(loose, metadata, rng, avoid, res)
                scene = _fix_draft(draft, metadata, rng, avoid, res)
            else:  # bidirectional and backward both derive F1 from the correct scene
                scene = scenes.sample_scene(metadata, rng, res, avoid)
                draft = corrupt(scene, metadata, rng, avoid, res)
        except RuntimeError:
            continue
        if scenes.satisfies(scene, metadata) and not scenes.satisfies(draft, metadata):
            frames = np.stack([scenes.render(draft, "flat", res), scenes.render(scene, "flat", res),
                               scenes.render(scene, "refined", res)])
            return Trajectory(frames, draft, scene, mode)
    raise RuntimeError(f"no verified trajectory for {metadata['prompt']!r} ({mode})")


def sample_mode(rng: np.random.Generator) -> str:
    """A construction mode with CoF-Evol-Instruct's mix (30 / 42 / 28 %)."""
    return MODES[int(rng.choice(len(MODES), p=MODE_P))]


class Batch(NamedTuple):
    frames: np.ndarray  # uint8 [n, F, res, res, 3]
    text_ids: np.ndarray  # int32 [n, L]
    text_mask: np.ndarray  # bool [n, L]


def sample_batch(n: int, arm: str, rng: np.random.Generator, holdout: str = "train",
                 res: int = scenes.RES) -> Batch:
    """``n`` training examples of ``arm`` (tags uniform, modes 30/42/28)."""
    if arm not in ARMS_FRAMES:
        raise ValueError(f"arm must be one of {tuple(ARMS_FRAMES)}, got {arm!r}")
    avoid = scenes.HELDOUT_PAIRS if holdout == "train" else frozenset()
    sel = ARMS_FRAMES[arm]
    frames = np.zeros((n, len(sel), res, res, 3), np.uint8)
    ids = np.zeros((n, MAX_TOKENS), np.int32)
    for i in range(n):
        tag = scenes.TAGS[int(rng.integers(len(scenes.TAGS)))]
        prompt, md = scenes.sample_prompt(tag, rng, holdout)
        mode = sample_mode(rng)
        tr = build(md, mode, rng, avoid, res)
        frames[i] = tr.frames[list(sel)]
        ids[i] = tokenize(prompt)
    return Batch(frames, ids, ids != PAD)
