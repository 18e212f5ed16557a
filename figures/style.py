"""Shared figure set-up: a non-interactive backend, one theme, and the save routine that writes a PNG
together with the exact data it plotted.

The theme is seaborn's ``set_theme(context="paper", style="whitegrid", palette="colorblind")``. Both files are
written atomically (:func:`vocab.atomic_files.write_atomically`: a temporary name in the same folder,
fsynced, then ``os.replace``), so a redraw that fails or is killed never leaves a half-written PNG or CSV, nor
a figure beside the data of another run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from vocab.atomic_files import write_atomically  # noqa: E402
from vocab.result_files import FIGURES_DIR  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["SAVE_DPI", "apply_theme", "plt", "save_figure"]

SAVE_DPI = 150  # every figure's PNG


def apply_theme() -> None:
    """Set the suite's theme on matplotlib's rc settings."""
    sns.set_theme(context="paper", style="whitegrid", palette="colorblind")


def save_figure(fig: Figure, data: pd.DataFrame, job_dir: Path, name: str, folder: str = FIGURES_DIR) -> list[Path]:
    """Write ``<job>/<folder>/<name>.png`` (cropped to what is drawn) and ``<name>.csv`` (the plotted data;
    ``folder`` defaults to ``figures``); return both paths. The figure is closed."""
    out = Path(job_dir) / folder
    out.mkdir(parents=True, exist_ok=True)
    png, csv = out / f"{name}.png", out / f"{name}.csv"
    try:
        write_atomically(png, lambda tmp: fig.savefig(tmp, format="png", dpi=SAVE_DPI, bbox_inches="tight"))
    finally:
        plt.close(fig)
    write_atomically(csv, lambda tmp: data.to_csv(tmp, index=False))
    return [png, csv]
