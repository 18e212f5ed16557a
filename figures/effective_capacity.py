"""``study.figure: effective_capacity``: Mooncake's effective request capacity as FAST'25 plots it (Fig. 1, 6, 7):
the share of requests with TTFT <= the SLO's bound (30 s) and TBT <= x, against the TBT threshold x, one line
per system, one panel per trace, each trace replayed at its own load.

The shares are the study's ``attainment_tbt_<x>ms`` columns (:func:`figures.study_tables.effective_shares`);
nothing is recomputed here. Variants are ``<trace>/<system>``; a sensitivity run ``<trace>@<tag>/<system>``
gets its own panel.

Where the paper gives a number for a trace (the gains the claims in :mod:`figures.claims.mooncake_capacity` cite:
conversation +498 / +157 / +59% at thresholds I / II / III, Fig. 1 [P]; synthetic +62 / +40 / +28% at 100 / 200 /
300 ms, Fig. 7 [P]), its panel marks those thresholds and lists the paper's gain beside ours (Mooncake's share
over plain vLLM's, minus 1, as the claims grade it). The plotted CSV holds the shares
(``measure=effective_share``, ``source=ours``) and the gains (``measure=gain``, ``source=paper`` or ``ours``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.ticker import PercentFormatter

from figures.claims.base import MissingData
from figures.claims.mooncake_capacity import (
    JUDGED_BASELINE,
    PAPER_GAINS,
    PAPER_THRESHOLD_NAMES,
    SENSITIVITY_TAG,
    gain_at,
)
from figures.study_tables import JobFolder, effective_shares, ordered
from figures.style import apply_theme, save_figure

SYSTEM_ORDER = ("mooncake", "vllm", "vllm_prefix_caching", "vllm_chunked_prefill")
PAPER_FIGURE = {"conversation": "Fig. 1", "synthetic": "Fig. 7"}  # where each trace's paper gains are read [P]


def _threshold_name(trace: str, threshold_ms: float) -> str:
    """``I (100 ms)`` where the paper names the threshold (Fig. 1's conversation panel), else ``100 ms``."""
    name = PAPER_THRESHOLD_NAMES.get(threshold_ms) if trace == "conversation" else None
    return f"{name} ({threshold_ms:g} ms)" if name else f"{threshold_ms:g} ms"


def gain_rows(shares: pd.DataFrame) -> pd.DataFrame:
    """Per plotted trace with paper numbers (a sensitivity run ``<trace>@<tag>`` takes its trace's): the paper's
    gain at each of its thresholds (``source=paper``) and ours there (``source=ours``; left out when the trace
    lacks a system the gain needs)."""
    rows = []
    for trace in dict.fromkeys(shares["trace"]):
        base = str(trace).split(SENSITIVITY_TAG, 1)[0]
        for threshold_ms, paper in PAPER_GAINS.get(base, {}).items():
            label = _threshold_name(base, threshold_ms)
            rows.append({"trace": trace, "system": "mooncake", "tbt_threshold_ms": threshold_ms, "measure": "gain",
                         "gain": paper, "baseline": "vllm (variant unverified)", "source": "paper",
                         "label": f"{label}: paper {paper:+.0%} ({PAPER_FIGURE.get(base, '')} [P])"})
            try:
                ours = gain_at(shares, str(trace), threshold_ms)
            except MissingData:
                continue
            text = "n/a" if math.isnan(ours.value) else f"{ours.value:+.0%}"
            rows.append({"trace": trace, "system": "mooncake", "tbt_threshold_ms": threshold_ms, "measure": "gain",
                         "gain": ours.value, "baseline": JUDGED_BASELINE, "source": "ours",
                         "label": f"{label}: ours {text} over {JUDGED_BASELINE}"})
    return pd.DataFrame(rows)


def _annotate(ax: Axes, gains: pd.DataFrame) -> None:
    """Dotted lines at the paper's thresholds and a box listing the paper's gain and ours at each."""
    lines = []
    for threshold_ms, part in gains.groupby("tbt_threshold_ms", sort=True):
        ax.axvline(float(threshold_ms), color="0.4", linestyle=":", linewidth=0.8, zorder=0)
        trace = str(part["trace"].iloc[0]).split(SENSITIVITY_TAG, 1)[0]
        by_source = part.set_index("source")
        paper = f"paper {float(by_source.loc['paper', 'gain']):+.0%}"
        ours = ("ours n/a" if "ours" not in by_source.index or math.isnan(float(by_source.loc["ours", "gain"]))
                else f"ours {float(by_source.loc['ours', 'gain']):+.0%}")
        lines.append(f"{_threshold_name(trace, float(threshold_ms))}: {paper}, {ours}")
        name = PAPER_THRESHOLD_NAMES.get(float(threshold_ms)) if trace == "conversation" else None
        if name:
            ax.text(float(threshold_ms), 0.01, f" {name}", fontsize=6, color="0.3", ha="left", va="bottom")
    figure = PAPER_FIGURE.get(str(gains["trace"].iloc[0]).split(SENSITIVITY_TAG, 1)[0], "")
    head = f"Mooncake's gain over vLLM (paper: {figure} [P];\nours: over plain vLLM)"
    ax.text(0.98, 0.03, "\n".join([head, *lines]), transform=ax.transAxes, ha="right", va="bottom", fontsize=6,
            multialignment="left",
            bbox={"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": "0.6", "alpha": 0.9})


def plot_effective_capacity(job_dir: Path) -> list[Path]:
    """``effective_capacity.png``: share of effective requests against the TBT threshold, per system and trace,
    with the paper's gains beside ours at the paper's thresholds."""
    job = JobFolder(Path(job_dir))
    data = effective_shares(job.table())
    systems = ordered(data["system"], SYSTEM_ORDER)
    apply_theme()
    grid = sns.relplot(data=data, x="tbt_threshold_ms", y="effective_share", hue="system", hue_order=systems,
                       style="system", style_order=systems, col="trace", kind="line", markers=True, dashes=False,
                       height=3.2, aspect=1.25, facet_kws={"sharex": True, "sharey": True})
    grid.set(ylim=(0, 1.02))
    gains = gain_rows(data)
    for trace, ax in grid.axes_dict.items():
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        mine = gains[gains["trace"] == trace] if len(gains) else gains
        if len(mine):
            _annotate(ax, mine)
    grid.set_axis_labels("TBT threshold (ms)", "effective requests (share of all)")
    grid.set_titles("{col_name} trace")
    ttft = job.setting("slo.ttft_ms")
    bound = f"TTFT <= {float(ttft) / 1000:g} s and " if ttft else ""
    grid.figure.suptitle(f"Effective request capacity at the trace's own load: requests with {bound}TBT <= threshold",
                         y=1.04)
    plotted = pd.concat([data.assign(measure="effective_share", source="ours"), gains], ignore_index=True)
    return save_figure(grid.figure, plotted, job_dir, "effective_capacity")
