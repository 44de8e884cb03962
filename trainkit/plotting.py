"""One plotting style for every notebook, so figures look alike across the course."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib import font_manager

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


_fonts_checked = False


def register_bundled_fonts() -> int:
    """Add the fonts that ship with matplotlib to its font list if they are missing; return how many were added.

    Mathtext, which draws the tick labels of every log axis ($10^{-2}$), loads its STIX and Computer Modern
    fallback fonts by family name. matplotlib reads its font list from a cache file in its config directory
    (``~/.cache/matplotlib/fontlist-v<version>.json``) that every installation with the same cache version
    shares; a list written by an installation that lacked these fonts (or by hand) does not contain them, and
    then each lookup logs "findfont: Font family ['STIXGeneral'] not found" to stderr: about twenty lines the
    first time a notebook draws a log axis. Registering the bundled files removes the cause.
    """
    known = {Path(entry.fname).resolve() for entry in font_manager.fontManager.ttflist}
    bundled = sorted(Path(matplotlib.get_data_path(), "fonts", "ttf").glob("*.ttf"))
    missing = [path for path in bundled if path.resolve() not in known]
    for path in missing:
        font_manager.fontManager.addfont(path)
    if missing:
        font_manager.fontManager._findfont_cached.cache_clear()  # forget lookups made with the incomplete list
    return len(missing)


def subplots(nrows: int = 1, ncols: int = 1, width: float | None = None, height: float | None = None, **kwargs):
    """``plt.subplots`` with the course style; the default size grows with the number of panels."""
    plt.rcParams.update(STYLE)
    global _fonts_checked
    if not _fonts_checked:  # once per process
        register_bundled_fonts()
        _fonts_checked = True
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
