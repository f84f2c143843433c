"""Tests of icml26_jax.tgsf.io: the video-folder round trip and its validation."""

import json
import os

import numpy as np
import pytest

from icml26_jax.tgsf import camera as camlib
from icml26_jax.tgsf import io as tio

F, H, W = 4, 12, 16


def _data(seed=0):
    rng = np.random.default_rng(seed)
    frames = rng.random((F, H, W, 3)).astype(np.float32)
    cams = camlib.arc_cameras(F, height=H, width=W)
    times = np.linspace(0.0, 1.0, F).astype(np.float32)
    depth = (1 + 3 * rng.random((F, H, W))).astype(np.float32)
    flows = {(0, 1): rng.standard_normal((H, W, 2)).astype(np.float32),
             (2, 1): rng.standard_normal((H, W, 2)).astype(np.float32)}
    masks = rng.random((F, H, W)) > 0.5
    return frames, cams, times, depth, flows, masks


def test_round_trip(tmp_path):
    frames, cams, times, depth, flows, masks = _data()
    tio.write_video_folder(tmp_path, frames, cams, times, depth=depth, flows=flows,
                           masks=masks)
    out = tio.load_video_folder(tmp_path)
    assert out["frames"].shape == (F, H, W, 3) and out["frames"].dtype == np.float32
    assert np.max(np.abs(out["frames"] - frames)) <= 1 / 255 + 1e-6
    for leaf in ("K", "R", "T"):
        np.testing.assert_allclose(np.asarray(getattr(out["cams"], leaf)),
                                   np.asarray(getattr(cams, leaf)), atol=1e-6)
    assert (out["cams"].height, out["cams"].width) == (H, W)
    np.testing.assert_allclose(out["times"], times, atol=1e-7)
    np.testing.assert_array_equal(out["depth"], depth)
    np.testing.assert_array_equal(out["masks"], masks)
    assert out["flow_pairs"] == [(0, 1), (2, 1)]
    for (i, j), f in flows.items():
        np.testing.assert_array_equal(tio.load_flow(tmp_path, i, j), f)
    np.testing.assert_array_equal(tio.load_depth(tmp_path, 2), depth[2])
    # The loaded cameras are usable by the camera module (stacked, indexable).
    uv, z = camlib.project(np.zeros((1, 3), np.float32), camlib.index(out["cams"], 0))
    assert np.all(np.isfinite(np.asarray(uv))) and float(z[0]) > 0


def test_optional_parts_absent(tmp_path):
    frames, cams, times, *_ = _data()
    tio.write_video_folder(tmp_path, frames, cams, times)
    out = tio.load_video_folder(tmp_path)
    assert out["depth"] is None and out["masks"] is None and out["flow_pairs"] == []
    with pytest.raises(ValueError, match="no depth"):
        tio.load_depth(tmp_path, 0)
    with pytest.raises(ValueError, match="no flow"):
        tio.load_flow(tmp_path, 0, 1)


def _edit_cameras(path, fn):
    p = os.path.join(path, "cameras.json")
    with open(p) as fh:
        recs = json.load(fh)
    recs = fn(recs)
    with open(p, "w") as fh:
        json.dump(recs, fh)


def _set(recs, i, key, value):
    recs[i][key] = value
    return recs


@pytest.mark.parametrize("edit, match", [
    (lambda r: r[:-1], "frame count mismatch"),
    (lambda r: _set(r, 1, "time", 1.5), "times must lie in"),
    (lambda r: _set(r, 2, "time", -0.1), "times must lie in"),
    (lambda r: _set(r, 0, "K", [[1.0, 0.0], [0.0, 1.0]]), "K must be 3x3"),
    (lambda r: _set(r, 0, "w2c", np.eye(3).tolist()), "w2c must be 4x4"),
    (lambda r: _set(r, 0, "w2c", np.ones((4, 4)).tolist()), "last row"),
    (lambda r: [{k: v for k, v in r[0].items() if k != "time"}] + r[1:], "keys"),
])
def test_bad_cameras(tmp_path, edit, match):
    frames, cams, times, *_ = _data()
    tio.write_video_folder(tmp_path, frames, cams, times)
    _edit_cameras(tmp_path, edit)
    with pytest.raises(ValueError, match=match):
        tio.load_video_folder(tmp_path)


def test_missing_files(tmp_path):
    frames, cams, times, depth, *_ = _data()
    with pytest.raises(ValueError, match="does not exist"):
        tio.load_video_folder(tmp_path / "nope")
    tio.write_video_folder(tmp_path, frames, cams, times, depth=depth)
    os.remove(tmp_path / "depth" / "00003.npy")
    with pytest.raises(ValueError, match="no depth for frame 3"):
        tio.load_video_folder(tmp_path)
    os.remove(tmp_path / "cameras.json")
    with pytest.raises(ValueError, match="missing cameras.json"):
        tio.load_video_folder(tmp_path)
    tio.write_video_folder(tmp_path, frames, cams, times)
    os.remove(tmp_path / "frames" / "00001.png")
    with pytest.raises(ValueError, match="without gaps"):
        tio.load_video_folder(tmp_path)


def test_write_validation(tmp_path):
    frames, cams, times, depth, flows, masks = _data()
    with pytest.raises(ValueError, match="times must lie in"):
        tio.write_video_folder(tmp_path, frames, cams, times + 0.5)
    with pytest.raises(ValueError, match="stacked"):
        tio.write_video_folder(tmp_path, frames[:3], cams, times[:3])
    with pytest.raises(ValueError, match="frames must be"):
        tio.write_video_folder(tmp_path, frames[..., :2], cams, times)
    with pytest.raises(ValueError, match="depth must be"):
        tio.write_video_folder(tmp_path, frames, cams, times, depth=depth[:, :5])
    with pytest.raises(ValueError, match="out of range"):
        tio.write_video_folder(tmp_path, frames, cams, times, flows={(0, 9): flows[(0, 1)]})
