"""``study.figure: slo_scale``: DistServe's "tighter SLO" plot (OSDI'24 Fig. 8, lower row): SLO attainment
against the scale both latency bounds are multiplied by (x axis from loose to tight), one panel per workload
tag (row) and per-GPU rate (column), one colour per system, one line style per curve (both bounds, TTFT only,
TPOT only), the target line and each system's crossing scale (dash-dot).

Attainment and crossings are the study's ``slo_scale.csv`` and ``slo_crossing.csv``
(:mod:`harness.studies.slo_scale`); nothing is recomputed here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.ticker import PercentFormatter

from figures.study_tables import JobFolder, split_label
from figures.style import apply_theme, save_figure
from vocab.result_files import SLO_CROSSING_FILE, SLO_SCALE_FILE

CURVES = {"attainment": "TTFT and TPOT", "attainment_ttft": "TTFT only", "attainment_tpot": "TPOT only"}


def slo_scale_long(scales: pd.DataFrame, crossings: pd.DataFrame) -> pd.DataFrame:
    """One row per variant, point, scale and curve, with the variant's workload, system and crossing."""
    parts = [split_label(v) for v in scales["variant"]]
    frame = scales.assign(workload=[w or "default" for w, _ in parts], system=[s for _, s in parts])
    cross = crossings.set_index(["variant", "point"])[["crossing_scale", "bound"]]
    frame = frame.join(cross, on=["variant", "point"])
    long = frame.melt(id_vars=["variant", "workload", "system", "point", "per_gpu_rate", "slo_scale", "target",
                               "crossing_scale", "bound"], value_vars=list(CURVES), var_name="curve",
                      value_name="share")
    return long.assign(curve=long["curve"].map(CURVES))


def plot_slo_scale(job_dir: Path) -> list[Path]:
    """``slo_scale.png``: attainment against the SLO scale per system, panels per workload and rate."""
    job = JobFolder(Path(job_dir))
    data = slo_scale_long(job.table(SLO_SCALE_FILE), job.table(SLO_CROSSING_FILE))
    apply_theme()
    grid = sns.relplot(data=data, x="slo_scale", y="share", hue="system", style="curve",
                       style_order=list(CURVES.values()), row="workload", col="per_gpu_rate", kind="line",
                       markers=False, height=2.4, aspect=1.3, facet_kws={"sharex": True, "sharey": True})
    palette = dict(zip(data["system"].unique(), sns.color_palette(n_colors=data["system"].nunique()), strict=True))
    for (workload, rate), ax in grid.axes_dict.items():
        panel = data[(data["workload"] == workload) & (data["per_gpu_rate"] == rate)]
        for system, part in panel.groupby("system"):
            if part["bound"].iloc[0] == "exact":
                ax.axvline(float(part["crossing_scale"].iloc[0]), color=palette[system], linestyle="-.",
                           linewidth=0.8)
        ax.axhline(float(data["target"].iloc[0]), color="0.5", linestyle=":", linewidth=0.8)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    grid.set(ylim=(0, 1.05))
    for ax in grid.axes.flat:
        ax.invert_xaxis()
        break  # shared x: inverting one inverts all
    grid.set_axis_labels("SLO scale (bounds x scale)", "SLO attainment")
    grid.set_titles("{row_name}, {col_name:g} req/s/GPU")
    grid.figure.suptitle("Attainment as the SLO tightens (dash-dot: each system's crossing of the target)", y=1.02)
    return save_figure(grid.figure, data, job_dir, "slo_scale")
