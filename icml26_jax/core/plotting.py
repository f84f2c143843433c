"""Matplotlib figures without pyplot's global state, saved as PNG (Agg canvas).

``pyplot`` keeps every figure alive in a global registry and picks a GUI backend; library
code that runs in tests, subprocesses and notebooks uses ``matplotlib.figure.Figure``
directly, which needs neither::

    fig, ax = plotting.figure()
    ax.plot(steps, loss)
    ax.set(xlabel="step", ylabel="training loss (nats / token)")
    plotting.save(fig, os.path.join(workdir, "loss.png"))

``save`` refuses a figure with an unlabelled axes (:func:`unlabelled_axes`): a reader must
know what each axis measures and in which unit.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from icml26_jax.core import distributed

if TYPE_CHECKING:  # matplotlib is imported when a figure is made (0.4 s less at start-up)
    from matplotlib.figure import Figure


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
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, **subplot_kw)
    return fig, axes


def unlabelled_axes(fig: Figure) -> list[str]:
    """What lacks a label in ``fig``: for every axes that is drawn (axis on) and holds data,
    its x and its y axis each need a label, its own or one of the axes it shares that axis
    with (a grid labels its outer panels only). Colorbars carry their own label and are
    skipped; so are panels turned off (``ax.axis("off")``) and, in a panel that shows only
    images, an axis without ticks (a picture, whose pixels measure nothing).

    Returns:
      One description per missing label (empty when the figure is fully labelled).
    """
    missing = []
    for k, ax in enumerate(fig.axes):
        if not ax.axison or getattr(ax, "_colorbar", None) is not None:
            continue
        if not (ax.lines or ax.collections or ax.images or ax.patches or ax.containers):
            continue
        picture = ax.images and not (ax.lines or ax.collections or ax.patches)
        for which in ("x", "y"):
            if picture and len(getattr(ax, f"get_{which}ticks")()) == 0:
                continue
            group = getattr(ax, f"get_shared_{which}_axes")().get_siblings(ax)
            if not any(getattr(a, f"get_{which}label")().strip() for a in group):
                title = ax.get_title() or ax.get_title("left") or fig.get_suptitle()
                missing.append(f"axes {k}{f' ({title!r})' if title else ''}: no {which} label")
    return missing


def save(fig: Figure, path: str | os.PathLike, *, dpi: int = 120) -> str:
    """Writes ``fig`` as a PNG at ``path`` (parent directories created) on the writing
    process (``core.distributed.is_primary``); returns the path on every process.

    Raises:
      ValueError: an axes of ``fig`` lacks an axis label (:func:`unlabelled_axes`), on
        every process, before anything is written.
    """
    path = os.fspath(path)
    missing = unlabelled_axes(fig)
    if missing:
        raise ValueError(f"{os.path.basename(path)}: every axis needs a label with its unit; "
                         + "; ".join(missing))
    if not distributed.is_primary():
        return path
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path
