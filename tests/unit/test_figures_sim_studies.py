"""Figures of sim_study jobs, on small hand-made study tables (no simulation): every figure writes its
PNG and the CSV of exactly the numbers it plotted, the tables the figures read (capacity from the study's
``capacity.csv``, Pareto fronts, load series) are right, the paper's numbers drawn on a figure are in its CSV
(``source=paper``), and a failing figure fails the job."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from figures.claims.mooncake_capacity import CONVERSATION_PAPER, SYNTHETIC_PAPER
from figures.claims.mooncake_scheduling import PAPER_CACHE_RATIO, PAPER_TTFT_S, SCHEDULERS
from figures.effective_capacity import plot_effective_capacity
from figures.render import FigureError, plots_for, render_job
from figures.sim_studies import (
    PAPER_MEAN,
    PLOTS_BY_FIGURE,
    plot_capacity,
    plot_pareto,
    plot_placement,
    plot_rejection,
    plot_scheduling,
    plot_scheduling_hit_rate,
    plot_slo_attainment,
    plot_slo_goodput,
    plot_splitwise,
)
from figures.study_tables import (
    THRESHOLD_COLUMN,
    JobFolder,
    MissingCapacity,
    capacity_ratios,
    capacity_table,
    load_series,
    pareto_mask,
    pareto_table,
    rejection_table,
    slo_goodput_table,
)
from harness.studies.sim_sweep import capacity_table as study_capacity_table
from vocab.result_files import CAPACITY_FILE

# ---------------------------------------------------------------------------------------------- fixtures


def make_job(root: Path, figure: str, study: pd.DataFrame, extra: dict[str, Any] | None = None,
             load: pd.DataFrame | None = None, placement: dict[str, Any] | None = None, capacity: bool = True) -> Path:
    job = root / figure / "2026-01-01_00-00-00"
    job.mkdir(parents=True)
    config = {"experiment_name": figure, "workload": {"name": "shared_prefix"},
              "slo": {"ttft_ms": 250.0, "tpot_ms": 100.0}, "study": {"kind": "sim_sweep", "figure": figure}}
    config.update(extra or {})
    (job / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    study.to_csv(job / "study.csv", index=False)
    if capacity and {"variant", "slo_attainment_target"} <= set(study.columns):  # what the sweep study writes
        thresholds = [float(m.group(1)) for c in study.columns if (m := THRESHOLD_COLUMN.match(str(c)))]
        study_capacity_table(study, thresholds).to_csv(job / CAPACITY_FILE, index=False)
    if load is not None:
        load.to_csv(job / "load.csv", index=False)
    if placement is not None:
        (job / "placement.json").write_text(json.dumps(placement), encoding="utf-8")
    return job


def slo_study() -> pd.DataFrame:
    rows = []
    curves = {"vLLM": [1.0, 0.95, 0.85, 0.5], "DistServe": [1.0, 1.0, 0.98, 0.92], "Mooncake": [0.8, 0.7, 0.6, 0.5]}
    for workload in ("shared_prefix", "azure_conv"):
        for system, att in curves.items():
            for i, (rate, a) in enumerate(zip([1.0, 2.0, 3.0, 4.0], att, strict=True)):
                rows.append({"variant": f"{workload}/{system}", "point": i, "per_gpu_rate": rate,
                             "slo_attainment": a, "slo_attainment_target": 0.9})
    return pd.DataFrame(rows)


def pareto_study() -> pd.DataFrame:
    rows = [("vLLM 4xTP1/seqs16", 16, 300.0, 30.0), ("vLLM 2xTP2/seqs16", 16, 150.0, 60.0),
            ("vLLM 2xTP2/seqs64", 64, 400.0, 80.0), ("DistServe 1P3D/seqs16", 16, 200.0, 20.0),
            ("DistServe 2P2D/seqs16", 16, 120.0, 90.0), ("DistServe 2P2D/seqs64", 64, 2000.0, 900.0)]
    return pd.DataFrame([{"variant": v, "max_num_seqs": s, "p90_ttft_ms": t, "p90_tpot_ms": p, "slo_attainment": 0.9}
                         for v, s, t, p in rows])


def capacity_study() -> pd.DataFrame:
    rows = []
    rates = [1.0, 2.0, 3.0, 4.0]
    curves = {"mooncake": {100: [0.99, 0.95, 0.85, 0.1], 200: [1.0, 0.99, 0.95, 0.2], 300: [1.0, 1.0, 0.97, 0.3]},
              "vllm": {100: [0.8, 0.5, 0.2, 0.1], 200: [0.95, 0.85, 0.3, 0.1], 300: [0.99, 0.93, 0.5, 0.2]}}
    for trace in ("conversation", "synthetic"):
        for system, by_threshold in curves.items():
            for i, rate in enumerate(rates):
                row = {"variant": f"{trace}/{system}", "point": i, "speedup": rate / 2, "offered_rate_rps": rate,
                       "slo_attainment": by_threshold[100][i], "slo_attainment_target": 0.9}
                row.update({f"attainment_tbt_{t}ms": by_threshold[t][i] for t in (100, 200, 300)})
                rows.append(row)
    return pd.DataFrame(rows)


def scheduling_study() -> pd.DataFrame:
    return pd.DataFrame({"variant": ["global_cache_aware", "random", "load_balancing", "local_cache_aware"],
                         "point": 0, "mean_ttft_ms": [3000.0, 19000.0, 5000.0, 3500.0],
                         "p90_ttft_ms": [6000.0, 40000.0, 9000.0, 7000.0],
                         "sim_prefix_hit_rate_tokens": [0.35, 0.1, 0.1, 0.25]})


def rejection_study() -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = []
    for split, (p, d) in {"8P8D": (8, 8), "12P2D": (12, 2)}.items():
        for mode, n in zip(("none", "baseline", "early", "predictive"), (0, 400, 300, 200), strict=True):
            rows.append({"variant": f"{split}/{mode}", "point": 0, "prefill": p, "decode": d, "n_rejected": n,
                         "n_issued": 1000, "slo_attainment": 0.8})
    study = pd.DataFrame(rows)
    samples = []
    for variant in study["variant"]:
        for t in (0.0, 10.0, 20.0):
            samples += [{"variant": variant, "point": 0, "time_s": t, "instance": f"p{i}", "role": "prefill",
                         "running": 1, "waiting": i, "queued_prefill_s": float(i) + t, "kv_utilization": 0.0}
                        for i in range(2)]
            samples += [{"variant": variant, "point": 0, "time_s": t, "instance": "d0", "role": "decode",
                         "running": 3, "waiting": 0, "queued_prefill_s": 0.0, "kv_utilization": 0.5}]
    return study, pd.DataFrame(samples)


def splitwise_study() -> pd.DataFrame:
    rows = []
    for trace in ("azure_code", "azure_conv"):
        for budget in ("cost", "power"):
            for design, split, rate, chosen in (("baseline_a100", "7P/T", 6.0, True), ("splitwise_aa", "3P/4T", 7.0, True),
                                                ("splitwise_aa", "4P/3T", 5.0, False)):
                rows.append({"trace": trace, "budget": budget, "design": design, "split": split, "feasible": True,
                             "chosen": chosen, "n_machines": 7, "max_rate_rps": rate, "cost_usd_hr": 123.2,
                             "power_kw": 22.4, "throughput_per_usd_hr": rate / 123.2, "throughput_per_kw": rate / 22.4,
                             "throughput_vs_baseline_a100": rate / 6.0})
            rows.append({"trace": trace, "budget": budget, "design": "splitwise_hh", "split": "", "feasible": False,
                         "chosen": False, "n_machines": 0, "max_rate_rps": 0.0})
    return pd.DataFrame(rows)


def placement_study() -> tuple[pd.DataFrame, dict[str, Any]]:
    table = pd.DataFrame([
        {"phase": "prefill", "tp": 1, "pp": 1, "gpus": 1, "status": "searched", "max_rate_rps": 1.0,
         "per_gpu_rate": 1.0, "attainment": 0.9, "chosen": False},
        {"phase": "prefill", "tp": 2, "pp": 1, "gpus": 2, "status": "searched", "max_rate_rps": 5.0,
         "per_gpu_rate": 2.5, "attainment": 0.9, "chosen": True},
        {"phase": "prefill", "tp": 1, "pp": 2, "gpus": 2, "status": "skipped", "max_rate_rps": math.nan,
         "per_gpu_rate": math.nan, "attainment": math.nan, "chosen": False},
        {"phase": "decode", "tp": 1, "pp": 1, "gpus": 1, "status": "searched", "max_rate_rps": 3.0,
         "per_gpu_rate": 3.0, "attainment": 0.95, "chosen": True},
    ])
    report = {"chosen": {"prefill_tp": 2, "prefill_pp": 1, "n_prefill": 1, "decode_tp": 1, "decode_pp": 1,
                         "n_decode": 1, "n_gpus": 3}, "per_gpu_goodput_rps": 1.6, "workload": {"name": "azure_conv"}}
    return table, report


def assert_written(paths: list[Path], names: list[str], columns: dict[str, set[str]]) -> None:
    assert sorted(p.name for p in paths) == sorted(n + ext for n in names for ext in (".png", ".csv"))
    for path in paths:
        assert path.is_file() and path.stat().st_size > 0
        if path.suffix == ".csv":
            frame = pd.read_csv(path)
            assert len(frame) > 0
            assert columns[path.stem] <= set(frame.columns), (path.stem, set(frame.columns))


def test_capacity_table_and_ratios_on_hand_data(tmp_path):
    cap = capacity_table(JobFolder(make_job(tmp_path, "capacity", capacity_study())))
    conv = cap[cap["trace"] == "conversation"].set_index(["system", "tbt_threshold_ms"])
    assert conv.loc[("mooncake", 100.0), "capacity_rps"] == pytest.approx(2.5)
    assert conv.loc[("vllm", 100.0), "bound"] == "below_range"
    assert conv.loc[("vllm", 300.0), "capacity_rps"] == pytest.approx(2 + 0.03 / 0.43)
    ratios = capacity_ratios(cap).set_index(["trace", "tbt_threshold_ms"])
    assert math.isinf(ratios.loc[("conversation", 100.0), "ratio"])
    moon300 = 3 + 0.07 / 0.67
    assert ratios.loc[("conversation", 300.0), "ratio"] == pytest.approx(moon300 / (2 + 0.03 / 0.43))


def test_capacity_without_threshold_columns_uses_slo_attainment(tmp_path):
    study = capacity_study().drop(columns=["attainment_tbt_100ms", "attainment_tbt_200ms", "attainment_tbt_300ms",
                                           "speedup"])
    cap = capacity_table(JobFolder(make_job(tmp_path, "capacity", study)))
    assert len(cap) == 4 and cap["tbt_threshold_ms"].isna().all()
    moon = cap[(cap["trace"] == "conversation") & (cap["system"] == "mooncake")]
    assert moon["capacity_rps"].iloc[0] == pytest.approx(2.5)


def test_slo_goodput_per_workload_and_system(tmp_path):
    goodput = slo_goodput_table(JobFolder(make_job(tmp_path, "slo_attainment", slo_study()))).set_index(
        ["workload", "system"])
    assert goodput.loc[("azure_conv", "vLLM"), "goodput_rps_per_gpu"] == pytest.approx(2.5)
    assert goodput.loc[("azure_conv", "DistServe"), "bound"] == "at_least"
    assert goodput.loc[("shared_prefix", "Mooncake"), "goodput_rps_per_gpu"] == 0.0


def test_slo_labels_without_a_workload_take_the_default(tmp_path):
    study = slo_study()
    study = study[study["variant"].str.startswith("azure_conv/")].assign(
        variant=lambda t: t["variant"].str.split("/").str[1])
    job = JobFolder(make_job(tmp_path, "slo_attainment", study))
    assert set(slo_goodput_table(job, "shared_prefix")["workload"]) == {"shared_prefix"}


def test_a_study_without_capacity_csv_is_reported_missing(tmp_path):
    job = JobFolder(make_job(tmp_path, "capacity", capacity_study(), capacity=False))
    with pytest.raises(MissingCapacity, match=CAPACITY_FILE):
        capacity_table(job)


# ---------------------------------------------------------------------------------------------- Pareto

def test_pareto_mask_keeps_the_lower_left_front():
    x = [1, 2, 5, 3, 2, 6, np.nan]
    y = [5, 2, 1, 3, 2, 6, 0]
    assert pareto_mask(x, y).tolist() == [True, True, True, False, True, False, False]


def test_pareto_mask_drops_a_point_dominated_in_one_coordinate_only():
    assert pareto_mask([1, 1], [1, 2]).tolist() == [True, False]


def test_pareto_table_fronts_are_per_system():
    table = pareto_table(pareto_study(), 250.0, 100.0).set_index("variant")
    assert table.loc["vLLM 4xTP1/seqs16", "system"] == "vLLM"
    assert table.loc["DistServe 2P2D/seqs64", "layout"] == "2P2D"
    assert table["on_front"].to_dict() == {
        "vLLM 4xTP1/seqs16": True, "vLLM 2xTP2/seqs16": True, "vLLM 2xTP2/seqs64": False,
        "DistServe 1P3D/seqs16": True, "DistServe 2P2D/seqs16": True, "DistServe 2P2D/seqs64": False}
    assert table.loc["vLLM 4xTP1/seqs16", "slo_scale"] == pytest.approx(1.2)
    assert bool(table.loc["DistServe 1P3D/seqs16", "inside_slo"])


# ---------------------------------------------------------------------------------------------- rejection

def test_rejection_table_parses_old_and_new_labels():
    new = rejection_table(rejection_study()[0])
    assert set(new["split"]) == {"8P8D", "12P2D"}
    old = pd.DataFrame({"variant": ["no_rejection", "baseline"], "prefill": [10, 10], "decode": [2, 2],
                        "n_rejected": [0, 5]})
    parsed = rejection_table(old)
    assert parsed["split"].tolist() == ["10P2D", "10P2D"]
    assert parsed["mode"].tolist() == ["none", "baseline"]


def test_load_series_averages_instances_of_each_role():
    study, load = rejection_study()
    series = load_series(load, rejection_table(study))
    prefill = series[(series["variant"] == "8P8D/early") & series["load"].str.startswith("prefill")]
    assert prefill.set_index("time_s")["value"].to_dict() == {0.0: 0.5, 10.0: 10.5, 20.0: 20.5}
    decode = series[(series["variant"] == "8P8D/early") & series["load"].str.startswith("decode")]
    assert decode["value"].tolist() == [0.5, 0.5, 0.5]
    assert set(series["mode"]) == {"none", "baseline", "early", "predictive"}


# ---------------------------------------------------------------------------------------------- plots

def test_slo_attainment_figures(tmp_path):
    job = make_job(tmp_path, "slo_attainment", slo_study())
    paths = plot_slo_attainment(job) + plot_slo_goodput(job)
    assert_written(paths, ["slo_attainment", "slo_goodput"], {
        "slo_attainment": {"workload", "system", "per_gpu_rate", "slo_attainment"},
        "slo_goodput": {"workload", "system", "goodput_rps_per_gpu", "bound"}})
    plotted = pd.read_csv(job / "figures" / "slo_goodput.csv").set_index(["workload", "system"])
    assert len(plotted) == 6
    assert plotted.loc[("azure_conv", "vLLM"), "goodput_rps_per_gpu"] == pytest.approx(2.5)
    assert plotted.loc[("shared_prefix", "DistServe"), "label"] == ">=4"
    curves = pd.read_csv(job / "figures" / "slo_attainment.csv")
    assert len(curves) == 2 * 3 * 4  # workload x system x point
    assert curves.set_index(["workload", "system", "per_gpu_rate"]).loc[
        ("azure_conv", "vLLM", 3.0), "slo_attainment"] == pytest.approx(0.85)


def test_pareto_figure(tmp_path):
    job = make_job(tmp_path, "pareto", pareto_study())
    assert_written(plot_pareto(job), ["pareto"], {
        "pareto": {"system", "layout", "max_num_seqs", "p90_ttft_ms", "p90_tpot_ms", "on_front", "slo_scale"}})
    plotted = pd.read_csv(job / "figures" / "pareto.csv").set_index("variant")
    assert plotted["on_front"].sum() == 4 and not plotted.loc["DistServe 2P2D/seqs64", "on_front"]
    assert plotted.loc["DistServe 1P3D/seqs16", "slo_scale"] == pytest.approx(0.8)


def test_capacity_figures(tmp_path):
    job = make_job(tmp_path, "capacity", capacity_study())
    assert_written(plot_capacity(job), ["capacity", "capacity_attainment"], {
        "capacity": {"trace", "system", "tbt_threshold_ms", "capacity_rps", "bound"},
        "capacity_attainment": {"trace", "system", "offered_rate_rps", "tbt_threshold_ms", "attainment"}})
    plotted = pd.read_csv(job / "figures" / "capacity.csv")
    assert len(plotted) == 2 * 2 * 3  # trace x system x threshold
    mooncake_100 = plotted[(plotted["trace"] == "synthetic") & (plotted["system"] == "mooncake")
                           & (plotted["tbt_threshold_ms"] == 100)]
    assert mooncake_100["capacity_rps"].tolist() == pytest.approx([2.5])  # read from capacity.csv, not recomputed
    curves = pd.read_csv(job / "figures" / "capacity_attainment.csv")
    assert len(curves) == 2 * 2 * 4 * 3  # trace x system x point x threshold


def test_scheduling_figure_orders_policies(tmp_path):
    job = make_job(tmp_path, "scheduling_ttft", scheduling_study())
    assert_written(plot_scheduling(job), ["scheduling_ttft"], {"scheduling_ttft": {"variant", "statistic", "ttft_s"}})
    plotted = pd.read_csv(job / "figures" / "scheduling_ttft.csv")
    assert plotted.set_index(["variant", "statistic"]).loc[("random", "mean"), "ttft_s"] == pytest.approx(19.0)


def test_scheduling_figure_draws_the_papers_average_ttft_beside_ours(tmp_path):
    job = make_job(tmp_path, "scheduling_ttft", scheduling_study())
    plot_scheduling(job)
    plotted = pd.read_csv(job / "figures" / "scheduling_ttft.csv")
    paper = plotted[plotted["source"] == "paper"].set_index("variant")
    assert dict(paper["ttft_s"]) == pytest.approx(dict(zip(SCHEDULERS, PAPER_TTFT_S, strict=True)))  # seconds
    assert set(paper["statistic"]) == {PAPER_MEAN}
    assert set(plotted.loc[plotted["source"] == "ours", "statistic"]) == {"mean", "p90"}
    only_two = make_job(tmp_path / "two", "scheduling_ttft", scheduling_study().iloc[:2])
    plot_scheduling(only_two)
    two = pd.read_csv(only_two / "figures" / "scheduling_ttft.csv")
    assert set(two.loc[two["source"] == "paper", "variant"]) == {"global_cache_aware", "random"}  # ours only


def test_scheduling_hit_rate_figure_draws_the_papers_cache_ratio(tmp_path):
    job = make_job(tmp_path, "scheduling_ttft", scheduling_study())
    assert_written(plot_scheduling_hit_rate(job), ["scheduling_hit_rate"],
                   {"scheduling_hit_rate": {"variant", "hit_rate", "source"}})
    plotted = pd.read_csv(job / "figures" / "scheduling_hit_rate.csv")
    assert plotted.loc[plotted["source"] == "paper", "hit_rate"].tolist() == [PAPER_CACHE_RATIO]
    ours = plotted[plotted["source"] == "ours"].set_index("variant")["hit_rate"]
    assert ours["global_cache_aware"] == pytest.approx(0.35) and len(ours) == 4
    no_column = make_job(tmp_path / "old", "scheduling_ttft", scheduling_study().drop(columns="sim_prefix_hit_rate_tokens"))
    assert plot_scheduling_hit_rate(no_column) == []


def effective_study(systems: tuple[str, ...] = ("mooncake", "vllm", "vllm_prefix_caching", "vllm_chunked_prefill"),
                    traces: tuple[str, ...] = ("conversation", "synthetic")) -> pd.DataFrame:
    """A mooncake_capacity study: one point per ``<trace>/<system>`` at the trace's own load."""
    shares = {"mooncake": (0.9, 0.95, 0.99), "vllm": (0.12, 0.5, 0.6), "vllm_prefix_caching": (0.15, 0.45, 0.62),
              "vllm_chunked_prefill": (0.1, 0.4, 0.55)}
    rows = []
    for trace in traces:
        for system in systems:
            row = {"variant": f"{trace}/{system}", "point": 0, "offered_rate_rps": 3.0}
            row.update({f"attainment_tbt_{x}ms": a for x, a in zip((100, 200, 300), shares[system], strict=True)})
            rows.append(row)
    return pd.DataFrame(rows)


