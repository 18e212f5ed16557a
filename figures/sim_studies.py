"""Figures of ``job=sim_study`` folders, one plot function per ``study.figure``:

- ``slo_attainment``: SLO attainment against per-GPU rate per system, one panel per workload, with the
  target line (DistServe Fig. 8 style), and the per-GPU goodput (highest rate meeting the target);
- ``pareto``: p90 TTFT against p90 TPOT of every layout and batching limit, each system's Pareto front
  and the SLO box (DistServe's latency trade-off);
- ``slo_scale``: attainment against the SLO scale and each variant's crossing, DistServe's "tighter SLO"
  plot (:mod:`figures.slo_scale`);
- ``placement_pairs``: per-GPU goodput of every pair of the simdistserve-style placement search
  (:mod:`figures.placement_pairs`);
- ``capacity``: our rate capacity (not the paper's metric): the highest replay rate with >= 90% effective
  requests per TBT threshold, Mooncake against vLLM, and the attainment curves it is read from;
- ``effective_capacity``: FAST'25's own metric (Fig. 1, 6, 7), the share of effective requests at the trace's
  own load against the TBT threshold (:mod:`figures.effective_capacity`);
- ``scheduling_ttft``: mean and p90 TTFT of the prefill-scheduling policies, beside the paper's average TTFT
  of each (FAST'25 Fig. 5, hatched grey bars), and their prefix hit rate beside the paper's conversation cache
  ratio (Table 2, 40%);
- ``global_cache``: prefix hit rate and prefill compute per workload, local vs global cache (FAST'25 Fig. 10,
  :mod:`figures.global_cache`);
- ``rejection``: rejected requests per rejection mode and split, and prefill/decode load over time
  (arXiv 2407.00079 Table 3, Fig. 10);
- ``rejection_sweep``: the share of requests per-stage rejection rejects, in all and after their prefill, against
  the replay speed per prefill:decode split and decode load threshold (:mod:`figures.rejection_sweep`);
- ``splitwise_provisioning`` (alias ``splitwise``): throughput, throughput per $/hr and per kW of each
  design's chosen provisioning, per trace and budget (Splitwise Fig. 18);
- ``placement_search`` (alias ``placement``): per-GPU goodput of every DistServe placement candidate
  per phase, the chosen layouts highlighted.

:func:`sim_study_plots` reads ``study.figure`` from the job's ``config.yaml`` and names the plots
(``figures.render`` draws them); every figure is a PNG plus the CSV of exactly what it plots
(``figures.style.save_figure``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from figures.claims.mooncake_rejection import JUDGED_SPLIT, PAPER_REJECTED, PAPER_REQUESTS
from figures.claims.mooncake_scheduling import PAPER_CACHE_RATIO, PAPER_TTFT_S, SCHEDULERS
from figures.effective_capacity import plot_effective_capacity
from figures.global_cache import plot_global_cache
from figures.placement_pairs import plot_placement_pairs
from figures.real_replay import plot_replay_attainment, plot_replay_overload, plot_replay_quantiles
from figures.real_runs import measured_attainment
from figures.rejection_sweep import plot_rejection_sweep
from figures.slo_scale import plot_slo_scale
from figures.study_tables import (
    REJECTION_ORDER,
    SCHEDULING_ORDER,
    JobFolder,
    attainment_long,
    attainment_target,
    capacity_table,
    load_series,
    ordered,
    pareto_table,
    rejection_table,
    slo_frame,
    slo_goodput_table,
    splitwise_chosen,
)
from figures.style import apply_theme, save_figure
from vocab.result_files import LOAD_FILE, PLACEMENT_FILE

log = logging.getLogger(__name__)

PlotFn = Callable[[Path], list[Path]]
REAL_RUNS_WORKLOAD = "distserve_sharegpt"  # the panel the measured DistServe/vLLM runs are drawn on


def _job(job_dir: Path) -> JobFolder:
    return JobFolder(Path(job_dir))


# ---------------------------------------------------------------------------------------------- DistServe

def plot_slo_attainment(job_dir: Path) -> list[Path]:
    """``slo_attainment.png``: attainment vs per-GPU rate, a line per system, a panel per workload."""
    job = _job(job_dir)
    table = job.table()
    target = attainment_target(table)
    frame = slo_frame(table, str(job.setting("workload.name", "")))
    data = frame[["workload", "system", "variant", "per_gpu_rate", "slo_attainment"]]
    apply_theme()
    grid = sns.relplot(data=data, x="per_gpu_rate", y="slo_attainment", hue="system", style="system",
                       col="workload", col_wrap=3, kind="line", markers=True, dashes=False, height=3.2, aspect=1.25,
                       facet_kws={"sharex": True, "sharey": True})
    for ax in grid.axes.flat:
        ax.axhline(target, color="black", linestyle="--", linewidth=0.8)
        ax.text(ax.get_xlim()[0], target, f" {target:.0%} target", va="bottom", fontsize=7)
    ttft, tpot = job.setting("slo.ttft_ms"), job.setting("slo.tpot_ms")
    real = _real_runs_panel(grid, data, ttft, tpot, job.setting("data_dir"))
    if not real.empty:
        data = pd.concat([data.assign(source="simulated"), real.assign(source="measured")], ignore_index=True)
    grid.set(ylim=(0, 1.02))
    grid.set_axis_labels("request rate per GPU (req/s)", "SLO attainment")
    grid.set_titles("{col_name}")
    slo = f" (TTFT {ttft:g} ms, TPOT {tpot:g} ms)" if ttft and tpot else ""
    grid.figure.suptitle(f"SLO attainment against per-GPU rate{slo}", y=1.04)
    return save_figure(grid.figure, data, job_dir, "slo_attainment")


def _real_runs_panel(grid: sns.FacetGrid, data: pd.DataFrame, ttft: object, tpot: object,
                     data_dir: object) -> pd.DataFrame:
    """Draw the DistServe authors' measured A100 runs (:mod:`figures.real_runs`) on the panel of DistServe's own
    requests (workload tag ``distserve_sharegpt``) as black hollow markers (each run issues about 100 s of requests,
    N = 100 x rate, where the artifact's Fig. 8 issues 100 per GPU); the rows drawn (empty: none)."""
    workloads = list(dict.fromkeys(data["workload"]))
    if REAL_RUNS_WORKLOAD not in workloads or not ttft or not tpot:
        return pd.DataFrame()
    real = measured_attainment(float(ttft), float(tpot), str(data_dir) if data_dir else None)
    if real.empty:
        return real
    ax = list(grid.axes.flat)[workloads.index(REAL_RUNS_WORKLOAD)]
    for (system, part), marker in zip(real.groupby("system", sort=False), ("D", "P", "X"), strict=False):
        ax.plot(part["per_gpu_rate"], part["slo_attainment"], linestyle="none", marker=marker, color="black",
                markerfacecolor="white", markersize=5, label=f"{system}, 100 s of requests")
    ax.legend(fontsize=6, loc="lower left")
    return real.assign(workload=REAL_RUNS_WORKLOAD, variant=real["system"])


def plot_slo_goodput(job_dir: Path) -> list[Path]:
    """``slo_goodput.png``: per-GPU goodput (highest per-GPU rate with attainment >= target, interpolated
    between the measured rates) per system and workload; ``>=`` marks a system that still met the target
    at the highest rate measured."""
    job = _job(job_dir)
    goodput = slo_goodput_table(job, str(job.setting("workload.name", "")))
    apply_theme()
    grid = sns.catplot(data=goodput, x="system", y="goodput_rps_per_gpu", hue="system", col="workload",
                       kind="bar", dodge=False, height=3.0, aspect=1.2, sharey=True, legend=False)
    systems = list(goodput["system"].unique())
    for workload, ax in zip(goodput["workload"].unique(), grid.axes.flat, strict=False):
        for _, row in goodput[goodput["workload"] == workload].iterrows():
            ax.text(systems.index(row["system"]), row["goodput_rps_per_gpu"], row["label"], ha="center",
                    va="bottom", fontsize=7)
    grid.set_axis_labels("", "per-GPU goodput (req/s per GPU)")
    grid.set_titles("{col_name}")
    target = goodput["target"].iloc[0] if len(goodput) else 0.9
    grid.figure.suptitle(f"Highest per-GPU rate with SLO attainment >= {target:.0%}", y=1.04)
    return save_figure(grid.figure, goodput, job_dir, "slo_goodput")


def _log_tick(value: float, _pos: int) -> str:
    """Tick label of a log axis: plain numbers at 1, 2 and 5 times a power of ten, nothing elsewhere."""
    if value <= 0:
        return ""
    lead = value / 10 ** math.floor(math.log10(value) + 1e-9)
    return f"{value:g}" if any(abs(lead - d) < 1e-6 for d in (1, 2, 5)) else ""


def _log_limits(values: pd.Series, bound: float) -> tuple[float, float]:
    """Axis limits of a log axis that show ``values`` and ``bound`` with a margin."""
    finite = values[np.isfinite(values) & (values > 0)]
    lo = min(float(finite.min()) if len(finite) else bound, bound)
    hi = max(float(finite.max()) if len(finite) else bound, bound)
    return lo / 1.6, hi * 1.6


def plot_pareto(job_dir: Path) -> list[Path]:
    """``pareto.png``: p90 TTFT vs p90 TPOT (log-log), colour = system, marker = layout, each system's
    Pareto front as a step line, and the SLO box."""
    job = _job(job_dir)
    ttft = float(job.setting("slo.ttft_ms", 250.0) or 250.0)
    tpot = float(job.setting("slo.tpot_ms", 100.0) or 100.0)
    data = pareto_table(job.table(), ttft, tpot)
    apply_theme()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    systems = ordered(data["system"], ("vLLM", "DistServe"))
    palette = dict(zip(systems, sns.color_palette("colorblind", len(systems)), strict=False))
    sns.scatterplot(data=data, x="p90_ttft_ms", y="p90_tpot_ms", hue="system", hue_order=systems,
                    style="layout", size="max_num_seqs", sizes=(25, 110), palette=palette, alpha=0.85, ax=ax)
    for system in systems:
        front = data[(data["system"] == system) & data["on_front"]].sort_values(["p90_ttft_ms", "p90_tpot_ms"])
        ax.step(front["p90_ttft_ms"], front["p90_tpot_ms"], where="post", color=palette[system], linewidth=1.2,
                alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    x_lo, x_hi = _log_limits(data["p90_ttft_ms"], ttft)
    y_lo, y_hi = _log_limits(data["p90_tpot_ms"], tpot)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.add_patch(plt.Rectangle((x_lo, y_lo), ttft - x_lo, tpot - y_lo, fill=True, alpha=0.08, color="green",
                               linewidth=0))
    ax.axvline(ttft, color="green", linestyle="--", linewidth=0.8)
    ax.axhline(tpot, color="green", linestyle="--", linewidth=0.8)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(_log_tick))
        axis.set_minor_formatter(FuncFormatter(_log_tick))
    ax.set_xlabel("p90 TTFT (ms)")
    ax.set_ylabel("p90 TPOT (ms)")
    ax.set_title(f"TTFT-TPOT trade-off (lines: Pareto fronts; box: SLO {ttft:g} / {tpot:g} ms)")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, data, job_dir, "pareto")


