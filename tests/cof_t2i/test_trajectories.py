"""CoF-T2I spec §Tests 3: verified trajectories (F2 and F3 satisfy the prompt, F1 violates it
with an error of the tag's type, F2 and F3 share one scene graph), the mode mix, batches."""

from collections import Counter

import numpy as np
import pytest

from icml26_jax.cof_t2i import evaluator as E
from icml26_jax.cof_t2i import scenes as S
from icml26_jax.cof_t2i import trajectories as T


def _error_kind(draft, scene, tag):
    if len(draft.objs) != len(scene.objs):
        return "count" if tag == "counting" else "missing"
    shapes = Counter(o.shape for o in draft.objs) != Counter(o.shape for o in scene.objs)
    colors = Counter((o.shape, o.color) for o in draft.objs) != Counter(
        (o.shape, o.color) for o in scene.objs)
    if shapes:
        return "shape"
    if colors:
        return "color"
    return "layout"


ALLOWED = {"single_object": {"missing", "shape"}, "two_object": {"missing", "shape"},
           "counting": {"count"}, "colors": {"color"}, "position": {"layout"},
           "color_attr": {"color"}}


def test_trajectories_are_verified_and_errors_match_the_tag():
    rng = np.random.default_rng(0)
    for i in range(240):
        tag = S.TAGS[i % 6]
        _, md = S.sample_prompt(tag, rng)
        mode = T.MODES[i % 3]
        tr = T.build(md, mode, rng, S.HELDOUT_PAIRS)
        assert tr.frames.shape == (3, 32, 32, 3) and tr.frames.dtype == np.uint8
        assert S.satisfies(tr.scene, md) and not S.satisfies(tr.draft, md)
        assert _error_kind(tr.draft, tr.scene, tag) in ALLOWED[tag], (md["prompt"], mode)
        # F2 and F3 render one scene graph; F1 is the flat render of the draft
        np.testing.assert_array_equal(tr.frames[1], S.render(tr.scene, "flat"))
        np.testing.assert_array_equal(tr.frames[2], S.render(tr.scene, "refined"))
        np.testing.assert_array_equal(tr.frames[0], S.render(tr.draft, "flat"))
        # the evaluator (pixels only) agrees: F2 and F3 correct, F1 rejected
        assert E.evaluate(tr.frames[1], md)[0] and E.evaluate(tr.frames[2], md)[0]
        assert not E.evaluate(tr.frames[0], md)[0], md["prompt"]
        # drafts keep training colours out of the held-out pairs
        assert not {(o.color, o.shape) for o in tr.draft.objs} & S.HELDOUT_PAIRS


def test_mode_mix():
    rng = np.random.default_rng(1)
    counts = Counter(T.sample_mode(rng) for _ in range(2000))
    for mode, p in zip(T.MODES, T.MODE_P):
        assert abs(counts[mode] / 2000 - p) <= 0.03, counts


def test_batches_per_arm_and_tokens():
    rng = np.random.default_rng(2)
    cof = T.sample_batch(6, "cof", rng)
    assert cof.frames.shape == (6, 3, 32, 32, 3) and cof.text_ids.shape == (6, T.MAX_TOKENS)
    np.testing.assert_array_equal(cof.text_mask, cof.text_ids != 0)
    rep = T.sample_batch(2, "repeat", np.random.default_rng(3))
    np.testing.assert_array_equal(rep.frames[:, 0], rep.frames[:, 2])
    single = T.sample_batch(2, "single", np.random.default_rng(3))
    assert single.frames.shape == (2, 1, 32, 32, 3)
    np.testing.assert_array_equal(single.frames[:, 0], rep.frames[:, 2])  # F3 of the same draw
    assert len(T.VOCAB) == 40
    ids = T.tokenize("a photo of a red cross left of a circle")
    assert [T.VOCAB[i] for i in ids if i] == "a photo of a red cross left of a circle".split()
    with pytest.raises(ValueError, match="not in the vocabulary"):
        T.tokenize("a photo of a dog")
    with pytest.raises(ValueError, match="arm must be one of"):
        T.sample_batch(1, "video", rng)
    with pytest.raises(ValueError, match="mode must be one of"):
        T.build({"tag": "colors"}, "sideways", rng)


def test_every_mode_keeps_the_minimum_gap_between_objects():
    """Each trajectory scene is a valid layout (the detector relies on separate components):
    forward mode's repaired scene used to place kept objects on top of new ones."""
    rng = np.random.default_rng(4)
    for i in range(300):
        tag = S.TAGS[i % 6]
        _, md = S.sample_prompt(tag, rng)
        tr = T.build(md, "forward" if i % 2 else T.sample_mode(rng), rng, S.HELDOUT_PAIRS)
        objs = list(tr.scene.objs)
        for j, o in enumerate(objs):
            assert S._gap_ok(o, objs[:j] + objs[j + 1:], S.RES), (md["prompt"], tr.mode)