def test_effective_capacity_figure_marks_the_papers_gains_at_its_thresholds(tmp_path):
    job = make_job(tmp_path, "effective_capacity", effective_study(traces=("conversation", "synthetic",
                                                                           "conversation@slow")))
    assert_written(plot_effective_capacity(job), ["effective_capacity"],
                   {"effective_capacity": {"trace", "system", "tbt_threshold_ms", "effective_share", "source"}})
    plotted = pd.read_csv(job / "figures" / "effective_capacity.csv")
    shares = plotted[plotted["measure"] == "effective_share"]
    assert len(shares) == 3 * 4 * 3 and set(shares["source"]) == {"ours"}
    paper = plotted[plotted["source"] == "paper"]
    by_trace = {t: dict(zip(p["tbt_threshold_ms"], p["gain"], strict=True)) for t, p in paper.groupby("trace")}
    assert by_trace["conversation"] == pytest.approx(CONVERSATION_PAPER)  # +498 / +157 / +59% (Fig. 1)
    assert by_trace["synthetic"] == pytest.approx(SYNTHETIC_PAPER)  # +62 / +40 / +28% (Fig. 7)
    assert by_trace["conversation@slow"] == pytest.approx(CONVERSATION_PAPER)  # a sensitivity run: its trace's
    assert paper["label"].str.contains("paper").all()
    assert "I (100 ms): paper +498% (Fig. 1 [P])" in set(paper["label"])
    ours = plotted[(plotted["measure"] == "gain") & (plotted["source"] == "ours")].set_index(
        ["trace", "tbt_threshold_ms"])
    assert ours.loc[("conversation", 100.0), "gain"] == pytest.approx(0.9 / 0.12 - 1)  # over plain vLLM, as judged
    assert ours.loc[("conversation", 100.0), "baseline"] == "vllm"


