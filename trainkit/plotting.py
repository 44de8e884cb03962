"""One plotting style for every notebook, so figures look alike across the course."""
from __future__ import annotations

import matplotlib.pyplot as plt

STYLE = {
    "figure.figsize": (7.0, 3.6),
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "font.size": 10,
}


def subplots(nrows: int = 1, ncols: int = 1, width: float | None = None, height: float | None = None, **kwargs):
    """``plt.subplots`` with the course style; the default size grows with the number of panels."""
    plt.rcParams.update(STYLE)
    width = width if width is not None else 4.2 * ncols if ncols > 1 else STYLE["figure.figsize"][0]
    height = height if height is not None else 3.4 * nrows
    return plt.subplots(nrows, ncols, figsize=(width, height), layout="constrained", **kwargs)


def label(ax, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
          logy: bool = False, legend: bool = True) -> None:
    """Title, axis labels, optional log-y and a legend (only when something is labelled)."""
    if title:
        ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