def plot_placement(job_dir: Path) -> list[Path]:
    """``placement.png``: per-GPU goodput of each searched layout per phase; chosen layouts highlighted.
    A pair search (``study.params.method=simdistserve``) gets :func:`figures.placement_pairs.plot_placement_pairs`."""
    job = _job(job_dir)
    table = job.table()
    if "phase" not in table:
        return plot_placement_pairs(job_dir)
    searched = table[table["per_gpu_rate"].notna()].copy()
    searched["layout"] = [f"TP{int(t)} PP{int(p)}" for t, p in zip(searched["tp"], searched["pp"], strict=True)]
    searched["chosen"] = searched["chosen"].astype(bool)
    searched["candidate"] = np.where(searched["chosen"], "chosen", "searched")
    data = searched[["phase", "layout", "tp", "pp", "gpus", "max_rate_rps", "per_gpu_rate", "attainment", "chosen",
                     "candidate"]]
    apply_theme()
    grid = sns.catplot(data=data, x="layout", y="per_gpu_rate", col="phase", hue="candidate",
                       hue_order=["searched", "chosen"], palette={"searched": "0.7", "chosen": "C1"}, kind="bar",
                       dodge=False, height=3.0, aspect=1.1, sharex=False, sharey=True)
    for ax in grid.axes.flat:
        for container in ax.containers:
            ax.bar_label(container, fmt="%.2f", fontsize=7)
    grid.set_axis_labels("layout", "max rate per GPU (req/s)")
    grid.set_titles("{col_name}")
    title = "DistServe placement search: per-GPU goodput of each phase layout"
    if job.has(PLACEMENT_FILE):
        report = job.json(PLACEMENT_FILE)
        chosen, rate = report.get("chosen") or {}, report.get("per_gpu_goodput_rps")
        if chosen and rate is not None:
            title += (f"\nchosen: {chosen.get('n_prefill')} x prefill TP{chosen.get('prefill_tp')}"
                      f" + {chosen.get('n_decode')} x decode TP{chosen.get('decode_tp')},"
                      f" {rate:.3g} req/s per GPU")
    grid.figure.suptitle(title, y=1.08)
    return save_figure(grid.figure, data, job_dir, "placement")