def test_effective_capacity_figure_without_every_baseline_shows_only_the_papers_gains(tmp_path):
    job = make_job(tmp_path, "effective_capacity", effective_study(systems=("mooncake", "vllm"),
                                                                   traces=("conversation", "other")))
    plot_effective_capacity(job)
    plotted = pd.read_csv(job / "figures" / "effective_capacity.csv")
    gains = plotted[plotted["measure"] == "gain"]
    assert set(gains["source"]) == {"paper"} and set(gains["trace"]) == {"conversation"}  # no paper number: none


def test_rejection_figures(tmp_path):
    study, load = rejection_study()
    job = make_job(tmp_path, "rejection", study, load=load)
    assert_written(plot_rejection(job), ["rejection", "rejection_load"], {
        "rejection": {"split", "mode", "n_rejected"},
        "rejection_load": {"split", "mode", "time_s", "load", "value"}})
    counts = pd.read_csv(job / "figures" / "rejection.csv").set_index(["split", "mode"])["n_rejected"]
    assert counts.loc[("12P2D", "early")] == 300 and counts.loc[("8P8D", "none")] == 0
    series = pd.read_csv(job / "figures" / "rejection_load.csv")
    assert series[series["load"].str.startswith("prefill")]["value"].max() == pytest.approx(20.5)


