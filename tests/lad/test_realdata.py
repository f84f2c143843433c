"""The real-data path (spec §Data): JSONL episodes, generic episode operations, image spans
of a real prompt, the lazy Hugging Face import, and ``realdata.evaluate`` on any scorer."""

import json

import numpy as np
import pytest

from icml26_jax.lad import data, realdata
from tests.lad.test_agd import B_TRUE, OracleScorer


def _write(tmp_path, records):
    p = tmp_path / "episodes.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return str(p)


def test_jsonl_episodes_and_their_shuffles(tmp_path):
    recs = [{"caption": f"a cat {e}", "image_ids": [10 * e + k for k in range(4)], "gt": e % 4}
            for e in range(3)]
    ep = realdata.load_jsonl(_write(tmp_path, recs))
    assert ep.image_ids.shape == (3, 4) and ep.caption[1] == "a cat 1"
    np.testing.assert_array_equal(ep.gt, [0, 1, 2])
    cyc = data.cyclic_variants(ep)  # the digit operations apply to caption episodes
    matching = ep.image_ids[np.arange(3), ep.gt]
    for e in range(3):
        rows = slice(4 * e, 4 * e + 4)
        assert sorted(cyc.gt[rows]) == [0, 1, 2, 3]
        np.testing.assert_array_equal(cyc.image_ids[rows][np.arange(4), cyc.gt[rows]],
                                      matching[e])
        assert set(cyc.caption[rows]) == {f"a cat {e}"}
    sh = data.shuffle(ep, 3, np.random.default_rng(0))
    np.testing.assert_array_equal(sh.image_ids[np.arange(9), sh.gt],
                                  np.repeat(matching, 3))
    assert realdata.load_jsonl(_write(tmp_path, recs), limit=2).image_ids.shape == (2, 4)


@pytest.mark.parametrize("records, match", [
    ([{"caption": "x", "image_ids": [1, 2]}], "missing field"),
    ([{"caption": "x", "image_ids": [1, 2], "gt": 2}], "gt must be an int in"),
    ([{"caption": "x", "image_ids": [1, 2], "gt": 0},
      {"caption": "y", "image_ids": [1, 2, 3], "gt": 0}], "one N per file"),
    ([], "no episodes"),
])
def test_jsonl_errors_name_the_line(tmp_path, records, match):
    with pytest.raises(ValueError, match=match):
        realdata.load_jsonl(_write(tmp_path, records))
    with pytest.raises(ValueError, match="does not exist"):
        realdata.load_jsonl(str(tmp_path / "nope.jsonl"))


def test_find_spans_includes_delimiters():
    ids = [1, 7, 5, 5, 8, 3, 7, 5, 8, 2]
    np.testing.assert_array_equal(realdata.find_spans(ids, 7, 8, 2), [[1, 5], [6, 9]])
    with pytest.raises(ValueError, match="expected 3 image spans"):
        realdata.find_spans(ids, 7, 8, 3)


def test_hf_scorer_import_is_lazy_and_explained(monkeypatch):
    import sys
    # Importing the module needs neither torch nor transformers; building the scorer without
    # them names the extra to install (None in sys.modules makes an import fail).
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"\[hf\] extra"):
        realdata.HFRetrievalScorer("some/model", lambda i: None)


def test_evaluate_on_the_oracle_scorer():
    pool = data.load_pool(0)
    mk = lambda split, n, s: data.make_episodes(  # noqa: E731
        pool, split, 4, n, "random", np.full(4, 0.25), np.random.default_rng(s))
    res = realdata.evaluate(OracleScorer(pool, B_TRUE), mk("cal", 5, 1), mk("test", 200, 2),
                            layers=(2, 3), num_shuffles=3)
    assert res["lad"]["acc"] >= 99.0 and res["lad"]["acc"] - res["vanilla"]["acc"] >= 20.0
    with pytest.raises(ValueError, match="topk"):
        realdata.evaluate(OracleScorer(pool, B_TRUE), mk("cal", 5, 1), mk("test", 20, 2),
                          layers=(2, 3), topk=3)
