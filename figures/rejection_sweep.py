"""The rejection sweep (``experiment=mooncake_rejection_sweep``, ``study.figure: rejection_sweep``): where the
stand-in trace overloads Mooncake as arXiv 2407.00079 v3 Table 3 did. Per prefill:decode split (one column of
panels) and decode load threshold (one line each), the share of requests the per-stage (baseline) admission
rejected, and the share it rejected at the decode stage after their prefill ran, against the replay speed, beside
the paper's shares (its baseline's 4,183 of about 23,000 requests, and its baseline - early difference, 412).
Every number is a column the study wrote (:func:`figures.study_tables.rejection_sweep_table`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns

from figures.claims.mooncake_rejection import PAPER_AFTER_PREFILL_SHARE, PAPER_REJECTED_SHARE
from figures.study_tables import JobFolder, rejection_sweep_table
from figures.style import apply_theme, save_figure

MEASURES = {"rejected_share": ("rejected (share of requests)", PAPER_REJECTED_SHARE),
            "after_prefill_share": ("rejected after prefill (share)", PAPER_AFTER_PREFILL_SHARE)}


def sweep_long(table: pd.DataFrame) -> pd.DataFrame:
    """The sweep in long form: split, threshold (as a label), speed, measure, value and the paper's value."""
    sweep = rejection_sweep_table(table)
    long = sweep.melt(id_vars=["variant", "split", "decode_load_threshold", "speed"], value_vars=list(MEASURES),
                      var_name="measure", value_name="value")
    long["paper"] = long["measure"].map({k: v[1] for k, v in MEASURES.items()})
    long["measure"] = long["measure"].map({k: v[0] for k, v in MEASURES.items()})
    long["threshold"] = [f"{t:g}" for t in long["decode_load_threshold"]]
    return long


def plot_rejection_sweep(job_dir: Path) -> list[Path]:
    """``rejection_sweep.png``: a column per split, a row per share (all rejected, rejected after prefill), a line
    per decode load threshold against the replay speed (times the trace's own timestamps), the paper's share
    dashed; each panel has its own y scale, so that an after-prefill share near the paper's 1.8% stays visible."""
    long = sweep_long(JobFolder(Path(job_dir)).table())
    splits = list(dict.fromkeys(long["split"]))
    thresholds = sorted(set(long["threshold"]), key=float)
    apply_theme()
    grid = sns.relplot(data=long, x="speed", y="value", hue="threshold", hue_order=thresholds, col="split",
                       col_order=splits, row="measure", row_order=[m[0] for m in MEASURES.values()], kind="line",
                       marker="o", markersize=4, height=2.3, aspect=1.0, facet_kws={"sharey": False}, linewidth=0.9)
    for (measure, _split), ax in grid.axes_dict.items():
        paper = next(p for label, p in MEASURES.values() if label == measure)
        top = max(ax.get_ylim()[1], 2 * paper)  # the paper's line always in view
        ax.set_ylim(-0.03 * top, top)  # shares start at 0, a line at 0 stays visible
        ax.axhline(paper, color="black", linestyle="--", linewidth=0.8)
        ax.text(ax.get_xlim()[0], paper, f" paper {paper:.1%}", va="bottom", ha="left", fontsize=6)
        ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:.0%}")
    grid.set_axis_labels("replay speed (x)", "")
    grid.set_titles("{col_name}\n{row_name}")
    if grid.legend is not None:
        grid.legend.set_title("decode load\nthreshold")
    grid.figure.suptitle("Per-stage (baseline) rejection on the stand-in trace, by prefill:decode split of 16 nodes",
                         y=1.04)
    return save_figure(grid.figure, long, job_dir, "rejection_sweep")
