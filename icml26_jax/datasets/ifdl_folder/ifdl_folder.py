"""TFDS builder ``ifdl_folder``: an image-forgery benchmark folder (images + masks [+ text]).

The layout CASIA, Coverage, NIST16, CocoGlide and OpenForensics mask exports use: images in
``img_dir``; binary masks in ``mask_dir`` paired by file stem (a mask stem may carry a
``_gt`` / ``_mask`` / ``-mask`` suffix); an image without a mask, or whose mask has no
foreground, is authentic. An optional JSONL of ``{"stem", "text", "ok"}`` records adds the
SID-Set-style description channel (``ok`` defaults to true).

Every example: ``image`` uint8 ``[S, S, 3]`` (area-resized), ``mask`` bool ``[S, S]``
(nearest, > 127), ``label`` int32 (1 = forged), ``stem``, ``text`` (empty when none),
``has_text`` and ``text_ok``. The config name is ``<8 hex digits of sha256(paths)>_<S>``.

Usage::

    from icml26_jax.datasets import ifdl_folder
    ds = ifdl_folder.load_ifdl_folder("/data/CASIA/Tp", "/data/CASIA/gt", 64,
                                      data_dir=workdir / "tfds")
    ds["image"]                                                     # [N, 64, 64, 3] uint8
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib

import numpy as np
import tensorflow_datasets as tfds

from icml26_jax.core import data as core_data

NAME = "ifdl_folder"
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp")
MASK_SUFFIXES = ("_gt", "_mask", "-mask", "_GT")
KEYS = ("image", "mask", "label", "stem", "text", "has_text", "text_ok")


def pair_files(img_dir: str | os.PathLike, mask_dir: str | os.PathLike | None
               ) -> list[tuple[str, pathlib.Path, pathlib.Path | None]]:
    """``(stem, image path, mask path or None)`` for every image, sorted by file name.

    Raises:
      ValueError: ``img_dir`` is not a directory or holds no images; ``mask_dir`` is given
        but is not a directory.
    """
    img_dir = pathlib.Path(img_dir)
    if not img_dir.is_dir():
        raise ValueError(f"img_dir {str(img_dir)!r} is not a directory")
    files = sorted(p for p in img_dir.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise ValueError(f"img_dir {str(img_dir)!r} holds no images "
                         f"({', '.join(IMAGE_EXTENSIONS)})")
    masks = {}
    if mask_dir is not None:
        mask_dir = pathlib.Path(mask_dir)
        if not mask_dir.is_dir():
            raise ValueError(f"mask_dir {str(mask_dir)!r} is not a directory")
        for p in mask_dir.iterdir():
            if p.suffix.lower() in IMAGE_EXTENSIONS:
                stem = p.stem
                for suffix in MASK_SUFFIXES:
                    if stem.endswith(suffix):
                        stem = stem[:-len(suffix)]
                        break
                masks[stem] = p
    return [(p.stem, p, masks.get(p.stem)) for p in files]


def read_pair(img_path, mask_path, size: int) -> tuple[np.ndarray, np.ndarray]:
    """An image (uint8 ``[S, S, 3]``, box/area resize) and its mask (bool, nearest)."""
    from PIL import Image

    with Image.open(img_path) as im:
        img = np.asarray(im.convert("RGB").resize((size, size), Image.BOX), np.uint8)
    mask = np.zeros((size, size), bool)
    if mask_path is not None:
        with Image.open(mask_path) as im:
            mask = np.asarray(im.convert("L").resize((size, size), Image.NEAREST)) > 127
    return img, mask


def read_descriptions(path: str | os.PathLike | None) -> dict[str, tuple[str, bool]]:
    """``{stem: (text, ok)}`` from a JSONL file (empty without one)."""
    if path is None:
        return {}
    out = {}
    with open(path) as f:
        for i, line in enumerate(f):
            if line.strip():
                rec = json.loads(line)
                if "stem" not in rec or "text" not in rec:
                    raise ValueError(f"{path}:{i + 1}: a description needs 'stem' and 'text'")
                out[str(rec["stem"])] = (str(rec["text"]), bool(rec.get("ok", True)))
    return out


def config_name(img_dir, mask_dir, size: int, descriptions=None) -> str:
    key = "|".join(os.path.abspath(os.fspath(p)) if p else "" for p in (img_dir, mask_dir,
                                                                         descriptions))
    return f"{hashlib.sha256(key.encode()).hexdigest()[:8]}_{int(size)}"


@dataclasses.dataclass(eq=False)
class FolderConfig(tfds.core.BuilderConfig):
    """A benchmark folder: ``img_dir``, ``mask_dir`` (or empty), ``descriptions`` (or empty)
    and the output side ``size``."""

    img_dir: str = ""
    mask_dir: str = ""
    descriptions: str = ""
    size: int = 64

    @classmethod
    def make(cls, img_dir, mask_dir, size: int, descriptions=None) -> FolderConfig:
        if int(size) < 8:
            raise ValueError(f"size must be >= 8, got {size}")
        paths = [os.path.abspath(os.fspath(p)) if p else "" for p in (img_dir, mask_dir,
                                                                       descriptions)]
        return cls(name=config_name(img_dir, mask_dir, size, descriptions), img_dir=paths[0],
                   mask_dir=paths[1], descriptions=paths[2], size=int(size),
                   description=f"forgery folder {paths[0]}")


class IfdlFolder(tfds.core.GeneratorBasedBuilder):
    """Images, forgery masks and optional descriptions from local folders."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}

    def _info(self) -> tfds.core.DatasetInfo:
        s = self.builder_config.size if self.builder_config else None
        return self.dataset_info_from_configs(
            description="Image forgery detection / localisation folder (images, masks, text).",
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Tensor(shape=(s, s, 3), dtype=np.uint8),
                "mask": tfds.features.Tensor(shape=(s, s), dtype=np.bool_),
                "label": tfds.features.Scalar(dtype=np.int32),
                "stem": tfds.features.Text(),
                "text": tfds.features.Text(),
                "has_text": tfds.features.Scalar(dtype=np.bool_),
                "text_ok": tfds.features.Scalar(dtype=np.bool_),
            }),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # local folders: nothing to download
        cfg = self.builder_config
        if cfg is None or not cfg.img_dir:
            raise ValueError("ifdl_folder needs a config: FolderConfig.make(img_dir, mask_dir, "
                             "size) or load_ifdl_folder")
        return {"test": self._generate_examples(cfg)}

    def _generate_examples(self, cfg):
        texts = read_descriptions(cfg.descriptions or None)
        for stem, img_path, mask_path in pair_files(cfg.img_dir, cfg.mask_dir or None):
            img, mask = read_pair(img_path, mask_path, cfg.size)
            text, ok = texts.get(stem, ("", False))
            yield stem, {"image": img, "mask": mask, "label": np.int32(mask.any()),
                         "stem": stem, "text": text, "has_text": stem in texts, "text_ok": ok}


def load_ifdl_folder(img_dir, mask_dir, size: int, *, descriptions=None,
                     data_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """Prepares (once) and reads the whole folder: ``{key: array}`` for ``KEYS``, sorted by
    file name (``stem`` and ``text`` as object arrays of str)."""
    if data_dir is None:
        raise ValueError("data_dir is required (we never read ~/tensorflow_datasets)")
    pair_files(img_dir, mask_dir)  # clear errors before TFDS gets involved
    config = FolderConfig.make(img_dir, mask_dir, size, descriptions)
    src = core_data.data_source(NAME, "test", data_dir=data_dir, download=True,
                                builder_kwargs={"config": config,
                                                "file_format": "array_record"})
    recs = src.__getitems__(list(range(len(src))))
    out = {k: np.stack([np.asarray(r[k]) for r in recs]) for k in ("image", "mask", "label",
                                                                    "has_text", "text_ok")}
    for k in ("stem", "text"):
        out[k] = np.array([r[k].decode() if isinstance(r[k], bytes) else str(r[k])
                           for r in recs], dtype=object)
    return out
