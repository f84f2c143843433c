"""CoF-T2I spec §Tests 2 (the evaluator's smoke-scale claim test) and GenEval's scoring
rules on hand-built images."""

import numpy as np
import pytest

from icml26_jax.cof_t2i import evaluator as E
from icml26_jax.cof_t2i import scenes as S


def _img(*objs):
    return S.render(S.Scene(tuple(objs)), "flat")


def test_evaluator_scores_clean_renders_per_tag():
    """>= 0.99 per tag on 20 refined and 20 flat renders per tag (test prompts, half of them
    held-out combinations where the tag has any)."""
    rng = np.random.default_rng(11)
    for style in S.STYLES:
        rows = []
        for tag in S.TAGS:
            for i in range(20):
                mode = "heldout" if (i % 2 and tag in ("colors", "position", "color_attr")) \
                    else "any"
                _, md = S.sample_prompt(tag, rng, mode)
                ok, why = E.evaluate(S.render(S.sample_scene(md, rng), style), md)
                rows.append((tag, ok))
        summary = E.geneval_summary(rows)
        assert min(summary[t] for t in S.TAGS) >= 0.99, (style, summary)


def test_detections_and_geneval_rules_on_hand_built_images():
    red_sq = S.Obj("square", "red", 8.0, 8.0, 8)
    blue_ci = S.Obj("circle", "blue", 22.5, 8.5, 9)
    dets = sorted(E.detect(_img(red_sq, blue_ci)), key=lambda d: d.cls)
    assert [(d.cls, d.color) for d in dets] == [("circle", "blue"), ("square", "red")]
    assert dets[1].box == (4.0, 4.0, 12.0, 12.0)  # pixel edges of an aligned 8-px square
    two = {"tag": "two_object", "include": [{"class": "square", "count": 1},
                                            {"class": "circle", "count": 1}]}
    assert E.evaluate(_img(red_sq, blue_ci), two)[0]
    ok, why = E.evaluate(_img(red_sq), two)
    assert not ok and "expected circle>=1, found 0" in why
    # colours are checked on the detected objects
    col = {"tag": "colors", "include": [{"class": "circle", "count": 1, "color": "red"}]}
    ok, why = E.evaluate(_img(red_sq, blue_ci), col)
    assert not ok and "expected red circle>=1, found 0 red" in why
    # counting is exact through the exclude clause
    cnt = {"tag": "counting", "include": [{"class": "square", "count": 2}],
           "exclude": [{"class": "square", "count": 3}]}
    sq = [S.Obj("square", "green", x, 8.0, 8) for x in (6.0, 17.0, 28.0)]
    assert E.evaluate(_img(*sq[:2]), cnt)[0]
    ok, why = E.evaluate(_img(*sq), cnt)
    assert not ok and "expected square<3, found 3" in why
    # position: the square is left of the circle, not right of it
    pos = {"tag": "position", "include": [{"class": "circle", "count": 1},
                                          {"class": "square", "count": 1,
                                           "position": ["left of", 0]}]}
    assert E.evaluate(_img(red_sq, blue_ci), pos)[0]
    pos["include"][1]["position"] = ["right of", 0]
    ok, why = E.evaluate(_img(red_sq, blue_ci), pos)
    assert not ok and "expected square right of target, found left of" in why
    # a blank canvas has no objects
    assert E.detect(S.render(S.Scene(()), "refined")) == []


def test_each_shape_and_colour_is_recognised_in_both_styles():
    for style in S.STYLES:
        for shape in S.SHAPES:
            for ci, color in enumerate(S.COLORS):
                for size in (7, 10):
                    o = S.Obj(shape, color, S.snap(11.3 + ci, size), S.snap(15.7, size), size)
                    dets = E.detect(S.render(S.Scene((o,)), style))
                    assert [(d.cls, d.color) for d in dets] == [(shape, color)], (style, o)


def test_summary_is_the_mean_of_tag_accuracies():
    rows = [("counting", True), ("counting", False), ("colors", True)]
    s = E.geneval_summary(rows)
    assert s == {"counting": 0.5, "colors": 1.0, "overall": 0.75}
    with pytest.raises(ValueError, match="tag must be one of"):
        E.geneval_summary([("spatial", True)])


def test_shape_model_is_fixed():
    a = E.shape_model()
    E.shape_model.cache_clear()
    b = E.shape_model()
    np.testing.assert_array_equal(a.means, b.means)
    np.testing.assert_array_equal(a.precision, b.precision)


def test_refinement_score_separates_styles_on_unseen_renders():
    """Spec §Claims 4 (smoke scale): AUC >= 0.99 of flat vs refined renders of held-out
    prompts (the model is fitted once, on training-split scenes, with its own seed)."""
    from icml26_jax.cof_t2i import train

    rng = np.random.default_rng(123)
    flat, ref = [], []
    for i in range(60):
        tag = ("colors", "position", "color_attr")[i % 3]
        _, md = S.sample_prompt(tag, rng, "heldout")
        scene = S.sample_scene(md, rng)
        flat.append(E.refinement_score(S.render(scene, "flat")))
        ref.append(E.refinement_score(S.render(scene, "refined")))
    assert train.auc(np.array(flat), np.array(ref)) >= 0.99
    assert np.mean(ref) - np.mean(flat) > 0.9
    assert E.refinement_model() is E.refinement_model()  # fitted once
    f = E.refinement_features(S.render(scene, "flat"))
    assert f.shape == (3,) and f[0] == 0.0 and abs(f[2]) < 1e-9  # no texture, no shading


def test_refinement_fit_is_a_regularised_logistic_regression():
    m = E.fit_refinement_model(np.random.default_rng(0), n_scenes=40, l2=1.0)
    m2 = E.fit_refinement_model(np.random.default_rng(0), n_scenes=40, l2=1.0)
    np.testing.assert_array_equal(m.w, m2.w)  # deterministic
    assert np.all(np.isfinite(m.w)) and np.all(m.w > 0)  # every feature says "refined"
    stronger = E.fit_refinement_model(np.random.default_rng(0), n_scenes=40, l2=100.0)
    assert np.linalg.norm(stronger.w) < np.linalg.norm(m.w)
