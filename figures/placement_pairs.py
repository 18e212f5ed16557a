"""``study.figure: placement_pairs``: the per-GPU goodput of every prefill + decode pair DistServe's
simulator search bisected (``study.params.method=simdistserve``), the chosen pair and the pairs tied with
it highlighted, the README's pair labelled. Reads ``study.csv`` and ``placement.json`` as the study wrote
them; nothing is recomputed here.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from figures.study_tables import JobFolder
from figures.style import apply_theme, save_figure
from vocab.result_files import PLACEMENT_FILE

COLORS = {"chosen": "C1", "tied": "C2", "searched": "0.7"}


def plot_placement_pairs(job_dir: Path) -> list[Path]:
    """``placement_pairs.png``: bisected per-GPU rate of each searched pair."""
    job = JobFolder(Path(job_dir))
    table = job.table()
    data = table[table["status"] == "searched"].copy()
    data["pair"] = [f"P TP{a}PP{b} + D TP{c}PP{d}" for a, b, c, d in
                    zip(data["prefill_tp"], data["prefill_pp"], data["decode_tp"], data["decode_pp"], strict=True)]
    data["candidate"] = np.where(data["chosen"].astype(bool), "chosen",
                                 np.where(data["tied"].astype(bool), "tied", "searched"))
    apply_theme()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(data)), 3.2))
    bars = ax.bar(data["pair"], data["per_gpu_rate"], color=[COLORS[c] for c in data["candidate"]])
    ax.bar_label(bars, labels=[f"{r:.3g}" for r in data["per_gpu_rate"]], fontsize=7)
    ax.tick_params(axis="x", rotation=30)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    ax.set_ylabel("per-GPU goodput (req/s)")
    title = "simdistserve-style placement search (orange: chosen, green: tied)"
    if job.has(PLACEMENT_FILE):
        report = job.json(PLACEMENT_FILE)
        readme = report.get("reference_distserve_readme") or {}
        if readme:
            title += f"\nDistServe README: P TP{readme.get('prefill_tp')} + D TP{readme.get('decode_tp')} " \
                     f"at {readme.get('per_gpu_rate')} req/s per GPU"
    ax.set_title(title, fontsize=9)
    keep = ["pair", "prefill_tp", "prefill_pp", "decode_tp", "decode_pp", "gpus", "per_gpu_rate", "rate_rps",
            "probes", "chosen", "tied", "candidate"]
    return save_figure(fig, data[keep], job_dir, "placement_pairs")
