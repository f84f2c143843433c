"""ForgeBench-S, the offline forgery benchmark (spec §Data [R]), and the real-data folder path.

Every image starts from a real photograph shipped inside the scikit-image / scikit-learn
wheels (``core.photos``), so its traces are real camera, demosaicing and JPEG statistics.
Per image, deterministically from ``(seed, split, index)``:

1. a source photo of the split is rescaled by ``s ~ U[0.25, 1]`` (area interpolation of a
   ``64 / s`` window, which equals rescaling the photo and cropping 64 x 64);
2. one edit (or none) with an exact binary mask covering 4-30 % of the image, shaped as an
   ellipse, a random polygon or a smoothed-noise blob:

   * ``splice``: a donor window from *another* photo of the split, JPEG-compressed on its own
     (q ~ U[60, 95]) at 72 x 72, brightness / contrast jittered, then cropped to 64 x 64 at a
     random offset (so its 8x8 grid is out of phase with the global JPEG) and alpha-blended
     with a Gaussian-feathered mask (sigma ~ U[0, 1.5]); GT = alpha > 0.5;
   * ``copy_move``: a region of the same image moved >= 12 px, rotated +-15 deg, scaled
     0.9-1.1 (``cv2.warpAffine``); GT = the target region only;
   * ``inpaint``: ``cv2.inpaint`` (Telea or Navier-Stokes, radius 3) or
     ``skimage.restoration.inpaint_biharmonic``; GT = the filled region;
   * ``authentic``: no edit;
3. the same post-processing chain for authentic and forged images: down-up resize
   x[0.5, 1] (p 0.3; the mask follows with centre-aligned nearest neighbour), Gaussian
   blur sigma <= 1 (p 0.2), Gaussian noise sigma <= 0.02 (p 0.2), and last the global
   JPEG q ~ U[70, 100] (p 0.7). ``test_robust`` always applies a JPEG with q ~ U[50, 70]
   and a x0.5 resize.

Splits: ``train`` / ``val`` (splice and copy-move; train photos), ``test_id`` (splice and
copy-move; test photos), ``test_xmanip`` (inpainting only, never seen in training; test
photos), ``test_robust`` (test_id kinds, heavy post-processing). Half of every split is
authentic. Train and test never share a source photo or a donor.

Text channel (SID-Set stand-in): "the {location} region looks {kind}". The correct text
names the location of the mask's centre and the edit; a wrong one changes the location or
the kind, or hallucinates an edit on an authentic image. Both are stored per image, so a
test arm with any reliability ``p_rel`` picks between them (``with_text``).

Real data: ``load_folder(img_dir, mask_dir, size)`` pairs files by stem (the CASIA /
Coverage / NIST16 / CocoGlide / OpenForensics mask exports), with optional JSONL
descriptions.
"""

from __future__ import annotations

import os
import pathlib
from typing import NamedTuple

import numpy as np

from icml26_jax.core import checkpoint, photos
from icml26_jax.fpda import prompts

KINDS = ("authentic", "splice", "copy_move", "inpaint")
AUTHENTIC, SPLICE, COPY_MOVE, INPAINT = range(4)
KIND_WORD = {SPLICE: "spliced", COPY_MOVE: "copied", INPAINT: "inpainted", AUTHENTIC: "untouched"}
SHAPES = ("ellipse", "polygon", "blob")
SPLITS = ("train", "val", "test_id", "test_xmanip", "test_robust")

TRAIN_PHOTOS = ("astronaut", "chelsea", "retina", "immunohistochemistry", "stereo_motorcycle",
                "camera", "coins", "page", "brick", "gravel", "cell", "china.jpg")
TEST_PHOTOS = ("coffee", "rocket", "hubble_deep_field", "moon", "grass", "text", "flower.jpg")