def test_rejection_figure_without_load_samples(tmp_path):
    job = make_job(tmp_path, "rejection", rejection_study()[0])
    assert [p.name for p in plot_rejection(job)] == ["rejection.png", "rejection.csv"]


def test_splitwise_figure_plots_chosen_rows_only(tmp_path):
    job = make_job(tmp_path, "splitwise_provisioning", splitwise_study())
    assert_written(plot_splitwise(job), ["splitwise"], {"splitwise": {"trace", "budget", "design", "measure", "value"}})
    plotted = pd.read_csv(job / "figures" / "splitwise.csv")
    assert len(plotted) == 2 * 2 * 2 * 3  # trace x budget x chosen design x measure
    assert set(plotted["split"]) == {"7P/T", "3P/4T"}
    per_kw = plotted[(plotted["design"] == "splitwise_aa") & (plotted["measure"] == "req/s per kW")]
    assert per_kw["value"].tolist() == pytest.approx([7.0 / 22.4] * 4)


def test_placement_figure_highlights_the_chosen_layouts(tmp_path):
    table, report = placement_study()
    job = make_job(tmp_path, "placement_search", table, placement=report)
    assert_written(plot_placement(job), ["placement"], {"placement": {"phase", "layout", "per_gpu_rate", "chosen"}})
    plotted = pd.read_csv(job / "figures" / "placement.csv")
    assert len(plotted) == 3  # the skipped layout is not plotted
    assert plotted["chosen"].sum() == 2
    assert plotted.set_index(["phase", "layout"]).loc[("prefill", "TP2 PP1"), "per_gpu_rate"] == pytest.approx(2.5)


