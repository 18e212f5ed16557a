"""Mooncake's global vs local KV cache (FAST'25 §5.3.2, Fig. 10), from a ``study.figure: global_cache``
sim_study: per workload, the prefix hit rate and the prefill compute of the local setups and the global one.

Variants are ``<workload>/<cache>``: ``global``, ``local`` (each request to the node holding the longest prefix in
its own cache, which keeps a conversation's turns on one node) and other local setups ``local_<how>``
(``local_round_robin``: requests spread regardless of their prefix; ``local_load_aware``: the node with the smallest
estimated TTFT given its own prefix). :func:`global_cache_table` pairs one local setup with the global one per
workload (hit rates, prefill compute, their ratios); :func:`premise_table` says what share of the workload's
theoretical hit rate (an infinite cache seeing every request, the study's ``workload_prefix_hit_rate_tokens``) each
local setup reaches, the paper's §2.2 premise; :func:`plot_global_cache` draws ``global_cache.png`` with the paper's
per-workload labels beside ours. Nothing is recomputed: every number is a column the study wrote.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from figures.study_tables import JobFolder, ordered, split_label
from figures.style import apply_theme, save_figure

GLOBAL, LOCAL = "global", "local"
COLUMNS = {"sim_prefix_hit_rate_tokens": "hit_rate", "sim_prefill_tokens_computed": "prefill_tokens",
           "sim_busy_s_prefill": "prefill_busy_s", "mean_ttft_ms": "mean_ttft_ms"}
THEORETICAL = "workload_prefix_hit_rate_tokens"  # sim_sweep: an infinite cache seeing every request

# FAST'25 Fig. 10 [P], the label of each workload: global / local prefix hit rate, global / local prefill GPU time.
PAPER_FIG10 = {"conversation": (2.22, 0.76), "tool&agent": (1.38, 0.74), "synthetic": (2.36, 0.52)}
# FAST'25 §2.2 [P]: "local DRAM alone supports only up to about 50% of the theoretical hit rate".
PAPER_LOCAL_SHARE = 0.5


def _long(table: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in ("variant", *COLUMNS) if c not in table]
    if missing:
        raise KeyError(f"study.csv has no column {', '.join(missing)}")
    parts = [split_label(v) for v in table["variant"]]
    return table.assign(workload=[w or "default" for w, _ in parts], cache=[c for _, c in parts]).rename(
        columns=COLUMNS)


def local_setups(table: pd.DataFrame) -> list[str]:
    """The local setups the study ran (``local`` first, then ``local_<how>`` in table order)."""
    caches = [split_label(v)[1] for v in table["variant"]]
    return ordered([c for c in caches if c == LOCAL or c.startswith(f"{LOCAL}_")], (LOCAL,))


def global_cache_table(table: pd.DataFrame, local: str = LOCAL) -> pd.DataFrame:
    """One row per workload that has both the ``local`` setup and the global one: ``hit_rate_<cache>``,
    ``prefill_tokens_<cache>``, ``prefill_busy_s_<cache>`` (prefill instance-seconds), ``mean_ttft_ms_<cache>``
    for cache ``local`` and ``global``, then ``hit_ratio`` (global / local), ``prefill_saving``
    (1 - global / local prefill busy time) and ``theoretical_hit_rate`` (NaN when the study did not write it).
    ``KeyError`` naming a missing column."""
    long = _long(table)
    rows = []
    for workload, part in long.groupby("workload", sort=False):
        by_cache = part.drop_duplicates("cache").set_index("cache")
        if local not in by_cache.index or GLOBAL not in by_cache.index:
            continue
        out: dict[str, object] = {"workload": workload, "local": local}
        for name in COLUMNS.values():
            out[f"{name}_local"] = float(by_cache.loc[local, name])
            out[f"{name}_global"] = float(by_cache.loc[GLOBAL, name])
        local_hit, local_busy = out["hit_rate_local"], out["prefill_busy_s_local"]
        out["hit_ratio"] = out["hit_rate_global"] / local_hit if local_hit > 0 else float("inf")
        out["prefill_saving"] = 1.0 - out["prefill_busy_s_global"] / local_busy if local_busy > 0 else float("nan")
        out["theoretical_hit_rate"] = float(by_cache.loc[local, THEORETICAL]) if THEORETICAL in part else math.nan
        rows.append(out)
    return pd.DataFrame(rows)


def premise_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per local setup and workload: the local hit rate as a share of the workload's theoretical hit rate
    (``local_share``), with the global/local ratios of :func:`global_cache_table`. ``KeyError`` when the study
    did not write the theoretical hit rate."""
    if THEORETICAL not in table:
        raise KeyError(f"study.csv has no column {THEORETICAL}")
    parts = [global_cache_table(table, local) for local in local_setups(table)]
    joined = pd.concat([p for p in parts if not p.empty], ignore_index=True) if parts else pd.DataFrame()
    if joined.empty:
        return joined
    return joined.assign(local_share=joined["hit_rate_local"] / joined["theoretical_hit_rate"])


