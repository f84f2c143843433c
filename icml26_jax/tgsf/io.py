"""Real-data path: the video-folder format (spec §Data "Real data").

A video folder holds::

    frames/{i:05d}.png            RGB frames, i = 0 .. F-1 (8 bit)
    cameras.json                  [{"K": 3x3, "w2c": 4x4 world-to-camera, "time": t in [0, 1]}, ...]
    depth/{i:05d}.npy             optional z-depth [H, W] of any scale (e.g. a monocular estimate)
    flow/{i:05d}_{j:05d}.npy      optional forward flow i -> j in pixels [H, W, 2]
    masks/{i:05d}.png             optional foreground masks (8-bit grey, > 0.5 is foreground)

Cameras follow ``camera.py``: ``w2c = [[R, T], [0, 0, 0, 1]]`` maps world to camera
coordinates (OpenCV axes). Users convert DyCheck or NVIDIA Dynamic Scenes into this layout and
supply depth and flow from their own estimators. Files are read on the host (numpy); only the
cameras are returned as a stacked ``Camera`` with ``jnp.float32`` leaves. PNGs go through
Pillow (a dependency of matplotlib).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import jax.numpy as jnp
import numpy as np
from PIL import Image

from icml26_jax.tgsf import camera as camlib

_FRAME_RE = re.compile(r"^(\d{5})\.png$")
_FLOW_RE = re.compile(r"^(\d{5})_(\d{5})\.npy$")


def _frame_name(i: int) -> str:
    return f"{int(i):05d}"


def _write_png(path: str, img: np.ndarray) -> None:
    """Writes float [H, W] or [H, W, 3] in [0, 1] as an 8-bit PNG (rounded)."""
    u8 = np.round(np.clip(np.asarray(img, np.float64), 0.0, 1.0) * 255.0).astype(np.uint8)
    Image.fromarray(u8).save(path, format="PNG")


def _read_png(path: str) -> np.ndarray:
    """8-bit PNG -> float32 in [0, 1], [H, W] (grey) or [H, W, C]."""
    with Image.open(path) as im:
        if im.mode not in ("L", "RGB", "RGBA", "LA"):
            im = im.convert("RGBA" if "A" in im.getbands() else "RGB")
        arr = np.asarray(im)
    if arr.dtype != np.uint8:
        raise ValueError(f"{path}: expected an 8-bit PNG, got dtype {arr.dtype}")
    return arr.astype(np.float32) / np.float32(255.0)


def _camera_record(K: np.ndarray, R: np.ndarray, T: np.ndarray, time: float) -> dict:
    w2c = np.eye(4, dtype=np.float64)
    w2c[:3, :3] = R
    w2c[:3, 3] = T
    return {"K": np.asarray(K, np.float64).tolist(), "w2c": w2c.tolist(), "time": float(time)}


def write_video_folder(path: str | os.PathLike, frames, cams: camlib.Camera, times,
                       depth=None, flows: dict[tuple[int, int], Any] | None = None,
                       masks=None) -> None:
    """Writes a video folder (creates ``path``; existing files of the same names are
    overwritten).

    Args:
      path: target directory.
      frames: [F, H, W, 3] floats in [0, 1] (stored as 8-bit PNG, so within 1/510 after a
        round trip).
      cams: stacked ``Camera`` with leaves K [F, 3, 3], R [F, 3, 3], T [F, 3] and the frames'
        height and width.
      times: [F] times in [0, 1].
      depth: optional [F, H, W] depths (stored as float32 ``.npy``).
      flows: optional dict (i, j) -> forward flow i -> j [H, W, 2] in pixels.
      masks: optional [F, H, W] foreground masks (bool or floats in [0, 1]).

    Raises:
      ValueError: on inconsistent shapes, times outside [0, 1] or bad flow keys.
    """
    frames = np.asarray(frames, np.float32)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be [F, H, W, 3], got shape {frames.shape}")
    n, h, w = frames.shape[:3]
    K, R, T = (np.asarray(x, np.float64) for x in (cams.K, cams.R, cams.T))
    if K.shape != (n, 3, 3) or R.shape != (n, 3, 3) or T.shape != (n, 3):
        raise ValueError(f"cams must be stacked over the {n} frames (K [F,3,3], R [F,3,3], "
                         f"T [F,3]), got K {K.shape}, R {R.shape}, T {T.shape}")
    if (cams.height, cams.width) != (h, w):
        raise ValueError(f"cams are {cams.height}x{cams.width} but frames are {h}x{w}")
    times = np.asarray(times, np.float64)
    _check_times(times, n)
    if depth is not None:
        depth = np.asarray(depth, np.float32)
        if depth.shape != (n, h, w):
            raise ValueError(f"depth must be [{n}, {h}, {w}], got {depth.shape}")
    if masks is not None:
        masks = np.asarray(masks, np.float32)
        if masks.shape != (n, h, w):
            raise ValueError(f"masks must be [{n}, {h}, {w}], got {masks.shape}")
    flows = dict(flows or {})
    for (i, j), f in flows.items():
        if not (0 <= int(i) < n and 0 <= int(j) < n):
            raise ValueError(f"flow key ({i}, {j}) out of range for {n} frames")
        if np.shape(f) != (h, w, 2):
            raise ValueError(f"flow ({i}, {j}) must be [{h}, {w}, 2], got {np.shape(f)}")

    path = os.fspath(path)
    os.makedirs(os.path.join(path, "frames"), exist_ok=True)
    for i in range(n):
        _write_png(os.path.join(path, "frames", _frame_name(i) + ".png"), frames[i])
    records = [_camera_record(K[i], R[i], T[i], times[i]) for i in range(n)]
    with open(os.path.join(path, "cameras.json"), "w") as fh:
        json.dump(records, fh, indent=1)
    if depth is not None:
        os.makedirs(os.path.join(path, "depth"), exist_ok=True)
        for i in range(n):
            np.save(os.path.join(path, "depth", _frame_name(i) + ".npy"), depth[i])
    if flows:
        os.makedirs(os.path.join(path, "flow"), exist_ok=True)
        for (i, j), f in flows.items():
            np.save(os.path.join(path, "flow", f"{_frame_name(i)}_{_frame_name(j)}.npy"),
                    np.asarray(f, np.float32))
    if masks is not None:
        os.makedirs(os.path.join(path, "masks"), exist_ok=True)
        for i in range(n):
            _write_png(os.path.join(path, "masks", _frame_name(i) + ".png"), masks[i])


def _check_times(times: np.ndarray, n: int) -> None:
    if times.shape != (n,):
        raise ValueError(f"times must be [{n}], got shape {times.shape}")
    bad = ~np.isfinite(times) | (times < 0.0) | (times > 1.0)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(f"time of frame {i} is {times[i]!r}; times must lie in [0, 1]")


def _frame_indices(path: str) -> list[int]:
    frames_dir = os.path.join(path, "frames")
    if not os.path.isdir(frames_dir):
        raise ValueError(f"{path!r} is not a video folder: no frames/ directory")
    idx = sorted(int(m.group(1)) for m in map(_FRAME_RE.match, os.listdir(frames_dir)) if m)
    if not idx:
        raise ValueError(f"{frames_dir!r} holds no frames named 00000.png, 00001.png, ...")
    if idx != list(range(len(idx))):
        missing = sorted(set(range(idx[-1] + 1)) - set(idx))
        raise ValueError(f"{frames_dir!r}: frames must be numbered 0..F-1 without gaps; "
                         f"missing {missing[:5]}")
    return idx


def _load_cameras(path: str, n: int) -> list[dict]:
    cam_path = os.path.join(path, "cameras.json")
    if not os.path.isfile(cam_path):
        raise ValueError(f"{path!r} is not a video folder: missing cameras.json")
    with open(cam_path) as fh:
        try:
            records = json.load(fh)
        except json.JSONDecodeError as e:
            raise ValueError(f"{cam_path!r} is not valid JSON: {e}") from e
    if not isinstance(records, list):
        raise ValueError(f"{cam_path!r} must hold a list of per-frame dicts, "
                         f"got {type(records).__name__}")
    if len(records) != n:
        raise ValueError(f"frame count mismatch: {n} frames in frames/ but {len(records)} "
                         f"entries in cameras.json")
    for i, r in enumerate(records):
        if not isinstance(r, dict) or not {"K", "w2c", "time"} <= set(r):
            raise ValueError(f"cameras.json entry {i} must be a dict with keys 'K', 'w2c', "
                             f"'time', got {r!r}")
    return records


def load_video_folder(path: str | os.PathLike) -> dict[str, Any]:
    """Loads a video folder written by ``write_video_folder`` (or converted by a user).

    Args:
      path: the folder.

    Returns:
      dict with ``frames`` [F, H, W, 3] float32 in [0, 1] (numpy; an alpha channel is
      dropped, grey frames are repeated to RGB), ``cams`` (stacked ``Camera``, jnp float32
      leaves K [F, 3, 3], R [F, 3, 3], T [F, 3]), ``times`` [F] float32, ``depth``
      [F, H, W] float32 or None (when there is no depth/ directory), ``masks`` [F, H, W]
      bool or None, and ``flow_pairs``: the sorted list of (i, j) with a flow file (load
      them with ``load_flow``).

    Raises:
      ValueError: missing frames/ or cameras.json, frame count mismatch, frames of different
        sizes, K not 3x3, w2c not 4x4 (or a last row other than [0, 0, 0, 1]), a time
        outside [0, 1], incomplete or mis-shaped depth/ or masks/.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"video folder {path!r} does not exist")
    idx = _frame_indices(path)
    n = len(idx)
    records = _load_cameras(path, n)

    frames = []
    for i in idx:
        img = _read_png(os.path.join(path, "frames", _frame_name(i) + ".png"))
        if img.ndim == 2:
            img = np.repeat(img[..., None], 3, axis=-1)
        elif img.shape[-1] == 2:  # grey + alpha
            img = np.repeat(img[..., :1], 3, axis=-1)
        img = img[..., :3]
        if frames and img.shape != frames[0].shape:
            raise ValueError(f"frame {i} has shape {img.shape[:2]} but frame 0 has "
                             f"{frames[0].shape[:2]}")
        frames.append(img)
    frames = np.stack(frames)
    h, w = frames.shape[1:3]

    Ks, Rs, Ts, times = [], [], [], []
    for i, r in enumerate(records):
        K = np.asarray(r["K"], np.float64)
        if K.shape != (3, 3):
            raise ValueError(f"cameras.json entry {i}: K must be 3x3, got shape {K.shape}")
        w2c = np.asarray(r["w2c"], np.float64)
        if w2c.shape != (4, 4):
            raise ValueError(f"cameras.json entry {i}: w2c must be 4x4, got shape {w2c.shape}")
        if not np.allclose(w2c[3], [0.0, 0.0, 0.0, 1.0], atol=1e-6):
            raise ValueError(f"cameras.json entry {i}: w2c last row must be [0, 0, 0, 1], "
                             f"got {w2c[3].tolist()}")
        if not (np.all(np.isfinite(K)) and np.all(np.isfinite(w2c))):
            raise ValueError(f"cameras.json entry {i}: K and w2c must be finite")
        Ks.append(K)
        Rs.append(w2c[:3, :3])
        Ts.append(w2c[:3, 3])
        try:
            times.append(float(r["time"]))
        except (TypeError, ValueError) as e:
            raise ValueError(f"cameras.json entry {i}: time must be a number, "
                             f"got {r['time']!r}") from e
    times = np.asarray(times, np.float64)
    _check_times(times, n)
    cams = camlib.Camera(jnp.asarray(np.stack(Ks), jnp.float32),
                         jnp.asarray(np.stack(Rs), jnp.float32),
                         jnp.asarray(np.stack(Ts), jnp.float32), int(h), int(w))

    depth = None
    if os.path.isdir(os.path.join(path, "depth")):
        depth = np.stack([load_depth(path, i) for i in idx])
        if depth.shape != (n, h, w):
            raise ValueError(f"depth maps must be [{h}, {w}] like the frames, "
                             f"got {depth.shape[1:]}")
    masks = None
    if os.path.isdir(os.path.join(path, "masks")):
        masks = []
        for i in idx:
            mpath = os.path.join(path, "masks", _frame_name(i) + ".png")
            if not os.path.isfile(mpath):
                raise ValueError(f"masks/ exists but {mpath!r} is missing")
            m = _read_png(mpath)
            if m.ndim == 3:
                m = m[..., 0]
            if m.shape != (h, w):
                raise ValueError(f"mask {i} must be [{h}, {w}], got {m.shape}")
            masks.append(m > 0.5)
        masks = np.stack(masks)
    flow_pairs = []
    flow_dir = os.path.join(path, "flow")
    if os.path.isdir(flow_dir):
        flow_pairs = sorted((int(m.group(1)), int(m.group(2)))
                            for m in map(_FLOW_RE.match, os.listdir(flow_dir)) if m)
    return {"frames": frames, "cams": cams, "times": times.astype(np.float32),
            "depth": depth, "masks": masks, "flow_pairs": flow_pairs}


