"""``study.figure: effective_capacity``: Mooncake's effective request capacity as FAST'25 plots it (Fig. 1, 6, 7):
the share of requests with TTFT <= the SLO's bound (30 s) and TBT <= x, against the TBT threshold x, one line
per system, one panel per trace, each trace replayed at its own load.

The shares are the study's ``attainment_tbt_<x>ms`` columns (:func:`figures.study_tables.effective_shares`);
nothing is recomputed here. Variants are ``<trace>/<system>``; a sensitivity run ``<trace>@<tag>/<system>``
gets its own panel.
"""

from __future__ import annotations

from pathlib import Path

import seaborn as sns
from matplotlib.ticker import PercentFormatter

from figures.study_tables import JobFolder, effective_shares, ordered
from figures.style import apply_theme, save_figure

SYSTEM_ORDER = ("mooncake", "vllm", "vllm_prefix_caching", "vllm_chunked_prefill")


def plot_effective_capacity(job_dir: Path) -> list[Path]:
    """``effective_capacity.png``: share of effective requests against the TBT threshold, per system and trace."""
    job = JobFolder(Path(job_dir))
    data = effective_shares(job.table())
    systems = ordered(data["system"], SYSTEM_ORDER)
    apply_theme()
    grid = sns.relplot(data=data, x="tbt_threshold_ms", y="effective_share", hue="system", hue_order=systems,
                       style="system", style_order=systems, col="trace", kind="line", markers=True, dashes=False,
                       height=3.2, aspect=1.25, facet_kws={"sharex": True, "sharey": True})
    grid.set(ylim=(0, 1.02))
    for ax in grid.axes.flat:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    grid.set_axis_labels("TBT threshold (ms)", "effective requests (share of all)")
    grid.set_titles("{col_name} trace")
    ttft = job.setting("slo.ttft_ms")
    bound = f"TTFT <= {float(ttft) / 1000:g} s and " if ttft else ""
    grid.figure.suptitle(f"Effective request capacity at the trace's own load: requests with {bound}TBT <= threshold",
                         y=1.04)
    return save_figure(grid.figure, data, job_dir, "effective_capacity")
