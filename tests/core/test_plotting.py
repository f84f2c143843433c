"""Tests of icml26_jax.core.plotting: figures without pyplot, PNGs on disk."""

import sys

import matplotlib.image
import numpy as np
import pytest

from icml26_jax.core import plotting


def test_single_axes_png(tmp_path):
    fig, ax = plotting.figure()
    ax.plot([0, 1, 2], [1, 0, 1])
    path = plotting.save(fig, tmp_path / "sub" / "dir" / "curve.png", dpi=50)
    assert path == str(tmp_path / "sub" / "dir" / "curve.png")
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(path)
    # size=(4.5, 3.5) inches at 50 dpi.
    assert img.shape[:2] == (175, 225)
    assert img.std() > 0  # something was drawn


def test_grid_of_axes(tmp_path):
    fig, axes = plotting.figure(2, 3, size=(2.0, 1.0))
    assert isinstance(axes, np.ndarray) and axes.shape == (2, 3)
    assert tuple(fig.get_size_inches()) == (6.0, 2.0)  # size is per panel
    for ax in axes.flat:
        ax.bar([0, 1], [1, 2])
    plotting.save(fig, tmp_path / "grid.png")
    assert matplotlib.image.imread(tmp_path / "grid.png").shape[:2] == (240, 720)


def test_no_pyplot_state():
    plotting.figure()
    if "matplotlib.pyplot" in sys.modules:  # another test may have imported it
        assert sys.modules["matplotlib.pyplot"].get_fignums() == []


def test_bad_grid():
    with pytest.raises(ValueError, match="nrows and ncols must be >= 1"):
        plotting.figure(0, 1)


def test_save_writes_only_on_the_primary_process(tmp_path, monkeypatch):
    import jax

    fig, ax = plotting.figure()
    ax.plot([0, 1], [1, 0])
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    path = plotting.save(fig, tmp_path / "sub" / "p.png")
    assert path == str(tmp_path / "sub" / "p.png")
    assert not (tmp_path / "sub").exists()
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    plotting.save(fig, tmp_path / "sub" / "p.png")
    assert (tmp_path / "sub" / "p.png").stat().st_size > 0
