"""Shared figure set-up: a non-interactive backend, one theme, and the save routine that writes a PNG
together with the exact data it plotted.

The theme is seaborn's ``set_theme(context="paper", style="whitegrid", palette="colorblind")``, written out
as the rc settings it applies (:data:`THEME_STYLE`, :data:`THEME_CONTEXT`, the colour cycle and the
single-letter colour codes of :data:`COLORBLIND`), so that a figure drawn with plain matplotlib does not pay
for importing seaborn (about a third of a second); ``tests/unit/test_process_imports.py`` checks that the
two set the same rc. Seaborn's default colormap (``rocket``) is only set once seaborn is imported (it
registers the map); the figures that draw with seaborn import it themselves.

Both files are written atomically (:func:`harness.atomic_files.write_atomically`: a temporary name in
the same folder, fsynced, then ``os.replace``), so a redraw that fails or is killed never leaves a
half-written PNG or CSV, nor a figure beside the data of another run.

Importing this module does not import pyplot (its ``plt`` is imported on first use): a figure made with
:func:`new_figure` (a plain ``Figure`` on the Agg canvas) needs none, which saves a single run's figure
(:mod:`figures.serving`) the pyplot import and its backend set-up. ``save_figure(..., tight=False)`` draws
the figure once, for figures laid out beforehand (:mod:`figures.row_layout`); its data may be a
:class:`figures.csv_table.CsvTable` (written as ``DataFrame.to_csv(index=False)`` would), so that path
needs no pandas either."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
from cycler import cycler  # noqa: E402

from figures.csv_table import CsvTable  # noqa: E402
from harness.atomic_files import write_atomically  # noqa: E402
from harness.result_files import FIGURES_DIR  # noqa: E402

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["COLORBLIND", "SAVE_DPI", "THEME_CONTEXT", "THEME_STYLE", "apply_theme", "new_figure", "save_figure"]

SAVE_DPI = 150  # every figure's PNG


def __getattr__(name: str) -> Any:
    """``plt`` (``matplotlib.pyplot``), imported when first asked for (with the Agg backend set above)."""
    if name == "plt":
        import matplotlib.pyplot as plt

        return plt
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# seaborn.axes_style("whitegrid", rc={"font.family": "sans-serif"}) (seaborn 0.13)
THEME_STYLE: dict[str, Any] = {
    "figure.facecolor": "white", "axes.labelcolor": ".15", "xtick.direction": "out", "ytick.direction": "out",
    "xtick.color": ".15", "ytick.color": ".15", "axes.axisbelow": True, "grid.linestyle": "-", "text.color": ".15",
    "font.family": "sans-serif",
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"],
    "lines.solid_capstyle": "round", "patch.edgecolor": "w", "patch.force_edgecolor": True, "xtick.top": False,
    "ytick.right": False, "axes.grid": True, "axes.facecolor": "white", "axes.edgecolor": ".8", "grid.color": ".8",
    "axes.spines.left": True, "axes.spines.bottom": True, "axes.spines.right": True, "axes.spines.top": True,
    "xtick.bottom": False, "ytick.left": False,
}
SEABORN_CMAP = "rocket"  # the style's image.cmap, a seaborn colormap
# seaborn.plotting_context("paper"): its "notebook" sizes scaled by 0.8
THEME_CONTEXT: dict[str, Any] = {
    "axes.linewidth": 1.0, "grid.linewidth": 0.8, "lines.linewidth": 1.2000000000000002,
    "lines.markersize": 4.800000000000001, "patch.linewidth": 0.8, "xtick.major.width": 1.0,
    "ytick.major.width": 1.0, "xtick.minor.width": 0.8, "ytick.minor.width": 0.8,
    "xtick.major.size": 4.800000000000001, "ytick.major.size": 4.800000000000001, "xtick.minor.size": 3.2,
    "ytick.minor.size": 3.2, "font.size": 9.600000000000001, "axes.labelsize": 9.600000000000001,
    "axes.titlesize": 9.600000000000001, "xtick.labelsize": 8.8, "ytick.labelsize": 8.8, "legend.fontsize": 8.8,
    "legend.title_fontsize": 9.600000000000001,
}
# seaborn's "colorblind" palette (the colour cycle); its first six, without the orange ones, plus a dark grey
# are the single-letter codes b, g, r, m, y, c, k (seaborn.set_color_codes("colorblind"))
COLORBLIND = ("#0173B2", "#DE8F05", "#029E73", "#D55E00", "#CC78BC", "#CA9161", "#FBAFE4", "#949494", "#ECE133",
              "#56B4E9")
_COLOR_CODES = dict(zip("bgrmyck", ("#0173B2", "#029E73", "#D55E00", "#CC78BC", "#ECE133", "#56B4E9",
                                    (0.1, 0.1, 0.1)), strict=True))


def apply_theme() -> None:
    """Set the suite's theme (what ``seaborn.set_theme(context="paper", style="whitegrid",
    palette="colorblind")`` sets), without importing seaborn."""
    rc = {**THEME_STYLE, **THEME_CONTEXT,
          "axes.prop_cycle": cycler("color", [mcolors.to_rgb(c) for c in COLORBLIND])}
    if SEABORN_CMAP in matplotlib.colormaps:  # registered by seaborn, when a figure has imported it
        rc["image.cmap"] = SEABORN_CMAP
    matplotlib.rcParams.update(rc)
    for code, color in _COLOR_CODES.items():
        mcolors.colorConverter.colors[code] = mcolors.to_rgb(color)


def new_figure(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float]) -> tuple[Figure, np.ndarray]:
    """A figure on the Agg canvas at the PNG's resolution, and its ``nrows`` x ``ncols`` axes (a 2-D array),
    without pyplot: nothing registers it, so nothing needs closing, and text measured before drawing
    (:mod:`figures.row_layout`) is measured as it is drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=SAVE_DPI)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _write_data(data: pd.DataFrame | CsvTable, path: Path) -> None:
    if isinstance(data, CsvTable):
        data.write_csv(path)
    else:
        data.to_csv(path, index=False)


def _close(fig: Figure) -> None:
    pyplot = sys.modules.get("matplotlib.pyplot")  # a figure pyplot made is registered there; no other is
    if pyplot is not None:
        pyplot.close(fig)


def save_figure(fig: Figure, data: pd.DataFrame | CsvTable, job_dir: Path, name: str, folder: str = FIGURES_DIR,
                *, tight: bool = True) -> list[Path]:
    """Write ``<job>/<folder>/<name>.png`` and ``<name>.csv`` (the plotted data; ``folder`` defaults to
    ``figures``); return both paths. ``tight`` crops the PNG to what is drawn (``bbox_inches="tight"``, which
    draws the figure an extra time); ``tight=False`` saves the figure as laid out, drawing it once."""
    out = Path(job_dir) / folder
    out.mkdir(parents=True, exist_ok=True)
    png, csv = out / f"{name}.png", out / f"{name}.csv"
    bbox = "tight" if tight else None
    try:
        write_atomically(png, lambda tmp: fig.savefig(tmp, format="png", dpi=SAVE_DPI, bbox_inches=bbox))
    finally:
        _close(fig)
    write_atomically(csv, lambda tmp: _write_data(data, tmp))
    return [png, csv]