# ---------------------------------------------------------------------------------------------- dispatch

@pytest.mark.parametrize("figure, study, expected", [
    ("scheduling_ttft", scheduling_study(), ["scheduling_hit_rate", "scheduling_ttft"]),
    ("pareto", pareto_study(), ["pareto"]),
    ("slo_attainment", slo_study(), ["slo_attainment", "slo_goodput"]),
])
def test_rendering_reads_study_figure(tmp_path, figure, study, expected):
    job = make_job(tmp_path, figure, study)
    written = render_job(job, "sim_study")
    assert sorted(p.name for p in written) == sorted(n + e for n in expected for e in (".png", ".csv"))


def test_an_unknown_figure_draws_nothing_and_says_so(tmp_path, caplog):
    job = make_job(tmp_path, "no_such_figure", scheduling_study())
    with caplog.at_level(logging.WARNING):
        assert render_job(job, "sim_study") == []
    assert "no_such_figure" in caplog.text


def test_a_failing_figure_fails_the_rendering_after_the_others_are_drawn(tmp_path, caplog):
    job = make_job(tmp_path, "slo_attainment", slo_study(), capacity=False)  # slo_goodput needs capacity.csv
    with caplog.at_level(logging.ERROR), pytest.raises(FigureError, match=r"1 figure\(s\) failed \(plot_slo_goodput"):
        render_job(job, "sim_study")
    assert (job / "figures" / "slo_attainment.png").is_file()  # drawn before the failure was raised
    assert "plot_slo_goodput failed" in caplog.text


