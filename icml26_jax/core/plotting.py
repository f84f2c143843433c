"""Matplotlib figures without pyplot's global state, saved as PNG (Agg canvas).

``pyplot`` keeps every figure alive in a global registry and picks a GUI backend; library
code that runs in tests, subprocesses and notebooks uses ``matplotlib.figure.Figure``
directly, which needs neither::

    fig, ax = plotting.figure()
    ax.plot(steps, loss)
    plotting.save(fig, os.path.join(workdir, "loss.png"))
"""

from __future__ import annotations

import os

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from icml26_jax.core import distributed


def figure(nrows: int = 1, ncols: int = 1, *, size: tuple[float, float] = (4.5, 3.5),
           **subplot_kw):
    """A new figure with a grid of axes, drawn by the Agg (PNG) canvas.

    Args:
      nrows: rows of axes.
      ncols: columns of axes.
      size: ``(width, height)`` in inches of ONE panel; the figure is ``ncols * width``
        by ``nrows * height``.
      **subplot_kw: passed to ``Figure.subplots`` (e.g. ``sharex=True``).

    Returns:
      ``(fig, axes)``: a single ``Axes`` for a 1x1 grid, else a NumPy array of them
      (``squeeze`` semantics of ``Figure.subplots``).
    """
    if nrows < 1 or ncols < 1:
        raise ValueError(f"nrows and ncols must be >= 1, got nrows={nrows}, ncols={ncols}")
    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, **subplot_kw)
    return fig, axes


def save(fig: Figure, path: str | os.PathLike, *, dpi: int = 120) -> str:
    """Writes ``fig`` as a PNG at ``path`` (parent directories created) on the writing
    process (``core.distributed.is_primary``); returns the path on every process."""
    path = os.fspath(path)
    if not distributed.is_primary():
        return path
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path