# ---------------------------------------------------------------------------------------------- Mooncake

def plot_capacity(job_dir: Path) -> list[Path]:
    """``capacity.png``: our rate capacity, not FAST'25's metric (highest offered rate with attainment >=
    target at each TBT threshold) per trace, Mooncake vs vLLM; ``capacity_attainment.png``: the curves it is read
    from (attainment vs offered rate, a panel per trace x threshold)."""
    job = _job(job_dir)
    table = job.table()
    cap = capacity_table(job)
    cap["tbt_threshold"] = [f"{t:g} ms" if not math.isnan(t) else "SLO" for t in cap["tbt_threshold_ms"]]
    apply_theme()
    systems = ordered(cap["system"], ("mooncake",))
    grid = sns.catplot(data=cap, x="tbt_threshold", y="capacity_rps", hue="system", hue_order=systems,
                       col="trace", kind="bar", height=3.0, aspect=1.2, sharey=False)
    for trace, ax in zip(cap["trace"].unique(), grid.axes.flat, strict=False):
        part = cap[cap["trace"] == trace]
        for container, system in zip(ax.containers, systems, strict=False):
            mine = part[part["system"] == system]
            labels = pd.Series(np.where(mine["bound"] == "below_range", "0", mine["label"]),
                               index=mine["tbt_threshold"])
            ax.bar_label(container, labels=[labels.get(t, "") for t in part["tbt_threshold"].unique()], fontsize=6)
    target = float(cap["target"].iloc[0]) if len(cap) else 0.9
    grid.set_axis_labels("TBT threshold", f"capacity (req/s at >= {target:.0%} effective)")
    grid.set_titles("{col_name} trace")
    grid.figure.suptitle("Ours, not FAST'25's metric: highest replay rate with enough effective requests "
                         "(0: below target at the slowest replay)", y=1.04)
    paths = save_figure(grid.figure, cap, job_dir, "capacity")

    long = attainment_long(table)
    long["tbt_threshold"] = [f"TBT {t:g} ms" if not math.isnan(t) else "SLO" for t in long["tbt_threshold_ms"]]
    grid = sns.relplot(data=long, x="offered_rate_rps", y="attainment", hue="system", hue_order=systems,
                       style="system", markers=True, dashes=False, col="tbt_threshold", row="trace", kind="line",
                       height=2.6, aspect=1.2, facet_kws={"sharex": "row"})
    for ax in grid.axes.flat:
        ax.axhline(target, color="black", linestyle="--", linewidth=0.8)
    grid.set(ylim=(0, 1.02))
    grid.set_axis_labels("offered rate (req/s)", "effective requests")
    grid.set_titles("{row_name}, {col_name}")
    grid.figure.suptitle("Share of effective requests against offered rate", y=1.03)
    return paths + save_figure(grid.figure, long, job_dir, "capacity_attainment")


