"""Mooncake's global vs local KV cache (FAST'25 §5.3.2, Fig. 10), from a ``study.figure: global_cache``
sim_study: per workload, the prefix hit rate and the prefill compute of the local and the global setup.

Variants are ``<workload>/<cache>``: ``global``, ``local`` (the paper's local setup) and, as sensitivity runs,
other local setups ``local_<how>`` (e.g. ``local_load_aware``). :func:`global_cache_table` pairs one local
setup with the global one per workload (hit rates, prefill compute, their ratios); :func:`plot_global_cache`
draws ``global_cache.png``. Nothing is recomputed: every number is a column the study wrote.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from figures.study_tables import JobFolder, ordered, split_label
from figures.style import apply_theme, save_figure

GLOBAL, LOCAL = "global", "local"
COLUMNS = {"sim_prefix_hit_rate_tokens": "hit_rate", "sim_prefill_tokens_computed": "prefill_tokens",
           "sim_busy_s_prefill": "prefill_busy_s", "mean_ttft_ms": "mean_ttft_ms"}


def _long(table: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in ("variant", *COLUMNS) if c not in table]
    if missing:
        raise KeyError(f"study.csv has no column {', '.join(missing)}")
    parts = [split_label(v) for v in table["variant"]]
    return table.assign(workload=[w or "default" for w, _ in parts], cache=[c for _, c in parts]).rename(
        columns=COLUMNS)


def global_cache_table(table: pd.DataFrame, local: str = LOCAL) -> pd.DataFrame:
    """One row per workload that has both the ``local`` setup and the global one: ``hit_rate_<cache>``,
    ``prefill_tokens_<cache>``, ``prefill_busy_s_<cache>`` (prefill instance-seconds), ``mean_ttft_ms_<cache>``
    for cache ``local`` and ``global``, then ``hit_ratio`` (global / local) and ``prefill_saving``
    (1 - global / local prefill busy time). ``KeyError`` naming a missing column."""
    long = _long(table)
    rows = []
    for workload, part in long.groupby("workload", sort=False):
        by_cache = part.drop_duplicates("cache").set_index("cache")
        if local not in by_cache.index or GLOBAL not in by_cache.index:
            continue
        out: dict[str, object] = {"workload": workload}
        for name in COLUMNS.values():
            out[f"{name}_local"] = float(by_cache.loc[local, name])
            out[f"{name}_global"] = float(by_cache.loc[GLOBAL, name])
        local_hit, local_busy = out["hit_rate_local"], out["prefill_busy_s_local"]
        out["hit_ratio"] = out["hit_rate_global"] / local_hit if local_hit > 0 else float("inf")
        out["prefill_saving"] = 1.0 - out["prefill_busy_s_global"] / local_busy if local_busy > 0 else float("nan")
        rows.append(out)
    return pd.DataFrame(rows)


def plot_global_cache(job_dir: Path) -> list[Path]:
    """``global_cache.png``: prefix hit rate and prefill compute (node-hours) per workload and cache setup."""
    long = _long(JobFolder(Path(job_dir)).table())
    data = pd.concat([
        long[["workload", "cache"]].assign(measure="prefix hit rate (tokens)", value=long["hit_rate"]),
        long[["workload", "cache"]].assign(measure="prefill compute (node-hours)", value=long["prefill_busy_s"] / 3600),
    ], ignore_index=True)
    caches = ordered(data["cache"], (LOCAL, GLOBAL))
    apply_theme()
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.3))
    for ax, measure in zip(axes, ("prefix hit rate (tokens)", "prefill compute (node-hours)"), strict=True):
        sns.barplot(data=data[data["measure"] == measure], x="workload", y="value", hue="cache", hue_order=caches,
                    ax=ax)
        for container in ax.containers:
            ax.bar_label(container, fmt="%.2f", fontsize=7)
        ax.set_xlabel("workload")
        ax.set_ylabel(measure)
    fig.suptitle("Global vs local KV cache (10 prefill nodes, 1-token outputs)")
    fig.tight_layout()
    return save_figure(fig, data, job_dir, "global_cache")
