"""Real photographs that ship inside the scikit-image and scikit-learn wheels.

Several papers need natural-image statistics without a download (textures for tgsf's
scenes, camera / JPEG traces for fpda's forgeries). Every photo here is a file inside an
installed wheel: nothing is fetched on demand (``tests/core/test_photos.py`` loads them all
with sockets disabled).
"""

from __future__ import annotations

import functools

import numpy as np

# scikit-image ``skimage.data.<name>()`` (``stereo_motorcycle`` returns a pair: its left view).
SKIMAGE = ("astronaut", "brick", "camera", "cell", "chelsea", "coffee", "coins", "grass",
           "gravel", "hubble_deep_field", "immunohistochemistry", "moon", "page", "retina",
           "rocket", "stereo_motorcycle", "text")
# scikit-learn ``sklearn.datasets.load_sample_image(<name>)``.
SKLEARN = ("china.jpg", "flower.jpg")
NAMES = SKIMAGE + SKLEARN


@functools.lru_cache(maxsize=None)
def load_rgb(name: str) -> np.ndarray:
    """One bundled photo as read-only ``uint8[H, W, 3]`` (grey photos replicated to 3 channels).

    Args:
      name: one of ``NAMES``.

    Raises:
      ValueError: ``name`` is not a bundled photo.
    """
    if name in SKIMAGE:
        from skimage import data as skdata  # local import: only data generation needs it
        img = getattr(skdata, name)()
        if isinstance(img, tuple):  # stereo_motorcycle: (left, right, disparity)
            img = img[0]
    elif name in SKLEARN:
        from sklearn.datasets import load_sample_image
        img = load_sample_image(name)
    else:
        raise ValueError(f"unknown photo {name!r}; bundled photos: {', '.join(NAMES)}")
    img = np.asarray(img)
    if img.dtype != np.uint8:
        raise ValueError(f"photo {name!r} is {img.dtype}, expected uint8")
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=-1)
    img = np.ascontiguousarray(img[..., :3])
    img.setflags(write=False)
    return img


@functools.lru_cache(maxsize=None)
def load_float(name: str) -> np.ndarray:
    """``load_rgb(name)`` as read-only ``float32[H, W, 3]`` in [0, 1]."""
    out = load_rgb(name).astype(np.float32) / np.float32(255.0)
    out.setflags(write=False)
    return out