PAPER_MEAN = "paper mean (Fig. 5 [P])"  # the hue of the paper's bars in scheduling_ttft


def scheduling_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and p90 TTFT of each policy in ``table`` (``source=ours``) and the paper's average TTFT of each
    policy it ran (FAST'25 Fig. 5 [P], as :mod:`figures.claims.mooncake_scheduling` cites it; ``source=paper``)."""
    ours = table[["variant", "mean_ttft_ms", "p90_ttft_ms"]].melt(id_vars="variant", var_name="statistic",
                                                                  value_name="ttft_ms")
    ours["statistic"] = ours["statistic"].map({"mean_ttft_ms": "mean", "p90_ttft_ms": "p90"})
    paper = pd.DataFrame({"variant": list(SCHEDULERS), "statistic": PAPER_MEAN,
                          "ttft_ms": [t * 1000.0 for t in PAPER_TTFT_S]})
    paper = paper[paper["variant"].isin(set(table["variant"]))]
    data = pd.concat([ours.assign(source="ours"), paper.assign(source="paper")], ignore_index=True)
    data["ttft_s"] = data["ttft_ms"] / 1000.0
    return data


def plot_scheduling(job_dir: Path) -> list[Path]:
    """``scheduling_ttft.png``: mean and p90 TTFT (s) of each prefill-scheduling policy, with the paper's average
    TTFT (FAST'25 Fig. 5, absolute seconds) as hatched grey bars beside our mean."""
    table = _job(job_dir).table()
    order = ordered(table["variant"], SCHEDULING_ORDER)
    data = scheduling_rows(table)
    hues = [h for h in (PAPER_MEAN, "mean", "p90") if h in set(data["statistic"])]
    colors = sns.color_palette("colorblind", 2)
    palette = {PAPER_MEAN: "0.85", "mean": colors[0], "p90": colors[1]}
    apply_theme()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    sns.barplot(data=data, x="variant", y="ttft_s", hue="statistic", order=order, hue_order=hues, palette=palette,
                ax=ax)
    for container, hue in zip(ax.containers, hues, strict=False):
        if hue == PAPER_MEAN:
            for bar in container:
                bar.set_hatch("///")
                bar.set_edgecolor("0.45")
        ax.bar_label(container, fmt="%.2f", fontsize=7)
    handles = [Patch(facecolor=palette[h], edgecolor="0.45" if h == PAPER_MEAN else palette[h],
                     hatch="///" if h == PAPER_MEAN else None, label=h) for h in hues]
    ax.legend(handles=handles, title="", fontsize=7)
    ax.set_xticks(range(len(order)), [name.replace("_", "\n") for name in order])
    ax.set_xlabel("prefill scheduling policy")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("TTFT by prefill-scheduling policy: ours (mean, p90) and the paper's average TTFT")
    return save_figure(fig, data, job_dir, "scheduling_ttft")


def plot_scheduling_hit_rate(job_dir: Path) -> list[Path]:
    """``scheduling_hit_rate.png``: the prompt-token prefix hit rate each prefill-scheduling policy reached, with the
    paper's conversation-trace cache ratio (FAST'25 Table 2, 40%) as a dashed line."""
    table = _job(job_dir).table()
    if "sim_prefix_hit_rate_tokens" not in table:
        return []
    order = ordered(table["variant"], SCHEDULING_ORDER)
    data = table[["variant", "sim_prefix_hit_rate_tokens"]].rename(columns={"sim_prefix_hit_rate_tokens": "hit_rate"})
    data = pd.concat([data.assign(source="ours"), pd.DataFrame(
        [{"variant": "paper cache ratio (Table 2 [P])", "hit_rate": PAPER_CACHE_RATIO, "source": "paper"}])],
        ignore_index=True)
    apply_theme()
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ours = data[data["source"] == "ours"]
    sns.barplot(data=ours, x="variant", y="hit_rate", order=order, color=sns.color_palette("colorblind", 1)[0], ax=ax)
    for container in ax.containers:
        ax.bar_label(container, labels=[f"{v:.1%}" for v in container.datavalues], fontsize=7)
    ax.axhline(PAPER_CACHE_RATIO, color="black", linestyle="--", linewidth=0.9)
    ax.text(-0.45, PAPER_CACHE_RATIO + 0.01, f"paper: {PAPER_CACHE_RATIO:.0%} (Table 2 [P])", ha="left",
            va="bottom", fontsize=7)
    ax.set_xticks(range(len(order)), [name.replace("_", "\n") for name in order])
    ax.set(xlabel="prefill scheduling policy", ylabel="prompt tokens served from cache", ylim=(0, 1))
    ax.set_title("Prefix cache hit rate by scheduling policy, conversation trace")
    return save_figure(fig, data, job_dir, "scheduling_hit_rate")


def plot_rejection(job_dir: Path) -> list[Path]:
    """``rejection.png``: rejected requests per mode, per split; ``rejection_load.png``: mean prefill
    queue (s), mean decode KV utilization and mean estimated decode TBT over time, a line per admission mode
    (``none`` only when it is the only mode; from ``load.csv``)."""
    job = _job(job_dir)
    table = rejection_table(job.table())
    modes = ordered(table["mode"], REJECTION_ORDER)
    apply_theme()
    grid = sns.catplot(data=table, x="mode", y="n_rejected", col="split", order=modes, kind="bar",
                       height=3.0, aspect=1.1, sharey=False)
    for ax in grid.axes.flat:
        for container in ax.containers:
            ax.bar_label(container, fmt="%d", fontsize=7)
    grid.set_axis_labels("rejection mode", "rejected requests")
    grid.set_titles("{col_name}")
    _draw_paper_rejections(grid, table, modes)
    grid.figure.suptitle("Rejected requests by rejection policy; black: arXiv v3 Table 3 as a share of our requests",
                         y=1.04)
    paths = save_figure(grid.figure, table, job_dir, "rejection")
    if not job.has(LOAD_FILE):
        return paths
    series = load_series(job.table(LOAD_FILE), table)
    admitting = series["mode"] != "none"
    if admitting.any():  # without admission control the queue grows unbounded and would hide the others' swings
        series = series[admitting]
    if series.empty:
        log.warning("%s: load.csv has no prefill or decode samples; no load figure", job_dir)
        return paths
    grid = sns.relplot(data=series, x="time_s", y="value", hue="mode", hue_order=ordered(series["mode"], modes),
                       row="split", col="load", kind="line", height=2.4, aspect=2.0,
                       facet_kws={"sharey": False}, linewidth=0.8)
    grid.set_axis_labels("time (s)", "")
    grid.set_titles("{row_name}, {col_name}")
    grid.figure.suptitle("Prefill and decode load over time by rejection policy", y=1.02)
    return paths + save_figure(grid.figure, series, job_dir, "rejection_load")


def _draw_paper_rejections(grid: sns.FacetGrid, table: pd.DataFrame, modes: list[str]) -> None:
    """On the judged split's panel: the paper's baseline / early / predictive counts (arXiv v3 Table 3 [P]) scaled
    to the requests that split issued (the paper's are of about 23,000, ours of the stand-in trace)."""
    judged = table[table["split"] == JUDGED_SPLIT]
    if judged.empty or "n_issued" not in judged or JUDGED_SPLIT not in grid.axes_dict:
        return
    issued = float(judged["n_issued"].max())
    ax = grid.axes_dict[JUDGED_SPLIT]
    points = [(modes.index(m), n / PAPER_REQUESTS * issued)
              for m, n in zip(("baseline", "early", "predictive"), PAPER_REJECTED, strict=True) if m in modes]
    ax.scatter([x for x, _ in points], [y for _, y in points], marker="D", color="black", zorder=5,
               label="paper, as a share")
    ax.legend(fontsize=7, loc="upper left")


# ---------------------------------------------------------------------------------------------- Splitwise

def plot_splitwise(job_dir: Path) -> list[Path]:
    """``splitwise.png``: each design's chosen provisioning: throughput, throughput per $/hr and per kW,
    one column per trace x budget (iso-cost, iso-power)."""
    chosen = splitwise_chosen(_job(job_dir).table())
    measures = {"max_rate_rps": "throughput (req/s)", "throughput_per_usd_hr": "req/s per $/hr",
                "throughput_per_kw": "req/s per kW"}
    long = chosen.melt(id_vars=["trace", "budget", "design", "split"], value_vars=list(measures),
                       var_name="measure", value_name="value")
    long["measure"] = long["measure"].map(measures)
    long["panel"] = long["trace"] + ", iso-" + long["budget"]
    apply_theme()
    designs = list(dict.fromkeys(chosen["design"]))
    grid = sns.catplot(data=long, x="design", y="value", order=designs, hue="design", hue_order=designs,
                       col="panel", row="measure", kind="bar", dodge=False, height=2.4, aspect=1.3,
                       sharey="row", legend=False)
    for ax in grid.axes.flat:
        ax.tick_params(axis="x", rotation=45)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    grid.set_axis_labels("", "")
    grid.set_titles("{col_name}\n{row_name}")
    grid.figure.suptitle("Splitwise provisioning: each design's best machine split within the budget", y=1.05)
    return save_figure(grid.figure, long, job_dir, "splitwise")


# ---------------------------------------------------------------------------------------------- dispatch

PLOTS_BY_FIGURE: dict[str, tuple[PlotFn, ...]] = {
    "real_replay": (plot_replay_quantiles, plot_replay_attainment, plot_replay_overload),
    "slo_attainment": (plot_slo_attainment, plot_slo_goodput),
    "pareto": (plot_pareto,),
    "slo_scale": (plot_slo_scale,),
    "capacity": (plot_capacity,),
    "effective_capacity": (plot_effective_capacity,),
    "scheduling_ttft": (plot_scheduling, plot_scheduling_hit_rate),
    "global_cache": (plot_global_cache,),
    "rejection": (plot_rejection,),
    "rejection_sweep": (plot_rejection_sweep,),
    "splitwise": (plot_splitwise,),
    "splitwise_provisioning": (plot_splitwise,),
    "placement": (plot_placement,),
    "placement_search": (plot_placement,),
    "placement_pairs": (plot_placement_pairs,),
}


def sim_study_plots(job_dir: Path) -> tuple[PlotFn, ...]:
    """The plot functions ``study.figure`` names for one sim_study job folder (none, with a warning, for a
    name no figure has)."""
    figure = _job(job_dir).setting("study.figure")
    plots = PLOTS_BY_FIGURE.get(str(figure)) if figure else None
    if not plots:
        log.warning("%s: no figure known for study.figure=%r (known: %s)", job_dir, figure,
                    ", ".join(sorted(PLOTS_BY_FIGURE)))
        return ()
    return plots
