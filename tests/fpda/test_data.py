"""FPDA spec §Tests 2 and 10 (data half): ForgeBench-S masks, the shared post-processing chain,
the split discipline, offline photos, the text channel, determinism, the cache key, and the
real-data folder path."""

import json
import socket

import numpy as np
import pytest
import scipy.ndimage
import scipy.stats

from icml26_jax.core import photos
from icml26_jax.fpda import data as D
from icml26_jax.fpda import prompts


def _base(seed=0, s=64):
    return D._window(np.random.default_rng(seed), photos.load_rgb("astronaut"), s, (0.5, 1.0))


def test_masks_are_binary_in_range_and_follow_the_resize():
    cfg = D.ForgeryConfig(resize_p=1.0, blur_p=0.0, noise_p=0.0, jpeg_p=0.0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        m = D.random_shape(rng, 64, cfg.mask_area)
        assert m.dtype == bool and cfg.mask_area[0] <= m.mean() <= cfg.mask_area[1]
        # A white region on black: after the down-up resize the mask still marks it.
        img = np.repeat((m * 255).astype(np.uint8)[..., None], 3, -1)
        out, m2, ops = D.postprocess(img, m, rng, cfg)
        assert "resize" in ops and m2.dtype == bool and m2.shape == m.shape
        bright = out[..., 0] > 127
        assert (bright == m2).mean() > 0.97, ops
    for shape in D.SHAPES:
        assert D.random_shape(rng, 64, (0.04, 0.3), shape).any()
    with pytest.raises(ValueError, match="shape must be one of"):
        D.random_shape(rng, 64, (0.04, 0.3), "star")


def test_copy_move_gt_marks_only_the_target():
    import cv2

    for seed in range(8):
        img = _base(seed)
        out, mask, meta = D.synth_forgery(np.random.default_rng(seed), img, None, D.COPY_MOVE)
        src = meta["source_mask"]
        warped = cv2.warpAffine(src.astype(np.uint8), meta["affine"], (64, 64),
                                flags=cv2.INTER_NEAREST).astype(bool)
        np.testing.assert_array_equal(mask, warped)  # GT = the moved region
        np.testing.assert_array_equal(out[~mask], img[~mask])  # nothing else changed
        assert np.hypot(*meta["shift"]) >= 12.0
        source_only = src & ~mask
        assert source_only.any() and not mask[source_only].any()  # the source is not marked
        assert abs(meta["rotation"]) <= 15.0 and 0.9 <= meta["scale"] <= 1.1


def test_splice_and_inpaint_masks():
    img = _base(1)
    donor = D.jpeg(_base(2, 72), 70)
    out, mask, meta = D.synth_forgery(np.random.default_rng(0), img, donor, D.SPLICE)
    assert 0.02 <= mask.mean() <= 0.3
    # Beyond the feather's Gaussian support (OpenCV: 4 sigma <= 6 px), the base is untouched.
    far = ~scipy.ndimage.binary_dilation(mask, iterations=8)
    np.testing.assert_array_equal(out[far], img[far])
    out, mask, meta = D.synth_forgery(np.random.default_rng(3), img, None, D.INPAINT)
    np.testing.assert_array_equal(out[~mask], img[~mask])
    assert meta["method"] in ("telea", "ns", "biharmonic")
    with pytest.raises(ValueError, match="kind must be one of"):
        D.synth_forgery(np.random.default_rng(0), img, None, 7)


def _ops(kind, n):
    cfg = D.ForgeryConfig(img_size=16)
    q, blur, resize = [], [], []
    for i in range(n):
        *_, meta = D.draw_example((kind, i), "train", cfg, kind=kind)
        q.append(meta["ops"].get("jpeg", 101))
        blur.append(meta["ops"].get("blur", 0.0))
        resize.append(meta["ops"].get("resize", 1.0))
    return np.array(q), np.array(blur), np.array(resize)


def test_post_processing_is_the_same_for_authentic_and_forged():
    """KS tests on 2,000 draws each: the chain cannot become the label."""
    qa, ba, ra = _ops(D.AUTHENTIC, 2000)
    qf, bf, rf = _ops(D.SPLICE, 2000)
    for a, f in ((qa, qf), (ba, bf), (ra, rf)):
        assert scipy.stats.ks_2samp(a, f).pvalue > 0.01
    assert 0.65 < (qa <= 100).mean() < 0.75 and 0.15 < (ba > 0).mean() < 0.25


def test_train_and_test_never_share_photos_or_donors():
    assert not set(D.TRAIN_PHOTOS) & set(D.TEST_PHOTOS)
    cfg = D.ForgeryConfig(img_size=16)
    for name, pool in (("train", D.TRAIN_PHOTOS), ("val", D.TRAIN_PHOTOS),
                       ("test_id", D.TEST_PHOTOS), ("test_robust", D.TEST_PHOTOS),
                       ("test_xmanip", D.TEST_PHOTOS)):
        split, metas = D.make_split(name, 120, 0, cfg, return_meta=True)
        used = {m["source"] for m in metas} | {m["donor"] for m in metas if m["donor"]}
        assert used <= set(pool), name
        kinds = set(split.kind.tolist())
        assert kinds == ({0, 3} if name == "test_xmanip" else {0, 1, 2}), (name, kinds)
        assert 0.35 < split.labels.mean() < 0.65
        assert all((m["donor"] is not None) == (m["kind"] == "splice") for m in metas)
        assert all(m["donor"] != m["source"] for m in metas)
        if name == "test_robust":
            assert all(50 <= m["ops"]["jpeg"] <= 70 and m["ops"]["resize"] == 0.5 for m in metas)


class _NoSocket(socket.socket):
    def __init__(self, *a, **k):
        raise OSError("network disabled in this test")


def test_bundled_photos_load_with_sockets_disabled(monkeypatch):
    import sklearn.datasets  # noqa: F401  (subclasses socket at import)
    from skimage import data  # noqa: F401

    monkeypatch.setattr(socket, "socket", _NoSocket)
    photos.load_rgb.cache_clear()
    for name in D.TRAIN_PHOTOS + D.TEST_PHOTOS:
        assert photos.load_rgb(name).shape[-1] == 3
    split = D.make_split("test_id", 8, 0, D.ForgeryConfig(img_size=32))
    assert split.images.shape == (8, 32, 32, 3)


def test_text_channel():
    m = np.zeros((64, 64), bool)
    m[20:40, 2:14] = True
    assert D.location_of(m) == "left"
    m = np.zeros((64, 64), bool)
    m[28:36, 28:36] = True
    assert D.location_of(m) == "center"
    split = D.make_split("train", 200, 1, D.ForgeryConfig(img_size=16, text_reliability=0.7))
    assert 0.6 < split.text_ok.mean() < 0.8
    np.testing.assert_array_equal(split.text_ids[split.text_ok], split.true_text_ids[split.text_ok])
    assert not (split.true_text_ids == split.wrong_text_ids).all(1).any()  # wrong != correct
    untouched = prompts.tokenize("untouched")[0]
    authentic = split.labels == 0
    assert (split.true_text_ids[authentic] == untouched).any(1).all()
    assert not (split.wrong_text_ids[authentic] == untouched).any(1).any()  # hallucinated edits
    ids, ok = D.with_text(split, 1.0, 0)
    assert ok.all() and (ids == split.true_text_ids).all()
    ids, ok = D.with_text(split, 0.0, 0)
    assert not ok.any() and (ids == split.wrong_text_ids).all()
    with pytest.raises(ValueError, match="p_rel"):
        D.with_text(split, 1.5, 0)


def test_same_seed_same_data_and_cache_key_follows_the_config(tmp_path):
    cfg = D.ForgeryConfig(img_size=16)
    a = D.load_splits({"train": 20, "test_id": 10}, 0, cfg, str(tmp_path))
    b = D.load_splits({"train": 20, "test_id": 10}, 0, cfg, str(tmp_path))  # from the cache
    c = D.make_split("train", 20, 0, cfg)  # fresh
    for x, y in ((a["train"], b["train"]), (a["train"], c)):
        for f in D.Split._fields:
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f), err_msg=f)
    assert len(list(tmp_path.iterdir())) == 1
    d = D.load_splits({"train": 20}, 1, cfg, str(tmp_path))
    D.load_splits({"train": 20}, 0, cfg._replace(jpeg_p=0.5), str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 3  # seed and config both change the key
    assert not np.array_equal(d["train"].images, a["train"].images)


def test_bad_config_values_raise():
    with pytest.raises(ValueError, match="img_size must be a positive multiple of 16"):
        D.make_split("train", 4, 0, D.ForgeryConfig(img_size=40))
    with pytest.raises(ValueError, match="mask_area"):
        D.make_split("train", 4, 0, D.ForgeryConfig(mask_area=(0.3, 0.1)))
    with pytest.raises(ValueError, match="split must be one of"):
        D.make_split("holdout", 4, 0)
    with pytest.raises(ValueError, match="text_reliability"):
        D.make_split("train", 4, 0, D.ForgeryConfig(text_reliability=2.0))


def test_load_folder(tmp_path):
    from PIL import Image

    (tmp_path / "img").mkdir()
    (tmp_path / "mask").mkdir()
    rng = np.random.default_rng(0)
    for stem in ("a", "b", "c"):
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(
            tmp_path / "img" / f"{stem}.png")
    m = np.zeros((40, 48), np.uint8)
    m[10:20, 12:30] = 255
    Image.fromarray(m).save(tmp_path / "mask" / "a_gt.png")
    Image.fromarray(np.zeros_like(m)).save(tmp_path / "mask" / "b.png")
    (tmp_path / "text.jsonl").write_text(
        json.dumps({"stem": "a", "text": "the top region looks spliced", "ok": True}) + "\n")
    s = D.load_folder(tmp_path / "img", tmp_path / "mask", 32, tmp_path / "text.jsonl")
    assert s.images.shape == (3, 32, 32, 3) and s.images.dtype == np.float32
    np.testing.assert_array_equal(s.labels, [1, 0, 0])
    assert abs(s.masks[0].mean() - 180 / 1920) < 0.02 and not s.masks[1:].any()
    np.testing.assert_array_equal(s.text_ids[0], prompts.tokenize("the top region looks spliced"))
    assert s.text_ok.tolist() == [True, False, False]
    with pytest.raises(ValueError, match="size must be a positive multiple of 16"):
        D.load_folder(tmp_path / "img", None, 30)
    with pytest.raises(ValueError, match="holds no images"):
        D.load_folder(tmp_path / "mask" / "..", None, 32)
    # The same folder through the ifdl_folder TFDS builder (array_record, data_source).
    t = D.load_tfds(tmp_path / "img", tmp_path / "mask", 32, data_dir=tmp_path / "tfds",
                    descriptions_jsonl=tmp_path / "text.jsonl")
    for f in D.Split._fields:
        np.testing.assert_array_equal(getattr(t, f), getattr(s, f), err_msg=f)
