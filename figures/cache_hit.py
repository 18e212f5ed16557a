"""Figures of the prefix-cache study: hit rate against cache capacity (one line per eviction policy,
one panel per trace) and the global-pool vs private-cache comparison."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns

from figures.style import apply_theme, save_figure
from vocab.result_files import CACHE_HIT_FILE, GLOBAL_LOCAL_FILE


def _capacity_order(table: pd.DataFrame) -> list[str]:
    caps = table[["capacity", "capacity_blocks"]].drop_duplicates()
    caps = caps.assign(sort_key=caps["capacity_blocks"].fillna(float("inf")))
    return list(caps.sort_values("sort_key")["capacity"])


def plot_hit_rate_curve(job_dir: Path) -> list[Path]:
    """``cache_hit.png``: prefix hit rate (blocks) against capacity, per policy, one panel per trace."""
    table = pd.read_csv(Path(job_dir) / CACHE_HIT_FILE)
    apply_theme()
    order = _capacity_order(table)
    data = table[["trace", "policy", "capacity", "capacity_blocks", "hit_rate_blocks", "hit_rate_tokens"]]
    grid = sns.catplot(data=data, x="capacity", y="hit_rate_blocks", hue="policy", col="trace", kind="point",
                       order=order, markers=["o", "s", "^"][: data["policy"].nunique()], height=3.2, aspect=1.2,
                       sharey=True)
    grid.set_axis_labels("cache capacity (blocks of 512 tokens)", "prefix hit rate (blocks)")
    grid.set_titles("{col_name} trace")
    grid.set(ylim=(0, None))
    grid.figure.suptitle("Prefix-cache hit rate by capacity and eviction policy", y=1.04)
    return save_figure(grid.figure, data, job_dir, "cache_hit")


def plot_global_vs_local(job_dir: Path) -> list[Path]:
    """``global_local.png``: hit rate of one shared pool vs N private caches, per routing policy."""
    table = pd.read_csv(Path(job_dir) / GLOBAL_LOCAL_FILE)
    apply_theme()
    long = table.melt(id_vars=["trace", "routing", "capacity_per_instance", "n_instances"],
                      value_vars=["local_hit_rate_blocks", "global_hit_rate_blocks"],
                      var_name="cache", value_name="hit_rate_blocks")
    long["cache"] = long["cache"].map({"local_hit_rate_blocks": "private per instance",
                                       "global_hit_rate_blocks": "global pool"})
    long["capacity_per_instance"] = long["capacity_per_instance"].map(lambda c: f"{c:,} blocks/instance")
    grid = sns.catplot(data=long, x="routing", y="hit_rate_blocks", hue="cache", col="trace",
                       row="capacity_per_instance", kind="bar", height=2.8, aspect=1.3)
    grid.set_axis_labels("routing policy", "prefix hit rate (blocks)")
    grid.set_titles("{col_name} trace, {row_name}")
    n = int(table["n_instances"].iloc[0]) if len(table) else 0
    grid.figure.suptitle(f"Global pool vs private caches ({n} prefill instances)", y=1.03)
    return save_figure(grid.figure, long, job_dir, "global_local")
