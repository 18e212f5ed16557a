"""The comparison figure of ``job=compare`` (``experiment=disagg_cpu``): one row of panels, one bar group
per deployment, all from ``study.csv``:

1. TTFT, median and p99 (ms);
2. TPOT, median and p99 (ms);
3. goodput (requests/s meeting the SLO) next to the offered rate;
4. prompt tokens served from a cache, split into the instance's own prefix cache and the cluster pool.

Failed variants are drawn as a labelled gap, never as zero. Invalid variants (``valid`` false in
``study.csv``: too short, behind schedule, tail not bounded... see ``docs/metrics.md``) are drawn greyed and
hatched, with "INVALID: <first reason>" under their name and every reason in a note below the panels; a
host-interference or overload reason (another process took CPU during the point, or the offered load exceeded
what the system served) is named first, as it explains the others.
Writes ``figures/disagg_comparison.png`` and the CSV of exactly what it plots (with ``valid``, the
reasons and the tick ``label``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from figures.style import apply_theme, save_figure
from vocab.result_files import STUDY_FILE

FIGURE_NAME = "disagg_comparison"
INVALID = "INVALID"
_LABEL_REASON_CHARS = 38  # first reason, cut to this length, under the variant's name
# reasons that explain the others (harness/validity.py): shown under the name before any other
_ROOT_CAUSES = ("host interference", "overloaded")


def _is_valid(value: object) -> bool:
    """``valid`` as written to ``study.csv`` (missing: valid, as tables written before validity was kept)."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return True
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no")
    return bool(value)


def variant_label(variant: str, valid: bool, reasons: str) -> str:
    """Tick label: the variant, and for an invalid one "INVALID: <first reason, shortened>" below it (a
    host-interference or overload reason before any other)."""
    if valid:
        return variant
    split = str(reasons or "no reason recorded").split("; ")
    first = next((r for r in split if any(cause in r for cause in _ROOT_CAUSES)), split[0])
    short = first if len(first) <= _LABEL_REASON_CHARS else first[: _LABEL_REASON_CHARS - 3] + "..."
    return f"{variant}\n{INVALID}: {short}"


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
        valid = ok and _is_valid(r.get("valid"))
        reasons = r.get("validity_reasons") if "validity_reasons" in table else ""
        reasons = "" if valid or reasons is None or pd.isna(reasons) else str(reasons)
        if not ok and not reasons:
            reasons = f"variant failed: {r.get('reason', '')}"
        label = variant_label(str(r["variant"]), valid, reasons) if ok else str(r["variant"])
        for panel, measures in panels.items():
            for measure, column in measures.items():
                value = r.get(column) if ok and column in table else float("nan")
                rows.append({"variant": r["variant"], "label": label, "status": r.get("status", "ok"),
                             "valid": valid, "validity_reasons": reasons, "panel": panel, "measure": measure,
                             "value": float(value) if value is not None else float("nan")})
    return pd.DataFrame(rows)


def _mark_invalid(ax: plt.Axes, invalid_positions: set[int]) -> None:
    """Grey out and hatch every bar drawn at an invalid variant's x position."""
    for patch in ax.patches:
        x = patch.get_x() + patch.get_width() / 2.0
        if round(x) in invalid_positions:
            patch.set_facecolor("lightgrey")
            patch.set_edgecolor("dimgrey")
            patch.set_hatch("//")


def plot_disagg_comparison(job_dir: Path) -> list[Path]:
    """Draw the four-panel comparison of one ``job=compare`` folder (nothing when it has no study.csv)."""
    job_dir = Path(job_dir)
    if not (job_dir / STUDY_FILE).exists():
        return []
    data = comparison_table(job_dir)
    apply_theme()
    panels = list(dict.fromkeys(data["panel"]))
    order = list(dict.fromkeys(data["variant"]))
    labels = dict(zip(data["variant"], data["label"], strict=True))
    invalid = data[(data["status"] == "ok") & ~data["valid"].astype(bool)]
    invalid_positions = {order.index(v) for v in invalid["variant"].unique()}
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
        _mark_invalid(ax, invalid_positions)
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels([labels[v] for v in order], fontsize=7)
        ax.set_title(panel)
        ax.set_xlabel("")
        ax.set_ylabel(panel)
        ax.tick_params(axis="x", rotation=20)
    title = "Same workload, four deployments (real vLLM processes)"
    if invalid_positions:
        title += f" -- {len(invalid_positions)} {INVALID} (hatched)"
        notes = [f"{INVALID} {v}: {r}" for v, r in invalid.groupby("variant", sort=False)["validity_reasons"].first().items()]
        fig.text(0.01, -0.02, "\n".join(textwrap.fill(n, 180) for n in notes), ha="left", va="top", fontsize=7,
                 color="firebrick")
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, data, job_dir, FIGURE_NAME)
