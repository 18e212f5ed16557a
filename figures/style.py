"""Shared figure set-up: a non-interactive backend, one seaborn theme, and the save routine that
writes a PNG together with the exact data it plotted.

Both files are written atomically (:func:`harness.atomic_files.write_atomically`: a temporary name in
the same folder, fsynced, then ``os.replace``), so a redraw that fails or is killed never leaves a
half-written PNG or CSV, nor a figure beside the data of another run."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness.atomic_files import write_atomically  # noqa: E402
from harness.result_files import FIGURES_DIR  # noqa: E402


def apply_theme() -> None:
    sns.set_theme(context="paper", style="whitegrid", palette="colorblind")


def save_figure(fig: plt.Figure, data: pd.DataFrame, job_dir: Path, name: str) -> list[Path]:
    """Write ``<job>/figures/<name>.png`` and ``<name>.csv`` (the plotted data); return both paths."""
    out = Path(job_dir) / FIGURES_DIR
    out.mkdir(parents=True, exist_ok=True)
    png, csv = out / f"{name}.png", out / f"{name}.csv"
    try:
        write_atomically(png, lambda tmp: fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight"))
    finally:
        plt.close(fig)
    write_atomically(csv, lambda tmp: data.to_csv(tmp, index=False))
    return [png, csv]