def load_depth(path: str | os.PathLike, i: int) -> np.ndarray:
    """Depth map of frame ``i``: ``depth/{i:05d}.npy`` -> [H, W] float32 (any scale).

    Raises:
      ValueError: the file is missing or not 2-D.
    """
    f = os.path.join(os.fspath(path), "depth", _frame_name(i) + ".npy")
    if not os.path.isfile(f):
        raise ValueError(f"no depth for frame {i}: {f!r} is missing")
    d = np.load(f, allow_pickle=False)
    if d.ndim != 2:
        raise ValueError(f"{f!r}: depth must be [H, W], got shape {d.shape}")
    return d.astype(np.float32)


def load_flow(path: str | os.PathLike, i: int, j: int) -> np.ndarray:
    """Forward flow from frame ``i`` to frame ``j``: ``flow/{i:05d}_{j:05d}.npy`` ->
    [H, W, 2] float32 in pixels.

    Raises:
      ValueError: the file is missing or not [H, W, 2].
    """
    f = os.path.join(os.fspath(path), "flow", f"{_frame_name(i)}_{_frame_name(j)}.npy")
    if not os.path.isfile(f):
        raise ValueError(f"no flow {i} -> {j}: {f!r} is missing")
    fl = np.load(f, allow_pickle=False)
    if fl.ndim != 3 or fl.shape[-1] != 2:
        raise ValueError(f"{f!r}: flow must be [H, W, 2], got shape {fl.shape}")
    return fl.astype(np.float32)
