"""Figures across the jobs of a sweep, from its ``sweep.csv`` (:mod:`harness.sweep.table`): a metric
against any swept key (or any column), a line per value of a second key, a panel per value of a third.

Drawn by the sweep's callback at the end of every ``--multirun`` (:func:`default_sweep_figures`: the
headline metrics the table has, against the first swept key) and by hand for any choice::

    python -m figures.sweep results/<experiment> --metric p99_ttft_ms --x workload.arrival.rate_rps \\
        --hue system --facet system.prefill_instances

Each figure is ``<sweep dir>/sweep_figures/<metric>_vs_<x>[_by_<hue>][_per_<facet>].png`` with the rows it
plotted beside it as ``.csv``. Only jobs that ended ``ok`` are plotted; a numeric x is drawn as lines,
a categorical one as grouped bars.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from vocab.result_files import SWEEP_FIGURES_DIR, SWEEP_TABLE_FILE

log = logging.getLogger(__name__)

HEADLINE_METRICS = ("slo_attainment", "goodput_rps_per_gpu", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                    "p99_tpot_ms", "request_throughput_rps", "cache_hit_fraction")
MAX_DEFAULT_FIGURES = 4


class SweepFigureError(ValueError):
    """A requested figure names a column the table does not have, or has nothing to plot."""


def _numeric(series: pd.Series) -> Optional[pd.Series]:
    converted = pd.to_numeric(series, errors="coerce")
    return converted if converted.notna().all() else None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]", "_", name)


def figure_name(metric: str, x: str, hue: Optional[str], facet: Optional[str]) -> str:
    """The file stem of a figure."""
    name = f"{metric}_vs_{x}" + (f"_by_{hue}" if hue else "") + (f"_per_{facet}" if facet else "")
    return _safe(name)


def plot_sweep(table: pd.DataFrame, sweep_dir: Path, metric: str, x: str, hue: Optional[str] = None,
               facet: Optional[str] = None) -> list[Path]:
    """Draw ``metric`` against ``x`` (a line or bar group per ``hue`` value, a panel per ``facet`` value);
    write the PNG and the plotted rows; return both paths. ``SweepFigureError`` names a missing column."""
    for role, column in (("--metric", metric), ("--x", x), ("--hue", hue), ("--facet", facet)):
        if column is not None and column not in table.columns:
            raise SweepFigureError(f"{role} {column}: not a column of the sweep table; it has "
                                   f"{', '.join(map(str, table.columns))}")
    rows = table[table["status"] == "ok"] if "status" in table.columns else table
    values = _numeric(rows[metric]) if len(rows) else None
    if values is None or values.empty:
        raise SweepFigureError(f"--metric {metric}: no numeric values in the jobs that ended ok")
    keep = [c for c in dict.fromkeys(["folder", x, hue, facet, metric]) if c is not None and c in rows.columns]
    data = rows[keep].copy()
    data[metric] = values
    numeric_x = _numeric(data[x])
    if numeric_x is not None:
        data[x] = numeric_x
    data = data.sort_values([c for c in (facet, hue, x) if c is not None], kind="stable")
    fig = _draw(data, metric, x, hue, facet, numeric_x is not None)
    from figures.style import save_figure

    return save_figure(fig, data, Path(sweep_dir), figure_name(metric, x, hue, facet), folder=SWEEP_FIGURES_DIR)


def _draw(data: pd.DataFrame, metric: str, x: str, hue: Optional[str], facet: Optional[str],
          numeric_x: bool) -> Any:
    from figures.style import apply_theme, plt  # the Agg backend and the suite's theme

    apply_theme()
    panels = list(dict.fromkeys(data[facet])) if facet else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False, sharey=True)
    for ax, panel in zip(axes[0], panels, strict=True):
        part = data if panel is None else data[data[facet] == panel]
        groups = list(dict.fromkeys(part[hue])) if hue else [None]
        if numeric_x:
            for group in groups:
                series = part if group is None else part[part[hue] == group]
                ax.plot(series[x], series[metric], marker="o", label=None if group is None else f"{hue}={group}")
        else:
            categories = list(dict.fromkeys(part[x].astype(str)))
            width = 0.8 / max(len(groups), 1)
            for g, group in enumerate(groups):
                series = part if group is None else part[part[hue] == group]
                heights = [series[series[x].astype(str) == c][metric].mean() for c in categories]
                offsets = [i + (g - (len(groups) - 1) / 2) * width for i in range(len(categories))]
                ax.bar(offsets, heights, width=width, label=None if group is None else f"{hue}={group}")
            ax.set_xticks(range(len(categories)), categories, rotation=30, ha="right")
        ax.set_xlabel(x)
        if facet:
            ax.set_title(f"{facet}={panel}")
        if hue:
            ax.legend(fontsize="small")
    axes[0][0].set_ylabel(metric)
    fig.suptitle(f"{metric} across the sweep's jobs", y=1.02)
    return fig


def default_sweep_figures(table: pd.DataFrame, sweep_dir: Path, swept: Sequence[str]) -> list[Path]:
    """The figures drawn after every sweep: up to :data:`MAX_DEFAULT_FIGURES` headline metrics against the
    first swept key (a numeric one first), a line per value of the next swept key, a panel per the third.
    None when nothing is swept or the table has none of the headline metrics."""
    keys = [k for k in dict.fromkeys(swept) if k in table.columns]
    if not keys:
        return []
    keys.sort(key=lambda k: _numeric(table[k]) is None)  # a numeric key makes the better x axis
    x, hue, facet = keys[0], (keys[1] if len(keys) > 1 else None), (keys[2] if len(keys) > 2 else None)
    paths: list[Path] = []
    metrics = [m for m in HEADLINE_METRICS if m in table.columns][:MAX_DEFAULT_FIGURES]
    for metric in metrics:
        try:
            paths += plot_sweep(table, sweep_dir, metric, x, hue, facet)
        except SweepFigureError as exc:
            log.info("sweep figure %s not drawn: %s", metric, exc)
    return paths


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m figures.sweep SWEEP_DIR --metric M --x KEY [--hue KEY] [--facet KEY]``."""
    parser = argparse.ArgumentParser(prog="python -m figures.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", type=Path, help=f"a sweep's folder (holds {SWEEP_TABLE_FILE})")
    parser.add_argument("--metric", required=True, help="a column of sweep.csv, e.g. p99_ttft_ms")
    parser.add_argument("--x", required=True, help="the x axis: a swept key or any column")
    parser.add_argument("--hue", default=None, help="a line (or bar) per value of this column")
    parser.add_argument("--facet", default=None, help="a panel per value of this column")
    args = parser.parse_args(argv)
    table_path = args.sweep_dir / SWEEP_TABLE_FILE
    if not table_path.is_file():
        print(f"error: {table_path}: no sweep table (run a --multirun sweep into {args.sweep_dir} first)",
              file=sys.stderr)
        return 2
    try:
        paths = plot_sweep(pd.read_csv(table_path), args.sweep_dir, args.metric, args.x, args.hue, args.facet)
    except SweepFigureError as exc:
        print(f"error: {table_path}: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