class ForgeryConfig(NamedTuple):
    """Generation parameters (spec §Data); ``from_config`` reads them from a run config."""
    img_size: int = 64
    rescale: tuple[float, float] = (0.25, 1.0)
    mask_area: tuple[float, float] = (0.04, 0.30)
    donor_jpeg: tuple[int, int] = (60, 95)
    feather: tuple[float, float] = (0.0, 1.5)
    min_shift: float = 12.0  # copy-move shift in pixels at 64 x 64 (scaled with img_size)
    max_rotation_deg: float = 15.0
    move_scale: tuple[float, float] = (0.9, 1.1)
    jpeg_p: float = 0.7
    jpeg_q: tuple[int, int] = (70, 100)
    resize_p: float = 0.3
    resize: tuple[float, float] = (0.5, 1.0)
    blur_p: float = 0.2
    blur_sigma: float = 1.0
    noise_p: float = 0.2
    noise_sigma: float = 0.02
    robust_jpeg_q: tuple[int, int] = (50, 70)
    robust_resize: float = 0.5
    text_reliability: float = 0.7  # p_rel of the stored text_ids (training: 0.7)


class Split(NamedTuple):
    """One split; N images of size S."""
    images: np.ndarray  # f32 [N, S, S, 3] in [0, 1]
    masks: np.ndarray  # bool [N, S, S]
    labels: np.ndarray  # int32 [N]: 1 = forged
    kind: np.ndarray  # int32 [N]: index into KINDS
    text_ids: np.ndarray  # int32 [N, L]: the description drawn with p = text_reliability
    text_ok: np.ndarray  # bool [N]: whether text_ids is the correct description
    true_text_ids: np.ndarray  # int32 [N, L]
    wrong_text_ids: np.ndarray  # int32 [N, L]

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def take(self, idx) -> "Split":
        return Split(*(np.asarray(a)[idx] for a in self))


def validate(cfg: ForgeryConfig) -> None:
    """Raises ``ValueError`` naming the field for out-of-range generation parameters."""
    if cfg.img_size < 16 or cfg.img_size % 16:
        raise ValueError(f"img_size must be a positive multiple of 16 (the encoder downsamples "
                         f"by 4 and the DCT map by 8), got {cfg.img_size}")
    lo, hi = cfg.mask_area
    if not 0.0 < lo < hi < 1.0:
        raise ValueError(f"mask_area must satisfy 0 < lo < hi < 1, got {cfg.mask_area}")
    if not 0.0 <= cfg.text_reliability <= 1.0:
        raise ValueError(f"text_reliability must be in [0, 1], got {cfg.text_reliability}")
    for name in ("jpeg_p", "resize_p", "blur_p", "noise_p"):
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {getattr(cfg, name)}")


# --------------------------------------------------------------------------- primitives

def _cv2():
    import cv2  # local import: only data generation needs OpenCV
    return cv2


def jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    """uint8 [H, W, 3] RGB -> JPEG (4:2:0, libjpeg via OpenCV) at ``quality`` -> uint8."""
    cv2 = _cv2()
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(img[..., ::-1]),
                           [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1].copy()


def _window(rng: np.random.Generator, photo: np.ndarray, out: int, scale_range) -> np.ndarray:
    """A random ``out x out`` crop of the photo rescaled by s ~ U[scale_range] (area
    interpolation of an ``out / s`` window; s is raised where the photo is too small)."""
    cv2 = _cv2()
    h, w = photo.shape[:2]
    s = rng.uniform(*scale_range)
    side = int(round(out / s))
    side = max(out, min(side, h, w))
    y = int(rng.integers(0, h - side + 1))
    x = int(rng.integers(0, w - side + 1))
    crop = photo[y:y + side, x:x + side]
    if side == out:
        return np.ascontiguousarray(crop)
    return cv2.resize(crop, (out, out), interpolation=cv2.INTER_AREA)