def test_every_preset_figure_is_known_and_registered(tmp_path):
    presets = Path(__file__).resolve().parents[2] / "conf" / "experiment"
    for preset in presets.glob("*.yaml"):
        study = (yaml.safe_load(preset.read_text(encoding="utf-8")) or {}).get("study") or {}
        if study.get("figure"):
            assert study["figure"] in PLOTS_BY_FIGURE, preset.name
            job = make_job(tmp_path / preset.stem, str(study["figure"]), scheduling_study())
            assert plots_for(job, "sim_study") == PLOTS_BY_FIGURE[study["figure"]]


def test_global_cache_figure_draws_every_local_setup_beside_the_papers_labels(tmp_path):
    from figures.global_cache import PAPER_FIG10, plot_global_cache

    rows = [{"variant": f"{w}/{cache}", "point": 0, "sim_prefix_hit_rate_tokens": hit,
             "sim_prefill_tokens_computed": 1e7, "sim_busy_s_prefill": busy, "mean_ttft_ms": 900.0,
             "workload_prefix_hit_rate_tokens": 0.4}
            for w in ("conversation", "synthetic")
            for cache, hit, busy in (("local", 0.38, 100.0), ("global", 0.39, 99.0), ("local_round_robin", 0.1, 300.0))]
    pd.DataFrame(rows).to_csv(tmp_path / "study.csv", index=False)
    paths = plot_global_cache(tmp_path)
    assert (tmp_path / "figures" / "global_cache.png").is_file()
    data = pd.read_csv([p for p in paths if p.suffix == ".csv"][0])
    ratios = data[data["panel"] == "hit"].set_index(["workload", "local"])["value"]
    assert ratios[("conversation", "local_round_robin")] == pytest.approx(3.9)
    assert set(data.loc[data["panel"] == "prefill", "local"]) == {"local", "local_round_robin"}
    assert set(PAPER_FIG10) >= {"conversation", "synthetic"}


def test_rejection_figure_draws_table3_as_a_share_of_our_requests_on_the_judged_split():
    import seaborn as sns

    from figures.claims.mooncake_rejection import JUDGED_SPLIT, PAPER_REJECTED, PAPER_REQUESTS
    from figures.sim_studies import _draw_paper_rejections

    table = pd.DataFrame({"split": [JUDGED_SPLIT] * 3 + ["8P8D"] * 3, "mode": ["baseline", "early", "predictive"] * 2,
                          "n_rejected": [10, 20, 30, 1, 1, 1], "n_issued": [1000] * 6})
    modes = ["baseline", "early", "predictive"]
    grid = sns.catplot(data=table, x="mode", y="n_rejected", col="split", order=modes, kind="bar")
    _draw_paper_rejections(grid, table, modes)
    offsets = grid.axes_dict[JUDGED_SPLIT].collections[-1].get_offsets()
    assert list(offsets[:, 0]) == [0, 1, 2]
    assert list(offsets[:, 1]) == pytest.approx([n / PAPER_REQUESTS * 1000 for n in PAPER_REJECTED])
    assert not grid.axes_dict["8P8D"].collections  # only the judged split is the paper's overload
