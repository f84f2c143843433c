"""CoF-T2I spec §Tests 1 and 4 (scene half): GenEval's relative-position rule against hand
cases and a brute-force restatement, the held-out split, scenes that satisfy their prompts,
and renders whose objects agree between the flat and refined styles."""

import numpy as np
import pytest

from icml26_jax.cof_t2i import scenes as S


def test_relative_position_hand_cases():
    a, b = (0, 0, 10, 10), (20, 0, 30, 10)  # A 20 px left of B, same row
    assert S.relative_position(a, b) == {"left of"}
    assert S.relative_position(b, a) == {"right of"}
    assert S.relative_position((0, 20, 10, 30), (0, 0, 10, 10)) == {"below"}  # y points down
    assert S.relative_position((0, 0, 10, 10), (0, 20, 10, 30)) == {"above"}
    # Diagonal at 45 degrees: offset (20, 20), shrunk by 0.1 * 20 = 2 per axis -> 18 / 28.3
    # = 0.64 > 0.5 on both axes: two relations.
    assert S.relative_position((20, 20, 30, 30), (0, 0, 10, 10)) == {"right of", "below"}
    # A small offset is shrunk to nothing: offset 1.5 < 0.1 * (10 + 10) = 2.
    assert S.relative_position((1.5, 0, 11.5, 10), (0, 0, 10, 10)) == set()
    # Mostly horizontal: offset (10, 4) with widths 10 + 10: (10 - 2, 4 - 2) / 10.77 =
    # (0.74, 0.19): right of only.
    assert S.relative_position((10, 4, 20, 14), (0, 0, 10, 10)) == {"right of"}


def _brute(a, b, th=0.1):
    ca = ((a[0] + a[2]) / 2, (a[1] + a[3]) / 2)
    cb = ((b[0] + b[2]) / 2, (b[1] + b[3]) / 2)
    off = (ca[0] - cb[0], ca[1] - cb[1])
    dims = (abs(a[2] - a[0]) + abs(b[2] - b[0]), abs(a[3] - a[1]) + abs(b[3] - b[1]))
    rev = []
    for o, d in zip(off, dims):
        m = max(abs(o) - th * d, 0.0)
        rev.append(m if o > 0 else -m if o < 0 else 0.0)
    if abs(rev[0]) < 1e-3 and abs(rev[1]) < 1e-3:
        return set()
    norm = (off[0] ** 2 + off[1] ** 2) ** 0.5
    out = set()
    if rev[0] / norm < -0.5:
        out.add("left of")
    if rev[0] / norm > 0.5:
        out.add("right of")
    if rev[1] / norm < -0.5:
        out.add("above")
    if rev[1] / norm > 0.5:
        out.add("below")
    return out


def test_relative_position_matches_a_brute_force_restatement():
    rng = np.random.default_rng(0)
    for _ in range(1000):
        a0, b0 = rng.uniform(0, 24, 2), rng.uniform(0, 24, 2)
        sa, sb = rng.uniform(2, 10, 2), rng.uniform(2, 10, 2)
        a = (a0[0], a0[1], a0[0] + sa[0], a0[1] + sa[1])
        b = (b0[0], b0[1], b0[0] + sb[0], b0[1] + sb[1])
        assert S.relative_position(a, b) == _brute(a, b), (a, b)


def test_heldout_combinations_never_occur_in_training_prompts_or_scenes():
    assert len(S.HELDOUT_PAIRS) == 5 and len(S.HELDOUT_TRIPLES) == 10
    rng = np.random.default_rng(1)
    seen_pairs, seen_triples = set(), set()
    for i in range(10_000):
        tag = S.TAGS[i % 6]
        _, md = S.sample_prompt(tag, rng, "train")
        pairs, triples = S.prompt_combos(md)
        assert not md["heldout"] and not pairs & S.HELDOUT_PAIRS
        assert not triples & S.HELDOUT_TRIPLES
        seen_pairs |= pairs
        seen_triples |= triples
    # every training combination does occur (the held-out ones are the only gaps)
    assert len(seen_pairs) == 24 - 5 and len(seen_triples) == 48 - 10
    for i in range(300):  # training scenes never draw a held-out pair for a free colour
        _, md = S.sample_prompt(S.TAGS[i % 3], rng, "train")
        scene = S.sample_scene(md, rng, avoid=S.HELDOUT_PAIRS)
        assert not {(o.color, o.shape) for o in scene.objs} & S.HELDOUT_PAIRS
    for tag in ("colors", "position", "color_attr"):
        _, md = S.sample_prompt(tag, rng, "heldout")
        assert md["heldout"] and S.is_heldout(md)