def random_shape(rng: np.random.Generator, size: int, area=(0.04, 0.30),
                 shape: str | None = None) -> np.ndarray:
    """A binary mask ``bool[size, size]`` covering a fraction of the image in ``area``.

    Args:
      rng: the generator.
      size: image side.
      area: (lo, hi) allowed fraction of the image.
      shape: ``"ellipse"``, ``"polygon"``, ``"blob"`` or None (uniform over the three).
    """
    cv2 = _cv2()
    if shape is None:
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")
    n = size * size
    for _ in range(200):
        target = rng.uniform(*area)
        canvas = np.zeros((size, size), np.uint8)
        if shape == "ellipse":
            ratio = np.exp(rng.uniform(np.log(0.5), np.log(2.0)))
            ax = np.sqrt(target * n / (np.pi * ratio))
            ay = ratio * ax
            r = max(ax, ay)
            cy, cx = rng.uniform(r * 0.6, size - r * 0.6, size=2) if size > 1.2 * r else (
                size / 2, size / 2)
            cv2.ellipse(canvas, (int(round(cx)), int(round(cy))),
                        (max(1, int(round(ax))), max(1, int(round(ay)))),
                        float(rng.uniform(0, 180)), 0, 360, 1, -1)
        elif shape == "polygon":
            k = int(rng.integers(5, 10))
            ang = np.sort(rng.uniform(0, 2 * np.pi, k))
            rad = rng.uniform(0.6, 1.0, k)
            base = np.sqrt(target * n / (np.pi * np.mean(rad ** 2) * 0.8))
            cy, cx = rng.uniform(base * 0.5, size - base * 0.5, size=2) if size > base else (
                size / 2, size / 2)
            pts = np.stack([cx + base * rad * np.cos(ang), cy + base * rad * np.sin(ang)], -1)
            cv2.fillPoly(canvas, [np.round(pts).astype(np.int32)], 1)
        else:  # blob: smoothed noise thresholded at the target quantile, one bump emphasised
            noise = rng.standard_normal((size, size)).astype(np.float32)
            smooth = cv2.GaussianBlur(noise, (0, 0), sigmaX=size / 10.0)
            yy, xx = np.mgrid[:size, :size]
            cy, cx = rng.uniform(0.2 * size, 0.8 * size, size=2)
            bump = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * (0.25 * size) ** 2))
            field = smooth / (smooth.std() + 1e-6) + 2.0 * bump
            canvas = (field > np.quantile(field, 1.0 - target)).astype(np.uint8)
        m = canvas.astype(bool)
        if area[0] <= m.mean() <= area[1]:
            return m
    raise RuntimeError(f"could not draw a {shape} mask with area in {area} at size {size}")


def _feathered(mask: np.ndarray, sigma: float) -> np.ndarray:
    """Alpha in [0, 1] from a binary mask, Gaussian-feathered by ``sigma`` pixels."""
    a = mask.astype(np.float32)
    if sigma <= 0.05:
        return a
    return _cv2().GaussianBlur(a, (0, 0), sigmaX=float(sigma))