def premise_local(premise: pd.DataFrame) -> str:
    """The local setup whose caches come closest to the paper's premise, a local cache reaching about
    ``PAPER_LOCAL_SHARE`` of the theoretical hit rate (mean distance over workloads; ties to the first run)."""
    distance = (premise["local_share"] - PAPER_LOCAL_SHARE).abs().groupby(premise["local"], sort=False).mean()
    return str(distance.idxmin())


def plot_global_cache(job_dir: Path) -> list[Path]:
    """``global_cache.png``: per workload, (1) the prefix hit rate of every cache setup with the theoretical
    (infinite-cache) rate, (2) global / local hit rate and (3) global / local prefill compute per local setup,
    with the paper's Fig. 10 label as a black marker."""
    table = JobFolder(Path(job_dir)).table()
    long = _long(table)
    caches = ordered(long["cache"], (LOCAL, GLOBAL))
    ratios = pd.concat([global_cache_table(table, local) for local in local_setups(table)], ignore_index=True)
    workloads = list(dict.fromkeys(long["workload"]))
    apply_theme()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    palette = dict(zip(caches, sns.color_palette(n_colors=len(caches)), strict=True))
    sns.barplot(data=long, x="workload", y="hit_rate", hue="cache", hue_order=caches, order=workloads,
                palette=palette, ax=axes[0])
    if THEORETICAL in long:
        theory = long.groupby("workload", sort=False)[THEORETICAL].first()
        for i, workload in enumerate(workloads):
            axes[0].hlines(theory[workload], i - 0.45, i + 0.45, colors="black", linestyles="--",
                           label="theoretical (infinite cache)" if i == 0 else None)
    axes[0].set_ylabel("prefix hit rate (tokens)")
    axes[0].set_ylim(0, axes[0].get_ylim()[1] * 1.35)
    axes[0].legend(fontsize=7, title=None, loc="upper left", ncols=2)
    data = pd.concat([
        ratios.assign(panel="hit", value=ratios["hit_ratio"]),
        ratios.assign(panel="prefill", value=1.0 - ratios["prefill_saving"]),
    ], ignore_index=True)
    locals_ = ordered(data["local"], (LOCAL,)) if not data.empty else []
    for ax, panel, index, label in ((axes[1], "hit", 0, "global / local prefix hit rate"),
                                    (axes[2], "prefill", 1, "global / local prefill compute")):
        part = data[data["panel"] == panel]
        if not part.empty:
            sns.barplot(data=part, x="workload", y="value", hue="local", hue_order=locals_, order=workloads,
                        palette=palette, ax=ax)
            for container in ax.containers:
                ax.bar_label(container, fmt="%.2f", fontsize=7)
        paper = [(i, PAPER_FIG10[w][index]) for i, w in enumerate(workloads) if w in PAPER_FIG10]
        if paper:
            ax.scatter([i for i, _ in paper], [v for _, v in paper], marker="D", color="black", zorder=5,
                       label="paper (Fig. 10 label)")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_ylabel(label)
        ax.set_xlabel("workload")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # room for the legend above the bars
        ax.legend(fontsize=7, loc="upper left", ncols=2)
    axes[0].set_xlabel("workload")
    fig.suptitle("Global vs local KV cache (10 prefill nodes, 1-token outputs); black: the paper's Fig. 10")
    fig.tight_layout()
    plotted = pd.concat([long.assign(panel="hit_rate", value=long["hit_rate"]), data], ignore_index=True)
    return save_figure(fig, plotted, job_dir, "global_cache")
