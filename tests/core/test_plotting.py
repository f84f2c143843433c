"""Tests of icml26_jax.core.plotting: figures without pyplot, PNGs on disk."""

import subprocess
import sys

import matplotlib.image
import numpy as np
import pytest

from icml26_jax.core import plotting, testing


def test_single_axes_png(tmp_path):
    fig, ax = plotting.figure()
    ax.plot([0, 1, 2], [1, 0, 1])
    ax.set(xlabel="step", ylabel="loss (nats)")
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
        ax.set(xlabel="arm", ylabel="accuracy (%)")
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
    ax.set(xlabel="x (m)", ylabel="y (m)")
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    path = plotting.save(fig, tmp_path / "sub" / "p.png")
    assert path == str(tmp_path / "sub" / "p.png")
    assert not (tmp_path / "sub").exists()
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    plotting.save(fig, tmp_path / "sub" / "p.png")
    assert (tmp_path / "sub" / "p.png").stat().st_size > 0


def test_save_refuses_an_unlabelled_axes_and_writes_nothing(tmp_path):
    fig, axes = plotting.figure(2, 2, sharex=True)
    for ax in axes.flat:
        ax.plot([0, 1], [1, 2])
    for ax in axes[1]:
        ax.set_xlabel("step")  # a shared x axis: labelling the bottom row covers the column
    axes[0, 0].set_ylabel("loss (nats)")
    axes[1, 0].set_ylabel("accuracy (%)")
    with pytest.raises(ValueError, match=r"^p\.png: every axis needs a label with its unit; "
                       r"axes 1: no y label; axes 3: no y label$"):
        plotting.save(fig, tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()
    axes[0, 1].set_title("right")
    assert plotting.unlabelled_axes(fig) == ["axes 1 ('right'): no y label",
                                             "axes 3: no y label"]
    for ax in axes[:, 1]:
        ax.set_ylabel("grad norm")
    # Colorbars and panels shown as pictures (axis off) need no labels; empty axes neither.
    im = axes[0, 0].imshow(np.eye(3))
    fig.colorbar(im, ax=axes[0, 0])
    pic_fig, (pic, row) = plotting.figure(1, 2)
    pic.imshow(np.eye(3))
    pic.axis("off")
    row.imshow(np.eye(3))  # a picture whose row is named by its y label, without ticks
    row.set(xticks=[], yticks=[], ylabel="seed 0")
    assert plotting.unlabelled_axes(fig) == [] and plotting.unlabelled_axes(pic_fig) == []
    row.set_yticks([0, 1, 2])  # ticks: the axis measures something, so it needs its label
    row.set_ylabel("")
    assert plotting.unlabelled_axes(pic_fig) == ["axes 1: no y label"]
    assert plotting.unlabelled_axes(plotting.figure()[0]) == []
    plotting.save(fig, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0


def test_importing_the_papers_does_not_import_matplotlib():
    """matplotlib (0.4 s) is imported when a figure is made, not when an entry script starts:
    a bad flag fails, and every test subprocess starts, without it."""
    code = ("import sys\n"
            "import icml26_jax.core.plotting\n"
            "for p in ('dsgd_hp', 'tgsf', 'discrete_diffusion', 'safe_flow_rl'):\n"
            "    __import__(f'icml26_jax.{p}.report')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=testing.REPO_ROOT).stdout
    assert out.strip() == "[]", out