def _jitter(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Brightness / contrast jitter of a donor (float32 in [0, 255])."""
    x = img.astype(np.float32)
    contrast = rng.uniform(0.8, 1.2)
    bright = rng.uniform(-20.0, 20.0)
    mean = x.mean()
    return np.clip((x - mean) * contrast + mean + bright, 0.0, 255.0)


# --------------------------------------------------------------------------- edits

def synth_forgery(rng: np.random.Generator, img: np.ndarray, donor: np.ndarray | None,
                  kind: int, cfg: ForgeryConfig = ForgeryConfig()):
    """Applies one edit to a base crop.

    Args:
      rng: the generator.
      img: base crop uint8 [S, S, 3].
      donor: for ``SPLICE``, a JPEG-compressed donor window uint8 [S + 8, S + 8, 3] from
        another photo (cropped here at a random offset); ignored otherwise.
      kind: one of ``AUTHENTIC``, ``SPLICE``, ``COPY_MOVE``, ``INPAINT``.
      cfg: generation parameters.

    Returns:
      ``(img uint8 [S, S, 3], mask bool [S, S], meta dict)``.
    """
    cv2 = _cv2()
    s = img.shape[0]
    if kind == AUTHENTIC:
        return img.copy(), np.zeros((s, s), bool), {"kind": KINDS[kind]}
    if kind == SPLICE:
        if donor is None or donor.shape[0] < s:
            raise ValueError("splice needs a donor window of at least the image size")
        off = rng.integers(0, donor.shape[0] - s + 1, size=2)
        d = _jitter(donor[off[0]:off[0] + s, off[1]:off[1] + s], rng)
        shape = random_shape(rng, s, cfg.mask_area)
        sigma = rng.uniform(*cfg.feather)
        alpha = _feathered(shape, sigma)[..., None]
        out = alpha * d + (1.0 - alpha) * img.astype(np.float32)
        mask = alpha[..., 0] > 0.5
        if not mask.any():
            raise RuntimeError("the feathered splice mask is empty")
        return (np.clip(np.round(out), 0, 255).astype(np.uint8), mask,
                {"kind": KINDS[kind], "feather": float(sigma), "donor_offset": off.tolist()})
    if kind == COPY_MOVE:
        min_shift = cfg.min_shift * s / 64.0  # 12 px at the spec's 64 x 64
        for _ in range(100):
            src = random_shape(rng, s, cfg.mask_area)
            ys, xs = np.nonzero(src)
            c = np.array([xs.mean(), ys.mean()])
            theta = rng.uniform(-cfg.max_rotation_deg, cfg.max_rotation_deg)
            scale = rng.uniform(*cfg.move_scale)
            dist = rng.uniform(min_shift, max(min_shift + 1.0, s / 2.0))
            phi = rng.uniform(0, 2 * np.pi)
            shift = dist * np.array([np.cos(phi), np.sin(phi)])
            a = cv2.getRotationMatrix2D((float(c[0]), float(c[1])), float(theta), float(scale))
            a[:, 2] += shift
            moved = cv2.warpAffine(img, a, (s, s), flags=cv2.INTER_LINEAR,
                                   borderMode=cv2.BORDER_REFLECT)
            tgt = cv2.warpAffine(src.astype(np.uint8), a, (s, s), flags=cv2.INTER_NEAREST,
                                 borderMode=cv2.BORDER_CONSTANT, borderValue=0).astype(bool)
            if cfg.mask_area[0] <= tgt.mean() <= cfg.mask_area[1]:
                out = np.where(tgt[..., None], moved, img)
                return out, tgt, {"kind": KINDS[kind], "rotation": float(theta),
                                  "scale": float(scale), "shift": shift.tolist(),
                                  "source_mask": src, "affine": a}
        raise RuntimeError("could not place a copy-move target inside the image")
    if kind == INPAINT:
        mask = random_shape(rng, s, cfg.mask_area)
        method = ("telea", "ns", "biharmonic")[int(rng.integers(3))]
        if method == "biharmonic":
            from skimage.restoration import inpaint_biharmonic
            f = inpaint_biharmonic(img.astype(np.float64) / 255.0, mask, channel_axis=-1)
            out = np.clip(np.round(f * 255.0), 0, 255).astype(np.uint8)
        else:
            flag = cv2.INPAINT_TELEA if method == "telea" else cv2.INPAINT_NS
            out = cv2.inpaint(img, mask.astype(np.uint8), 3, flag)
        return out, mask, {"kind": KINDS[kind], "method": method}
    raise ValueError(f"kind must be one of {list(range(len(KINDS)))} ({KINDS}), got {kind!r}")


def postprocess(img: np.ndarray, mask: np.ndarray, rng: np.random.Generator,
                cfg: ForgeryConfig = ForgeryConfig(), robust: bool = False):
    """The shared post-processing chain (authentic and forged images alike).

    Args:
      img: uint8 [S, S, 3]; mask: bool [S, S] (follows every geometric op, nearest neighbour,
        never JPEG-compressed).
      rng: the generator.
      cfg: probabilities and ranges.
      robust: the ``test_robust`` chain (JPEG q ~ U[robust_jpeg_q] and a x robust_resize
        down-up resize always).

    Returns:
      ``(img uint8, mask bool, ops dict)``; ``ops`` records what was applied.
    """
    cv2 = _cv2()
    s = img.shape[0]
    ops = {}
    x, m = img, mask
    if robust or rng.random() < cfg.resize_p:
        f = cfg.robust_resize if robust else rng.uniform(*cfg.resize)
        small = max(8, int(round(s * f)))
        x = cv2.resize(cv2.resize(x, (small, small), interpolation=cv2.INTER_AREA), (s, s),
                       interpolation=cv2.INTER_LINEAR)
        # INTER_NEAREST_EXACT samples pixel centres; plain INTER_NEAREST is off by half a
        # pixel, which misaligns the mask with the area / bilinear-resized image.
        m = cv2.resize(cv2.resize(m.astype(np.uint8), (small, small),
                                  interpolation=cv2.INTER_NEAREST_EXACT), (s, s),
                       interpolation=cv2.INTER_NEAREST_EXACT).astype(bool)
        ops["resize"] = float(small / s)
    if rng.random() < cfg.blur_p:
        sigma = rng.uniform(0.2, cfg.blur_sigma)
        x = cv2.GaussianBlur(x, (0, 0), sigmaX=float(sigma))
        ops["blur"] = float(sigma)
    if rng.random() < cfg.noise_p:
        sigma = rng.uniform(0.0, cfg.noise_sigma)
        x = np.clip(np.round(x.astype(np.float32) + 255.0 * sigma * rng.standard_normal(
            x.shape).astype(np.float32)), 0, 255).astype(np.uint8)
        ops["noise"] = float(sigma)
    if robust:
        q = int(rng.integers(cfg.robust_jpeg_q[0], cfg.robust_jpeg_q[1] + 1))
        x = jpeg(x, q)
        ops["jpeg"] = q
    elif rng.random() < cfg.jpeg_p:
        q = int(rng.integers(cfg.jpeg_q[0], cfg.jpeg_q[1] + 1))
        x = jpeg(x, q)
        ops["jpeg"] = q
    return x, m, ops


# --------------------------------------------------------------------------- text channel

def location_of(mask: np.ndarray) -> str:
    """The text location of a mask: ``center`` if its centroid is in the middle third of
    both axes, else the side of the larger centroid offset."""
    s = mask.shape[0]
    ys, xs = np.nonzero(mask)
    dy, dx = ys.mean() / (s - 1) - 0.5, xs.mean() / (s - 1) - 0.5
    if abs(dy) < 1 / 6 and abs(dx) < 1 / 6:
        return "center"
    if abs(dy) >= abs(dx):
        return "top" if dy < 0 else "bottom"
    return "left" if dx < 0 else "right"


def descriptions(rng: np.random.Generator, kind: int, mask: np.ndarray) -> tuple[str, str]:
    """(correct, wrong) descriptions of one image."""
    locs = prompts.TEXT_LOCATIONS
    forged_words = [KIND_WORD[k] for k in (SPLICE, COPY_MOVE, INPAINT)]
    if kind == AUTHENTIC:
        true = prompts.describe(locs[int(rng.integers(len(locs)))], "untouched")
        wrong = prompts.describe(locs[int(rng.integers(len(locs)))],
                                 forged_words[int(rng.integers(3))])  # hallucinated edit
        return true, wrong
    loc, word = location_of(mask), KIND_WORD[kind]
    true = prompts.describe(loc, word)
    if rng.random() < 0.5:  # wrong location
        other = [x for x in locs if x != loc]
        wrong = prompts.describe(other[int(rng.integers(len(other)))], word)
    else:  # wrong type (another edit, or "untouched")
        other = [w for w in prompts.TEXT_KINDS if w != word]
        wrong = prompts.describe(loc, other[int(rng.integers(len(other)))])
    return true, wrong


def with_text(split: Split, p_rel: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Descriptions of a split at reliability ``p_rel``: ``(text_ids [N, L], text_ok [N])``,
    each image's correct text with probability ``p_rel``, else its stored wrong text."""
    if not 0.0 <= p_rel <= 1.0:
        raise ValueError(f"p_rel must be in [0, 1], got {p_rel}")
    ok = np.random.default_rng([seed, 7919]).random(len(split)) < p_rel
    return np.where(ok[:, None], split.true_text_ids, split.wrong_text_ids), ok


# --------------------------------------------------------------------------- splits

_SPLIT_KINDS = {"train": (SPLICE, COPY_MOVE), "val": (SPLICE, COPY_MOVE),
                "test_id": (SPLICE, COPY_MOVE), "test_xmanip": (INPAINT,),
                "test_robust": (SPLICE, COPY_MOVE)}


def split_photos(name: str) -> tuple[str, ...]:
    """Source photos of a split (train and val: ``TRAIN_PHOTOS``; tests: ``TEST_PHOTOS``)."""
    if name not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
    return TRAIN_PHOTOS if name in ("train", "val") else TEST_PHOTOS


def make_example(rng: np.random.Generator, name: str, cfg: ForgeryConfig = ForgeryConfig(),
                 kind: int | None = None):
    """One image of split ``name``: ``(img uint8, mask bool, kind, true_text, wrong_text,
    meta)``; ``meta`` names the source photo, the donor and every operation applied."""
    pool = split_photos(name)
    s = cfg.img_size
    if kind is None:
        kinds = _SPLIT_KINDS[name]
        kind = AUTHENTIC if rng.random() < 0.5 else kinds[int(rng.integers(len(kinds)))]
    src = pool[int(rng.integers(len(pool)))]
    base = _window(rng, photos.load_rgb(src), s, cfg.rescale)
    donor, donor_name = None, None
    if kind == SPLICE:
        donor_name = [p for p in pool if p != src][int(rng.integers(len(pool) - 1))]
        donor = jpeg(_window(rng, photos.load_rgb(donor_name), s + 8, cfg.rescale),
                     int(rng.integers(cfg.donor_jpeg[0], cfg.donor_jpeg[1] + 1)))
    img, mask, meta = synth_forgery(rng, base, donor, kind, cfg)
    img, mask, ops = postprocess(img, mask, rng, cfg, robust=(name == "test_robust"))
    if kind != AUTHENTIC and not mask.any():  # a resize can erase a sliver: keep it forged
        raise RuntimeError("mask vanished in post-processing")
    true, wrong = descriptions(rng, kind, mask)
    meta.update(source=src, donor=donor_name, ops=ops)
    meta.pop("source_mask", None)  # only synth_forgery's callers that ask for it keep it
    meta.pop("affine", None)
    return img, mask, kind, true, wrong, meta


_SPLIT_INDEX = {n: i for i, n in enumerate(SPLITS)}


def draw_example(seed_words: tuple[int, ...], name: str, cfg: ForgeryConfig = ForgeryConfig(),
                 kind: int | None = None):
    """``make_example`` from ``np.random.default_rng([*seed_words, attempt])``, retrying the
    rare draw whose mask cannot be placed or vanishes in post-processing (a new attempt
    redraws everything, so the accepted images stay identically distributed per kind)."""
    for attempt in range(20):
        try:
            return make_example(np.random.default_rng([*seed_words, attempt]), name, cfg, kind)
        except RuntimeError:
            continue
    raise RuntimeError(f"could not generate an image of split {name} from seed {seed_words}")


def make_split(name: str, n: int, seed: int, cfg: ForgeryConfig = ForgeryConfig(),
               return_meta: bool = False):
    """``n`` images of split ``name``, deterministic in ``(seed, name, index)``.

    Returns:
      A ``Split`` (and, with ``return_meta``, the per-image meta dicts).
    """
    validate(cfg)
    if name not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    s, length = cfg.img_size, prompts.MAX_TOKENS
    images = np.zeros((n, s, s, 3), np.uint8)
    masks = np.zeros((n, s, s), bool)
    kinds = np.zeros((n,), np.int32)
    true_ids = np.zeros((n, length), np.int32)
    wrong_ids = np.zeros((n, length), np.int32)
    metas = []
    for i in range(n):
        img, mask, kind, true, wrong, meta = draw_example((seed, _SPLIT_INDEX[name], i), name,
                                                          cfg)
        images[i], masks[i], kinds[i] = img, mask, kind
        true_ids[i], wrong_ids[i] = prompts.tokenize(true), prompts.tokenize(wrong)
        metas.append(meta)
    ok = np.random.default_rng([seed, _SPLIT_INDEX[name], 104729]).random(n) < cfg.text_reliability
    split = Split(images=images.astype(np.float32) / np.float32(255.0), masks=masks,
                  labels=(kinds != AUTHENTIC).astype(np.int32), kind=kinds,
                  text_ids=np.where(ok[:, None], true_ids, wrong_ids), text_ok=ok,
                  true_text_ids=true_ids, wrong_text_ids=wrong_ids)
    return (split, metas) if return_meta else split


def load_splits(sizes: dict[str, int], seed: int, cfg: ForgeryConfig, cache_dir: str | None
                ) -> dict[str, Split]:
    """Every split of ``sizes``, generated once and cached as ``.npz`` under
    ``<cache_dir>/<fingerprint>/`` (the fingerprint covers sizes, seed and ``cfg``)."""
    out = {}
    key = checkpoint.config_fingerprint({"sizes": dict(sizes), "seed": seed,
                                         "cfg": cfg._asdict(), "version": 1})
    root = None if cache_dir is None else pathlib.Path(cache_dir) / f"{key:016x}"
    for name, n in sizes.items():
        path = None if root is None else root / f"{name}.npz"
        if path is not None and path.exists():
            with np.load(path) as z:
                out[name] = Split(images=z["images"].astype(np.float32) / np.float32(255.0),
                                  **{f: z[f] for f in Split._fields if f != "images"})
            continue
        split = make_split(name, n, seed, cfg)
        if path is not None:
            root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.npz")
            u8 = np.round(split.images * 255.0).astype(np.uint8)
            np.savez(tmp, images=u8, **{f: getattr(split, f) for f in Split._fields
                                        if f != "images"})
            os.replace(tmp, path)
        out[name] = split
    return out


# --------------------------------------------------------------------------- real data

def _as_split(images_u8, masks, texts, oks, has_text) -> Split:
    n, length = len(images_u8), prompts.MAX_TOKENS
    text_ids = np.zeros((n, length), np.int32)
    for i in range(n):
        if has_text[i]:
            text_ids[i] = prompts.tokenize(texts[i])
    labels = np.asarray(masks).reshape(n, -1).any(1).astype(np.int32)
    kind = np.where(labels > 0, SPLICE, AUTHENTIC).astype(np.int32)  # the edit is unknown
    ok = np.asarray(oks, bool) & np.asarray(has_text, bool)
    return Split(images=np.asarray(images_u8, np.float32) / np.float32(255.0),
                 masks=np.asarray(masks, bool), labels=labels, kind=kind, text_ids=text_ids,
                 text_ok=ok, true_text_ids=text_ids, wrong_text_ids=text_ids)


def load_folder(img_dir: str | os.PathLike, mask_dir: str | os.PathLike | None, size: int,
                descriptions_jsonl: str | os.PathLike | None = None) -> Split:
    """A real benchmark folder as a ``Split``, read directly (no TFDS).

    The layout and pairing rules are those of the ``ifdl_folder`` TFDS builder
    (``icml26_jax.datasets.ifdl_folder``): images in ``img_dir`` pair with masks in
    ``mask_dir`` by stem (a ``_gt`` / ``_mask`` suffix is allowed); images without a mask,
    or with an empty one, are authentic. Images are area-resized to ``size``, masks with
    nearest neighbour. ``descriptions_jsonl`` (``{"stem", "text", "ok"}`` per line) feeds the
    text channel; images without a description get only ``<pad>`` tokens. The edit type of
    a real forgery is unknown: ``kind`` is ``SPLICE`` for every forged image.
    """
    from icml26_jax.datasets import ifdl_folder

    if size < 16 or size % 16:
        raise ValueError(f"size must be a positive multiple of 16, got {size}")
    pairs = ifdl_folder.pair_files(img_dir, mask_dir)
    texts = ifdl_folder.read_descriptions(descriptions_jsonl)
    read = [ifdl_folder.read_pair(ip, mp, size) for _, ip, mp in pairs]
    stems = [stem for stem, _, _ in pairs]
    return _as_split(np.stack([r[0] for r in read]), np.stack([r[1] for r in read]),
                     [texts.get(st, ("", False))[0] for st in stems],
                     [texts.get(st, ("", False))[1] for st in stems],
                     [st in texts for st in stems])


def load_tfds(img_dir, mask_dir, size: int, *, data_dir, descriptions_jsonl=None) -> Split:
    """Like ``load_folder``, through the ``ifdl_folder`` TFDS builder (prepared once as
    array_record under ``data_dir``, then read with ``tfds.data_source``)."""
    from icml26_jax.datasets import ifdl_folder

    if size < 16 or size % 16:
        raise ValueError(f"size must be a positive multiple of 16, got {size}")
    d = ifdl_folder.load_ifdl_folder(img_dir, mask_dir, size, descriptions=descriptions_jsonl,
                                     data_dir=data_dir)
    return _as_split(d["image"], d["mask"], list(d["text"]), d["text_ok"], d["has_text"])