def test_prompts_follow_geneval_templates_and_scenes_satisfy_them():
    rng = np.random.default_rng(2)
    _, md = S.sample_prompt("counting", rng)
    n = md["include"][0]["count"]
    assert md["exclude"] == [{"class": md["include"][0]["class"], "count": n + 1}]
    assert md["prompt"].startswith(f"a photo of {S.NUMBERS[n]} ")
    for i in range(240):
        tag = S.TAGS[i % 6]
        prompt, md = S.sample_prompt(tag, rng, "any")
        assert md["tag"] == tag and prompt == md["prompt"] and prompt.startswith("a photo of ")
        scene = S.sample_scene(md, rng)
        assert S.satisfies(scene, md)
        boxes = [o.box for o in scene.objs]
        for j, a in enumerate(boxes):  # inside the canvas, 2 px apart
            assert a[0] >= 1 and a[1] >= 1 and a[2] <= 31 and a[3] <= 31
            for b in boxes[j + 1:]:
                assert (a[2] + 2 <= b[0] or b[2] + 2 <= a[0] or a[3] + 2 <= b[1]
                        or b[3] + 2 <= a[1])
    # a scene missing its object, or one object too many, fails the verifier
    _, md = S.sample_prompt("counting", rng)
    scene = S.sample_scene(md, rng)
    assert not S.satisfies(S.Scene(scene.objs[:-1]), md)
    assert not S.satisfies(S.Scene(scene.objs + scene.objs[:1]), md)


def test_flat_and_refined_renders_agree_on_object_masks():
    rng = np.random.default_rng(3)
    for i in range(30):
        _, md = S.sample_prompt(S.TAGS[i % 6], rng)
        scene = S.sample_scene(md, rng)
        flat, ref = S.render(scene, "flat"), S.render(scene, "refined")
        assert flat.dtype == ref.dtype == np.uint8 and flat.shape == ref.shape == (32, 32, 3)
        for o in scene.objs:
            m = S.object_mask(o)
            # the flat render paints exactly the object's pixels in its colour
            np.testing.assert_array_equal(flat[m], np.broadcast_to(S.RGB[o.color],
                                                                   (m.sum(), 3)))
            # the refined render: the same pixels, the same hue (shading changes value only)
            # pixels fully inside the fill (2x coverage 1)
            inner = S.shape_mask(o.shape, o.x, o.y, o.size, 32, 2).reshape(
                32, 2, 32, 2).mean((1, 3)) == 1.0
            rgb = ref[inner].astype(float)
            col = np.asarray(S.RGB[o.color], float)
            cos = rgb @ col / (np.linalg.norm(rgb, axis=1) * np.linalg.norm(col) + 1e-9)
            # > 0.98 rather than 1: bright shading clips a channel at 255.
            assert inner.any() and cos.min() > 0.98, (o, cos.min())
            assert m.sum() >= 20  # every object keeps a solid body at 32 x 32
        np.testing.assert_array_equal(S.render(scene, "refined"), ref)  # deterministic


def test_bad_arguments_raise():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="tag must be one of"):
        S.sample_prompt("spatial", rng)
    with pytest.raises(ValueError, match="no held-out prompts"):
        S.sample_prompt("counting", rng, "heldout")
    with pytest.raises(ValueError, match="style must be one of"):
        S.render(S.Scene(()), "glossy")
    with pytest.raises(ValueError, match="shape must be one of"):
        S.shape_mask("star", 5, 5, 8, 32)
