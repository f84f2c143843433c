"""Procedural compositional scenes, GenEval-schema prompts and the two renderers (spec §Data
[R]: the CPU-scale substitute for CoF-Evol-Instruct).

World: a 32 x 32 RGB canvas; shapes {circle, square, triangle, cross}; colours {red, green,
blue, yellow, purple, cyan}; object sizes 7-10 px; at least 2 px between bounding boxes;
counts 1-4; relations {left of, right of, above, below} with GenEval's rule.

Prompts and metadata follow GenEval's schema and templates (``tag``, ``include`` clauses
``{class, count[, color][, position: [relation, target clause]]}``, ``exclude`` for exact
counts, ``prompt``), with the six tags ``single_object``, ``two_object``, ``counting``,
``colors``, ``position``, ``color_attr``. A fixed 20 % of the (colour, shape) pairs and of
the (shape, shape, relation) triples is held out: it never appears in a training prompt or
a training image.

Renderers, both from a scene graph:

* ``flat`` (F2 and drafts): uniform grey background, flat fill, hard edges.
* ``refined`` (F3): a vertical-gradient background with low-amplitude noise texture, radial
  shading of each object (value only, never hue), a 1-px dark outline, a soft shadow, and
  2x supersampled anti-aliasing.
"""

from __future__ import annotations

import itertools
import zlib
from typing import NamedTuple

import numpy as np

SHAPES = ("circle", "square", "triangle", "cross")
COLORS = ("red", "green", "blue", "yellow", "purple", "cyan")
RGB = {"red": (214, 40, 40), "green": (38, 166, 58), "blue": (42, 78, 216),
       "yellow": (226, 204, 34), "purple": (146, 58, 188), "cyan": (36, 188, 204)}
RELATIONS = ("left of", "right of", "above", "below")
TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
NUMBERS = ("zero", "one", "two", "three", "four")
STYLES = ("flat", "refined")
RES = 32
SIZE_RANGE = (7, 10)  # object side / diameter in pixels
MIN_GAP = 2  # pixels between bounding boxes
MAX_COUNT = 4
POSITION_THRESHOLD = 0.1  # GenEval's relative-position shrink factor
HOLDOUT_FRACTION = 0.2
_HOLDOUT_SEED = 20260710


class Obj(NamedTuple):
    """One object: centre (x, y) in pixels (y points down), side / diameter ``size``."""
    shape: str
    color: str
    x: float
    y: float
    size: float

    @property
    def box(self) -> tuple[float, float, float, float]:
        """The nominal (x0, y0, x1, y1) square around the object (placement and gaps)."""
        h = self.size / 2.0
        return (self.x - h, self.y - h, self.x + h, self.y + h)

    def pixel_box(self, res: int = RES) -> tuple[float, float, float, float]:
        """(x0, y0, x1, y1) pixel edges of the pixels the object owns (``object_mask``): the
        box a perfect detector reports, used for relations (GenEval's convention)."""
        ys, xs = np.nonzero(object_mask(self, res))
        return (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))


class Scene(NamedTuple):
    objs: tuple[Obj, ...]


def _holdouts():
    rng = np.random.default_rng(_HOLDOUT_SEED)
    pairs = list(itertools.product(COLORS, SHAPES))
    # Every colour and every shape keeps at least 3 training pairs.
    while True:
        idx = rng.choice(len(pairs), size=round(HOLDOUT_FRACTION * len(pairs)), replace=False)
        held = {pairs[i] for i in idx}
        if (all(sum((c, s) not in held for s in SHAPES) >= 3 for c in COLORS)
                and all(sum((c, s) not in held for c in COLORS) >= 3 for s in SHAPES)):
            break
    triples = [(a, b, r) for a in SHAPES for b in SHAPES if a != b for r in RELATIONS]
    idx = rng.choice(len(triples), size=round(HOLDOUT_FRACTION * len(triples)), replace=False)
    return frozenset(held), frozenset(triples[i] for i in idx)


