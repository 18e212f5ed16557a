"""The comparison figure of ``job=compare`` (``experiment=disagg_cpu``): one row of panels, one bar group
per deployment, all from ``study.csv``:

1. TTFT, median and p99 (ms);
2. TPOT, median and p99 (ms);
3. goodput (requests/s meeting the SLO) next to the offered rate;
4. prompt tokens served from a cache, split into the instance's own prefix cache and the cluster pool.

Failed variants are drawn as a labelled gap, never as zero. Writes ``figures/disagg_comparison.png``
and the CSV of exactly what it plots.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from figures.style import apply_theme, save_figure
from harness.result_files import STUDY_FILE

FIGURE_NAME = "disagg_comparison"


def comparison_table(job_dir: Path) -> pd.DataFrame:
    """``study.csv`` in long form: variant, panel, measure, value (NaN for a failed variant)."""
    table = pd.read_csv(Path(job_dir) / STUDY_FILE)
    panels = {
        "TTFT (ms)": {"median": "median_ttft_ms", "p99": "p99_ttft_ms"},
        "TPOT (ms)": {"median": "median_tpot_ms", "p99": "p99_tpot_ms"},
        "requests/s": {"offered": "offered_rate_rps", "goodput": "goodput_rps"},
        "prompt tokens from cache": {"local": "local_hit_rate", "pool": "pool_hit_rate"},
    }
    rows = []
    for _, r in table.iterrows():
        ok = r.get("status", "ok") == "ok"
        for panel, measures in panels.items():
            for measure, column in measures.items():
                value = r.get(column) if ok and column in table else float("nan")
                rows.append({"variant": r["variant"], "status": r.get("status", "ok"), "panel": panel,
                             "measure": measure, "value": float(value) if value is not None else float("nan")})
    return pd.DataFrame(rows)


def plot_disagg_comparison(job_dir: Path) -> list[Path]:
    """Draw the four-panel comparison of one ``job=compare`` folder (nothing when it has no study.csv)."""
    job_dir = Path(job_dir)
    if not (job_dir / STUDY_FILE).exists():
        return []
    data = comparison_table(job_dir)
    apply_theme()
    panels = list(dict.fromkeys(data["panel"]))
    order = list(dict.fromkeys(data["variant"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8))
    for ax, panel in zip(axes, panels, strict=True):
        part = data[data["panel"] == panel]
        if panel == "prompt tokens from cache":
            wide = part.pivot(index="variant", columns="measure", values="value").reindex(order).fillna(0.0)
            ax.bar(order, wide.get("local", 0.0), label="own prefix cache")
            ax.bar(order, wide.get("pool", 0.0), bottom=wide.get("local", 0.0), label="cluster pool")
            ax.set_ylim(0, 1)
            ax.legend(fontsize=8)
        else:
            sns.barplot(data=part, x="variant", y="value", hue="measure", order=order, ax=ax)
            ax.legend(fontsize=8, title=None)
        failed = part[part["status"] != "ok"]["variant"].unique()
        for name in failed:
            ax.annotate("failed", (order.index(name), 0), ha="center", va="bottom", color="firebrick", fontsize=8)
        ax.set_title(panel)
        ax.set_xlabel("")
        ax.set_ylabel(panel)
        ax.tick_params(axis="x", rotation=20)
    fig.suptitle("Same workload, four deployments (real vLLM processes)")
    fig.tight_layout()
    return save_figure(fig, data, job_dir, FIGURE_NAME)
