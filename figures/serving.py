"""Figures of serving jobs: latency, goodput and prefix-cache hits against the offered rate, one
marker per measured point (from the job's ``points.csv``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from figures.style import apply_theme, plt, save_figure
from vocab.result_files import POINTS_FILE

PANELS = (
    ("TTFT (ms)", ("median_ttft_ms", "p99_ttft_ms")),
    ("TPOT (ms)", ("median_tpot_ms", "p99_tpot_ms")),
    ("ITL (ms)", ("median_itl_ms", "p99_itl_ms")),
    ("goodput (req/s)", ("goodput_rps", "request_throughput_rps")),
)
HIT_COLUMNS = ("engine_prefix_hit_rate", "predicted_prefix_hit_rate", "cache_hit_fraction")
X = "offered_rate_rps"


def plot_latency_vs_rate(job_dir: Path) -> list[Path]:
    """``latency_vs_rate.png``: TTFT, TPOT, ITL, goodput and prefix hit rate against offered rate."""
    path = Path(job_dir) / POINTS_FILE
    if not path.is_file():
        return []
    points = pd.read_csv(path)
    if points.empty:
        return []
    if X not in points:
        raise ValueError(f"{path}: no column {X!r} (the offered rate of each point) to plot against")
    apply_theme()
    x = points[X]
    hit_cols = [c for c in HIT_COLUMNS if c in points and points[c].notna().any()]
    n_panels = len(PANELS) + (1 if hit_cols else 0)
    fig, axes = plt.subplots(1, n_panels, figsize=(3.3 * n_panels, 3.0), squeeze=False)
    for ax, (title, columns) in zip(axes[0], PANELS, strict=False):
        for column in columns:
            if column in points and points[column].notna().any():
                ax.plot(x, points[column], marker="o", label=column.replace("_", " "))
        ax.set_title(title)
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6)
    if hit_cols:
        ax = axes[0][-1]
        for column in hit_cols:
            ax.plot(x, points[column], marker="s", label=column.replace("_", " "))
        ax.set_title("prefix hit rate (prompt tokens)")
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=6)
    # a point is invalid where its `valid` cell is false; a missing cell is not
    invalid = points.loc[~points["valid"].fillna(True).astype(bool), X].tolist() if "valid" in points else []
    for ax in axes[0][: len(PANELS)]:
        for rate in invalid:
            ax.axvline(rate, color="red", alpha=0.25, linewidth=6)
    fig.suptitle("Serving latency against offered load" + (" (red: invalid point)" if invalid else ""))
    fig.tight_layout()
    keep = [c for c in ["point", "rate_rps", X, "valid", *[c for _, cols in PANELS for c in cols], *hit_cols]
            if c in points]
    return save_figure(fig, points[keep], job_dir, "latency_vs_rate")