HELDOUT_PAIRS, HELDOUT_TRIPLES = _holdouts()


def _article(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def _plural(word: str) -> str:
    return f"{word}es" if word.endswith("s") else f"{word}s"


def _check_tag(tag: str) -> None:
    if tag not in TAGS:
        raise ValueError(f"tag must be one of {TAGS}, got {tag!r}")


def prompt_combos(metadata: dict) -> tuple[set, set]:
    """The (colour, shape) pairs and (shape, shape, relation) triples a prompt names."""
    inc = metadata["include"]
    pairs = {(c["color"], c["class"]) for c in inc if "color" in c}
    triples = set()
    for c in inc:
        if "position" in c:
            rel, target = c["position"]
            triples.add((c["class"], inc[target]["class"], rel))
    return pairs, triples


def is_heldout(metadata: dict) -> bool:
    """Whether the prompt names a held-out (colour, shape) pair or relation triple."""
    pairs, triples = prompt_combos(metadata)
    return bool(pairs & HELDOUT_PAIRS or triples & HELDOUT_TRIPLES)


def _draw_metadata(tag: str, rng: np.random.Generator) -> dict:
    if tag == "single_object":
        s = SHAPES[rng.integers(len(SHAPES))]
        return {"tag": tag, "include": [{"class": s, "count": 1}],
                "prompt": f"a photo of {_article(s)}"}
    if tag == "two_object":
        a, b = rng.choice(len(SHAPES), 2, replace=False)
        a, b = SHAPES[a], SHAPES[b]
        return {"tag": tag, "include": [{"class": a, "count": 1}, {"class": b, "count": 1}],
                "prompt": f"a photo of {_article(a)} and {_article(b)}"}
    if tag == "counting":
        s = SHAPES[rng.integers(len(SHAPES))]
        n = int(rng.integers(2, MAX_COUNT, endpoint=True))
        return {"tag": tag, "include": [{"class": s, "count": n}],
                "exclude": [{"class": s, "count": n + 1}],
                "prompt": f"a photo of {NUMBERS[n]} {_plural(s)}"}
    if tag == "colors":
        s, c = SHAPES[rng.integers(len(SHAPES))], COLORS[rng.integers(len(COLORS))]
        return {"tag": tag, "include": [{"class": s, "count": 1, "color": c}],
                "prompt": f"a photo of {_article(c)} {s}"}
    if tag == "position":
        a, b = rng.choice(len(SHAPES), 2, replace=False)
        a, b = SHAPES[a], SHAPES[b]
        rel = RELATIONS[rng.integers(len(RELATIONS))]
        return {"tag": tag, "include": [{"class": b, "count": 1},
                                        {"class": a, "count": 1, "position": [rel, 0]}],
                "prompt": f"a photo of {_article(a)} {rel} {_article(b)}"}
    a, b = rng.choice(len(SHAPES), 2, replace=False)
    ca, cb = rng.choice(len(COLORS), 2, replace=False)
    a, b, ca, cb = SHAPES[a], SHAPES[b], COLORS[ca], COLORS[cb]
    return {"tag": tag, "include": [{"class": a, "count": 1, "color": ca},
                                    {"class": b, "count": 1, "color": cb}],
            "prompt": f"a photo of {_article(ca)} {a} and {_article(cb)} {b}"}


def sample_prompt(tag: str, rng: np.random.Generator, holdout: str = "train"
                  ) -> tuple[str, dict]:
    """A GenEval-style prompt and its metadata.

    Args:
      tag: one of ``TAGS``.
      rng: the generator.
      holdout: ``"train"`` (no held-out combination), ``"heldout"`` (at least one; only
        ``colors``, ``position`` and ``color_attr`` have combinations) or ``"any"``.

    Returns:
      ``(prompt, metadata)``; ``metadata["heldout"]`` says whether it names a held-out
      combination.
    """
    _check_tag(tag)
    if holdout not in ("train", "heldout", "any"):
        raise ValueError(f"holdout must be 'train', 'heldout' or 'any', got {holdout!r}")
    if holdout == "heldout" and tag not in ("colors", "position", "color_attr"):
        raise ValueError(f"tag {tag!r} names no (colour, shape) pair or relation triple: it "
                         "has no held-out prompts")
    for _ in range(1000):
        md = _draw_metadata(tag, rng)
        held = is_heldout(md)
        if holdout == "any" or held == (holdout == "heldout"):
            md["heldout"] = held
            return md["prompt"], md
    raise RuntimeError(f"could not draw a {holdout} prompt for tag {tag}")


# --------------------------------------------------------------------------- geometry

def relative_position(box_a, box_b, threshold: float = POSITION_THRESHOLD) -> set[str]:
    """GenEval's relation of box A to box B ((x0, y0, x1, y1), y down).

    The centre offset's components are shrunk toward 0 by ``threshold * (w_a + w_b)`` (and
    the heights); a relation holds when the shrunk component over the offset's norm is
    beyond +-0.5. Identical centres (or everything shrunk away) give no relation.
    """
    a = np.asarray(box_a, np.float64).reshape(2, 2)
    b = np.asarray(box_b, np.float64).reshape(2, 2)
    offset = a.mean(0) - b.mean(0)
    dims = np.abs(np.diff(a, axis=0))[0] + np.abs(np.diff(b, axis=0))[0]
    revised = np.maximum(np.abs(offset) - threshold * dims, 0.0) * np.sign(offset)
    if np.all(np.abs(revised) < 1e-3):
        return set()
    dx, dy = revised / np.linalg.norm(offset)
    rels = set()
    if dx < -0.5:
        rels.add("left of")
    if dx > 0.5:
        rels.add("right of")
    if dy < -0.5:
        rels.add("above")
    if dy > 0.5:
        rels.add("below")
    return rels


def _gap_ok(o: Obj, others, res: int) -> bool:
    x0, y0, x1, y1 = o.box
    if x0 < 1 or y0 < 1 or x1 > res - 1 or y1 > res - 1:
        return False
    for p in others:
        a0, b0, a1, b1 = p.box
        if not (x1 + MIN_GAP <= a0 or a1 + MIN_GAP <= x0 or y1 + MIN_GAP <= b0
                or b1 + MIN_GAP <= y0):
            return False
    return True


def satisfies(scene: Scene, metadata: dict) -> bool:
    """GenEval's rules applied to the scene graph itself (the data verifier only: never to
    generated images). Include clauses AND, exclude clauses OR; colours and positions are
    checked on the first ``count`` objects of the class."""
    by_class: dict[str, list[Obj]] = {}
    for o in scene.objs:
        by_class.setdefault(o.shape, []).append(o)
    groups = []
    for req in metadata["include"]:
        found = by_class.get(req["class"], [])[:req["count"]]
        if len(found) < req["count"]:
            return False
        if "color" in req and sum(o.color == req["color"] for o in found) < req["count"]:
            return False
        if "position" in req:
            rel, target = req["position"]
            if groups[target] is None:
                return False
            if any(rel not in relative_position(o.pixel_box(), t.pixel_box()) for o in found
                   for t in groups[target]):
                return False
        groups.append(found)
    for req in metadata.get("exclude", []):
        if len(by_class.get(req["class"], [])) >= req["count"]:
            return False
    return True


RELATION_MARGIN = 0.6  # generated scenes put relations at >= 0.6 (the rule's cut is 0.5)


def relation_strength(box_a, box_b, rel: str, threshold: float = POSITION_THRESHOLD) -> float:
    """The shrunk offset component along ``rel`` over the offset norm (GenEval's quantity;
    the relation holds above 0.5)."""
    a = np.asarray(box_a, np.float64).reshape(2, 2)
    b = np.asarray(box_b, np.float64).reshape(2, 2)
    offset = a.mean(0) - b.mean(0)
    norm = np.linalg.norm(offset)
    if norm == 0:
        return 0.0
    dims = np.abs(np.diff(a, axis=0))[0] + np.abs(np.diff(b, axis=0))[0]
    revised = np.maximum(np.abs(offset) - threshold * dims, 0.0) * np.sign(offset)
    axis, sign = {"left of": (0, -1), "right of": (0, 1), "above": (1, -1),
                  "below": (1, 1)}[rel]
    return float(sign * revised[axis] / norm)


def _clear_relations(scene: Scene, metadata: dict) -> bool:
    """Every requested relation holds with a margin (>= RELATION_MARGIN), so a detector's
    box that is off by a pixel does not flip it."""
    by_class: dict[str, list[Obj]] = {}
    for o in scene.objs:
        by_class.setdefault(o.shape, []).append(o)
    inc = metadata["include"]
    for req in inc:
        if "position" in req:
            rel, target = req["position"]
            for o in by_class.get(req["class"], [])[:req["count"]]:
                for t in by_class.get(inc[target]["class"], [])[:inc[target]["count"]]:
                    if relation_strength(o.pixel_box(), t.pixel_box(), rel) < RELATION_MARGIN:
                        return False
    return True


def _free_colors(shape: str, avoid: frozenset) -> list[str]:
    return [c for c in COLORS if (c, shape) not in avoid]


def sample_scene(metadata: dict, rng: np.random.Generator, res: int = RES,
                 avoid: frozenset = frozenset()) -> Scene:
    """A minimal scene satisfying ``metadata``: exactly the objects it asks for.

    Unspecified colours are random but never a pair in ``avoid`` (training scenes pass
    ``HELDOUT_PAIRS``). Positions are random with the minimum gap; relations are drawn until
    GenEval's rule holds with a margin (``RELATION_MARGIN``).
    """
    for _ in range(500):
        objs: list[Obj] = []
        ok = True
        for req in metadata["include"]:
            for _k in range(req["count"]):
                colors = [req["color"]] if "color" in req else _free_colors(req["class"], avoid)
                color = colors[rng.integers(len(colors))]
                for _try in range(60):
                    size = float(rng.integers(SIZE_RANGE[0], SIZE_RANGE[1] + 1))
                    h = size / 2 + 1
                    # Snapped centres: squares and crosses cover whole pixels, identically in
                    # the flat (1x) and refined (2x supersampled) renders.
                    x, y = (snap(v, size) for v in rng.uniform(h, res - h, 2))
                    o = Obj(req["class"], color, x, y, size)
                    if _gap_ok(o, objs, res):
                        objs.append(o)
                        break
                else:
                    ok = False
                    break
            if not ok:
                break
        if ok:
            scene = Scene(tuple(objs))
            if satisfies(scene, metadata) and _clear_relations(scene, metadata):
                return scene
    raise RuntimeError(f"could not place a scene for {metadata['prompt']!r}")


# --------------------------------------------------------------------------- rendering

def cross_arm(size: float) -> int:
    """Arm width of a cross: 3 px for odd sizes, 4 px for even ones (same parity as the size,
    so with ``snap``ped centres every edge lies on a pixel boundary)."""
    return 3 if int(round(size)) % 2 else 4


def snap(v: float, size: float) -> float:
    """A centre coordinate on the pixel grid that puts the edges of a ``size``-px object on
    pixel boundaries: pixel centres (k + 0.5) for odd sizes, pixel corners for even ones."""
    if int(round(size)) % 2:
        return float(np.floor(v) + 0.5)
    return float(np.round(v))


def shape_mask(shape: str, x: float, y: float, size: float, res: int, scale: int = 1
               ) -> np.ndarray:
    """Coverage mask ``bool[res * scale, res * scale]`` of one shape (pixel centres)."""
    n = res * scale
    c = (np.arange(n) + 0.5) / scale
    yy, xx = np.meshgrid(c, c, indexing="ij")
    dx, dy = xx - x, yy - y
    h = size / 2.0
    if shape == "circle":
        return dx * dx + dy * dy <= h * h
    if shape == "square":
        return (np.abs(dx) <= h) & (np.abs(dy) <= h)
    if shape == "triangle":  # apex up, base at the bottom of the box
        t = (dy + h) / (2 * h)  # 0 at the apex row, 1 at the base
        return (t >= 0) & (t <= 1) & (np.abs(dx) <= t * h)
    if shape == "cross":
        arm = cross_arm(size) / 2.0
        return ((np.abs(dx) <= arm) & (np.abs(dy) <= h)) | ((np.abs(dy) <= arm)
                                                           & (np.abs(dx) <= h))
    raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")


def object_mask(o: Obj, res: int = RES) -> np.ndarray:
    """The pixels an object owns in both styles: 2x2-supersampled coverage >= 1/2.

    Both renderers use this geometry (the refined one adds anti-aliasing around it), so an
    object sits on the same pixels in F2 (flat) and F3 (refined).
    """
    cov = shape_mask(o.shape, o.x, o.y, o.size, res, 2).reshape(res, 2, res, 2).mean((1, 3))
    return cov >= 0.5


def render(scene: Scene, style: str, res: int = RES, rng: np.random.Generator | None = None
           ) -> np.ndarray:
    """Renders a scene as ``uint8[res, res, 3]`` in the ``flat`` or ``refined`` style.

    ``rng`` draws the refined background texture (default: a fixed texture per scene, so
    the same scene renders identically).
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if style == "flat":
        img = np.full((res, res, 3), 128.0, np.float32)
        for o in scene.objs:
            img[object_mask(o, res)] = RGB[o.color]
        return img.astype(np.uint8)
    s = 2  # supersampling
    n = res * s
    if rng is None:
        rng = np.random.default_rng(zlib.crc32(repr(tuple(scene.objs)).encode()))
    yy = (np.arange(n)[:, None] + 0.5) / n
    top, bottom = np.array([200.0, 204, 212]), np.array([150.0, 146, 140])
    img = (top + (bottom - top) * yy[..., None]) * np.ones((n, n, 1))
    noise = rng.standard_normal((res // 4, res // 4)).repeat(4 * s, 0).repeat(4 * s, 1)
    img += 6.0 * noise[..., None]
    c = (np.arange(n) + 0.5) / s
    gy, gx = np.meshgrid(c, c, indexing="ij")
    for o in scene.objs:  # soft shadows first, offset down-right
        sh = shape_mask(o.shape, o.x + 1.0, o.y + 1.2, o.size, res, s).astype(np.float32)
        blur = (sh + np.roll(sh, 1, 0) + np.roll(sh, 1, 1) + np.roll(sh, -1, 0)
                + np.roll(sh, -1, 1)) / 5.0
        img *= 1.0 - 0.35 * blur[..., None]
    from scipy import ndimage

    for o in scene.objs:
        m = shape_mask(o.shape, o.x, o.y, o.size, res, s)
        # The 1-px outline lies just outside the shape, so the fill keeps the flat render's
        # geometry (a ring inside would thin a cross's 3-px arms to 1 px).
        ring = ndimage.binary_dilation(m, iterations=s) & ~m
        r = np.sqrt((gx - o.x + 0.2 * o.size) ** 2 + (gy - o.y + 0.2 * o.size) ** 2)
        shade = np.clip(1.15 - 0.45 * r / o.size, 0.7, 1.15)  # light from the top left
        col = np.clip(np.asarray(RGB[o.color], np.float32) * shade[..., None], 0, 255)
        img = np.where(ring[..., None], 0.25 * np.asarray(RGB[o.color], np.float32), img)
        img = np.where(m[..., None], col, img)
    img = img.reshape(res, s, res, s, 3).mean((1, 3))  # anti-aliasing
    return np.clip(np.round(img), 0, 255).astype(np.uint8)
