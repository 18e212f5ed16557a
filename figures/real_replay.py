"""Figures of the real-run replay (``study.figure=real_replay``, :mod:`harness.studies.real_replay`):

- ``replay_quantiles``: predicted against measured TTFT and TPOT quantiles (p50, p90, p99) of every run, on
  log axes with the identity line and the +-20% band; runs a fit or the layout choice used are drawn hollow;
- ``replay_attainment``: joint SLO attainment against the request rate, measured (solid) and predicted
  (dashed), for vLLM and each DistServe layout, one panel per SLO pair;
- ``replay_overload``: TTFT through each run that overloads on either side, measured and predicted, against
  the request's position in the run.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from figures.style import apply_theme, save_figure
from vocab.result_files import REPLAY_RUNS_FILE, REQUESTS_FILE

GROUP_COLORS = {"vllm": "tab:blue", "distserve-c21d12": "tab:orange", "distserve-untagged": "tab:green"}
QUANTILE_MARKERS = {"p50": "o", "p90": "s", "p99": "^"}


def _runs(job_dir: Path) -> pd.DataFrame:
    return pd.read_csv(Path(job_dir) / REPLAY_RUNS_FILE)


def quantile_points(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run, metric (ttft/tpot) and quantile: measured, predicted, role, group."""
    rows = []
    for _, r in runs.iterrows():
        for metric in ("ttft", "tpot"):
            for q in QUANTILE_MARKERS:
                rows.append({"run": r["run"], "group": r["group"], "role": r["role"], "metric": metric, "quantile": q,
                             "measured_ms": r[f"measured_{metric}_{q}"], "predicted_ms": r[f"predicted_{metric}_{q}"]})
    return pd.DataFrame(rows)


def plot_replay_quantiles(job_dir: Path) -> list[Path]:
    data = quantile_points(_runs(job_dir))
    apply_theme()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, metric in zip(axes, ("ttft", "tpot"), strict=True):
        part = data[(data["metric"] == metric) & (data["measured_ms"] > 0) & (data["predicted_ms"] > 0)]
        lo = float(np.nanmin(part[["measured_ms", "predicted_ms"]].to_numpy())) * 0.7
        hi = float(np.nanmax(part[["measured_ms", "predicted_ms"]].replace(np.inf, np.nan).to_numpy())) * 1.4
        xs = np.geomspace(lo, hi, 50)
        ax.plot(xs, xs, color="black", linewidth=0.8)
        ax.fill_between(xs, xs * 0.8, xs * 1.2, color="grey", alpha=0.15, linewidth=0, label="+-20%")
        for (group, q), g in part.groupby(["group", "quantile"], sort=False):
            scored = g["role"] == "scored"
            color = GROUP_COLORS.get(str(group), "tab:gray")
            ax.scatter(g.loc[scored, "measured_ms"], g.loc[scored, "predicted_ms"], marker=QUANTILE_MARKERS[str(q)],
                       color=color, s=26, label=f"{group} {q}")
            ax.scatter(g.loc[~scored, "measured_ms"], g.loc[~scored, "predicted_ms"],
                       marker=QUANTILE_MARKERS[str(q)], facecolors="none", edgecolors=color, s=26)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel=f"measured {metric.upper()} (ms)",
               ylabel=f"predicted {metric.upper()} (ms)", title=metric.upper())
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    fig.suptitle("DistServe's A100 runs: predicted vs measured quantiles (hollow: used by a fit or the layout choice)",
                 y=1.02, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, data, job_dir, "replay_quantiles")


def attainment_points(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run, SLO pair and side (measured / predicted): the rate and the attainment (%)."""
    pairs = [c[len("measured_attainment_"):] for c in runs.columns if c.startswith("measured_attainment_")]
    rows = []
    for _, r in runs.iterrows():
        for pair in pairs:
            for side in ("measured", "predicted"):
                rows.append({"run": r["run"], "group": r["group"], "rate_rps": r["rate_rps"],
                             "per_gpu_rate": r["per_gpu_rate"], "slo": pair.replace("_", " / ") + " ms",
                             "side": side, "attainment_pct": r[f"{side}_attainment_{pair}"]})
    return pd.DataFrame(rows)


def plot_replay_attainment(job_dir: Path) -> list[Path]:
    data = attainment_points(_runs(job_dir))
    apply_theme()
    slos = list(dict.fromkeys(data["slo"]))
    fig, axes = plt.subplots(1, len(slos), figsize=(5.0 * len(slos), 3.8), sharey=True, squeeze=False)
    for ax, slo in zip(axes[0], slos, strict=True):
        for (group, side), g in data[data["slo"] == slo].groupby(["group", "side"], sort=False):
            g = g.sort_values("rate_rps")
            ax.plot(g["rate_rps"], g["attainment_pct"], color=GROUP_COLORS.get(str(group), "tab:gray"),
                    linestyle="-" if side == "measured" else "--", marker="o" if side == "measured" else "x",
                    label=f"{group} {side}")
        ax.axhline(90, color="black", linewidth=0.6, linestyle=":")
        ax.set(xlabel="request rate (req/s)", ylabel="SLO attainment (%)", ylim=(0, 102), title=f"TTFT / TPOT {slo}")
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.suptitle("Attainment against rate: DistServe's measured A100 runs (solid) and the simulator (dashed)",
                 y=1.03, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, data, job_dir, "replay_attainment")


def plot_replay_overload(job_dir: Path) -> list[Path]:
    runs = _runs(job_dir)
    chosen = runs[runs["overloaded_measured"] | runs["overloaded_predicted"]]["run"].tolist()
    requests = pd.read_parquet(Path(job_dir) / REQUESTS_FILE, columns=["run", "request", "measured_ttft_ms",
                                                                        "predicted_ttft_ms"])
    data = requests[requests["run"].isin(chosen)]
    apply_theme()
    n = max(len(chosen), 1)
    cols = min(n, 4)
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(3.2 * cols, 2.6 * ((n + cols - 1) // cols)),
                             squeeze=False)
    for ax, run in zip(axes.flat, chosen, strict=False):
        g = data[data["run"] == run]
        ax.plot(g["request"], g["measured_ttft_ms"] / 1e3, color="black", linewidth=0.8, label="measured")
        ax.plot(g["request"], g["predicted_ttft_ms"] / 1e3, color="tab:red", linewidth=0.8, label="predicted")
        ax.set(title=run, xlabel="request (arrival order)", ylabel="TTFT (s)")
        ax.title.set_fontsize(8)
    for ax in list(axes.flat)[len(chosen):]:
        ax.set_visible(False)
    if chosen:
        axes[0][0].legend(fontsize=7)
    fig.suptitle("TTFT through the runs that overload (measured or predicted)", y=1.02, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, data, job_dir, "replay_overload")
