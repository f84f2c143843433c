"""ifdl_folder: pairing by stem (mask suffixes), authentic images, descriptions, the TFDS
round trip and clear errors."""

import json

import numpy as np
import pytest
from PIL import Image

from icml26_jax.datasets import ifdl_folder


def _folder(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "gt").mkdir()
    rng = np.random.default_rng(0)
    for stem in ("b", "a", "c"):
        Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(
            tmp_path / "img" / f"{stem}.jpg")
    m = np.zeros((20, 30), np.uint8)
    m[:10, :15] = 255
    Image.fromarray(m).save(tmp_path / "gt" / "a_mask.png")
    Image.fromarray(m).save(tmp_path / "gt" / "c.png")
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"stem": "c", "text": "the top region looks copied", "ok": False}) + "\n")
    return tmp_path


def test_pairs_by_stem_and_round_trips_through_tfds(tmp_path):
    root = _folder(tmp_path)
    pairs = ifdl_folder.pair_files(root / "img", root / "gt")
    assert [(s, m.name if m else None) for s, _, m in pairs] == [
        ("a", "a_mask.png"), ("b", None), ("c", "c.png")]
    d = ifdl_folder.load_ifdl_folder(root / "img", root / "gt", 16, descriptions=root / "d.jsonl",
                                     data_dir=root / "tfds")
    assert d["image"].shape == (3, 16, 16, 3) and d["image"].dtype == np.uint8
    assert d["label"].tolist() == [1, 0, 1] and list(d["stem"]) == ["a", "b", "c"]
    assert d["mask"][0].mean() == pytest.approx(0.25, abs=0.05)
    assert d["has_text"].tolist() == [False, False, True] and not d["text_ok"].any()
    assert d["text"][2] == "the top region looks copied"
    img, mask = ifdl_folder.read_pair(pairs[0][1], pairs[0][2], 16)
    np.testing.assert_array_equal(d["image"][0], img)
    np.testing.assert_array_equal(d["mask"][0], mask)
    # a second call reads the prepared copy
    again = ifdl_folder.load_ifdl_folder(root / "img", root / "gt", 16,
                                         descriptions=root / "d.jsonl", data_dir=root / "tfds")
    np.testing.assert_array_equal(again["image"], d["image"])


def test_clear_errors(tmp_path):
    root = _folder(tmp_path)
    with pytest.raises(ValueError, match="is not a directory"):
        ifdl_folder.pair_files(root / "nope", None)
    with pytest.raises(ValueError, match="mask_dir .* is not a directory"):
        ifdl_folder.pair_files(root / "img", root / "nope")
    with pytest.raises(ValueError, match="holds no images"):
        ifdl_folder.pair_files(root, None)
    (root / "bad.jsonl").write_text(json.dumps({"stem": "a"}) + "\n")
    with pytest.raises(ValueError, match="needs 'stem' and 'text'"):
        ifdl_folder.read_descriptions(root / "bad.jsonl")
    with pytest.raises(ValueError, match="data_dir is required"):
        ifdl_folder.load_ifdl_folder(root / "img", None, 16, data_dir=None)
