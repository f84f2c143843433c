"""core.photos: every bundled photo loads offline, as uint8 RGB, read-only."""

import socket

import numpy as np
import pytest

from icml26_jax.core import photos


class _NoSocket(socket.socket):
    def __init__(self, *args, **kwargs):
        raise OSError("network disabled in this test")


def test_every_photo_loads_offline_as_rgb(monkeypatch):
    import sklearn.datasets  # noqa: F401  (imported before sockets go: it subclasses them)
    from skimage import data  # noqa: F401

    monkeypatch.setattr(socket, "socket", _NoSocket)
    monkeypatch.setattr(socket, "create_connection",
                        lambda *a, **k: (_ for _ in ()).throw(OSError("network disabled")))
    photos.load_rgb.cache_clear()
    photos.load_float.cache_clear()
    seen = set()
    for name in photos.NAMES:
        img = photos.load_rgb(name)
        assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[-1] == 3, name
        assert min(img.shape[:2]) >= 170, (name, img.shape)
        assert not img.flags.writeable
        seen.add(img[::7, ::7].tobytes())
        f = photos.load_float(name)
        np.testing.assert_allclose(f * 255.0, img.astype(np.float32), atol=1e-4)
    assert len(seen) == len(photos.NAMES)  # no two names give the same pixels
    grey = photos.load_rgb("camera")
    np.testing.assert_array_equal(grey[..., 0], grey[..., 2])  # grey replicated to 3 channels
    stereo = photos.load_rgb("stereo_motorcycle")  # the left view of the pair
    assert stereo.shape == (500, 741, 3)


def test_unknown_photo_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown photo 'lena'.*astronaut"):
        photos.load_rgb("lena")
