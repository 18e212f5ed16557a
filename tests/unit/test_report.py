"""The reproduction report on hand-made job folders: the newest finished job is used, every claim is
marked with its verdict level (matches / holds in direction / does not hold) or not run correctly, and the
table has exactly four columns (claim, paper's number, setup, ours)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from figures.claims import CLAIMS
from figures.claims.base import (
    DIRECTION,
    FAILS,
    Bounded,
    Claim,
    MissingData,
    Outcome,
    Setup,
    format_range,
    greater_than_one,
    ratio_range,
)
from figures.report import NOT_RUN, evaluate, find_latest_jobs, main, write_report
from figures.study_tables import THRESHOLD_COLUMN, JobFolder
from harness.result_files import CAPACITY_FILE
from harness.studies.sim_sweep import capacity_table

CLAIMS_BY_KEY = {c.key: c for c in CLAIMS}
PRESETS = Path(__file__).resolve().parents[2] / "conf" / "experiment"


def make_job(root: Path, experiment: str, table: pd.DataFrame, *, job: str = "2026-01-01_00-00-00",
             status: str = "ok", finished: str = "2026-01-01T00:10:00+00:00", config: dict[str, Any] | None = None,
             files: dict[str, Any] | None = None) -> Path:
    folder = root / experiment / job
    folder.mkdir(parents=True)
    summary = {"status": status, "experiment": experiment, "job": job, "kind": "sim_study",
               "finished_at": finished, "git_sha": "abcdef1234567890", "git_dirty": False}
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    base = {"experiment_name": experiment, "slo": {"ttft_ms": 250.0, "tpot_ms": 100.0},
            "workload": {"name": "shared_prefix"}}
    (folder / "config.yaml").write_text(yaml.safe_dump({**base, **(config or {})}), encoding="utf-8")
    table.to_csv(folder / "study.csv", index=False)
    if {"variant", "slo_attainment_target"} <= set(table.columns):  # a sweep study also writes its capacities
        thresholds = [float(m.group(1)) for c in table.columns if (m := THRESHOLD_COLUMN.match(str(c)))]
        capacity_table(table, thresholds).to_csv(folder / CAPACITY_FILE, index=False)
    for name, content in (files or {}).items():
        (folder / name).write_text(json.dumps(content), encoding="utf-8")
    return folder


def scheduling(ttft_s: tuple[float, float, float, float], hits: tuple[float, float] = (0.2, 0.3)) -> pd.DataFrame:
    return pd.DataFrame({"variant": ["random", "load_balancing", "local_cache_aware", "global_cache_aware"],
                         "point": 0, "mean_ttft_ms": [t * 1000 for t in ttft_s],
                         "sim_prefix_hit_rate_tokens": [0.1, 0.1, *hits]})


def capacity(mooncake: list[float], vllm: list[float]) -> pd.DataFrame:
    rows = []
    for trace in ("conversation", "synthetic"):
        for system, att in (("mooncake", mooncake), ("vllm", vllm)):
            for i, (rate, a) in enumerate(zip([1.0, 2.0, 3.0, 4.0], att, strict=True)):
                rows.append({"variant": f"{trace}/{system}", "point": i, "offered_rate_rps": rate,
                             "slo_attainment": a, "slo_attainment_target": 0.9, "attainment_tbt_100ms": a,
                             "attainment_tbt_200ms": a, "attainment_tbt_300ms": a})
    return pd.DataFrame(rows)


def rejection(counts: dict[str, tuple[int, int, int]]) -> pd.DataFrame:
    rows = []
    for split, values in counts.items():
        for mode, n in zip(("baseline", "early", "predictive"), values, strict=True):
            rows.append({"variant": f"{split}/{mode}", "point": 0, "n_rejected": n, "n_issued": 1000})
    return pd.DataFrame(rows)


def slo(distserve: list[float], vllm: list[float]) -> pd.DataFrame:
    rows = []
    for system, att in (("DistServe", distserve), ("vLLM", vllm)):
        for i, (rate, a) in enumerate(zip([1.0, 2.0, 3.0, 4.0], att, strict=True)):
            rows.append({"variant": f"azure_conv/{system}", "point": i, "per_gpu_rate": rate, "slo_attainment": a,
                         "slo_attainment_target": 0.9})
    return pd.DataFrame(rows)


def splitwise(aa_conv_power: float, split_code: str = "3P/1T", split_conv: str = "2P/2T") -> pd.DataFrame:
    rows = []
    for trace in ("azure_code", "azure_conv"):
        for budget in ("cost", "power"):
            designs = [("baseline_a100", "7P/T", 6.0, 123.2), ("baseline_h100", "3P/T", 10.0, 114.0),
                       ("splitwise_ha", "2P/3T", 7.0, 110.0),
                       ("splitwise_aa", "3P/4T", aa_conv_power if (trace, budget) == ("azure_conv", "power") else 5.0,
                        123.2),
                       ("splitwise_hh", split_code if trace == "azure_code" else split_conv, 8.0, 152.0)]
            for design, split, rate, cost in designs:
                rows.append({"trace": trace, "budget": budget, "design": design, "split": split, "feasible": True,
                             "chosen": True, "n_machines": 7, "max_rate_rps": rate, "cost_usd_hr": cost,
                             "power_kw": 22.4, "throughput_per_usd_hr": rate / cost, "throughput_per_kw": rate / 22.4})
                rows.append({"trace": trace, "budget": budget, "design": design, "split": "1P/1T", "feasible": True,
                             "chosen": False, "n_machines": 2, "max_rate_rps": 100.0, "cost_usd_hr": cost,
                             "power_kw": 22.4, "throughput_per_usd_hr": 1.0, "throughput_per_kw": 1.0})
    return pd.DataFrame(rows)


def verdict(claim_key: str, root: Path) -> tuple[str, str]:
    row = evaluate(CLAIMS_BY_KEY[claim_key], find_latest_jobs([root]))
    return row.verdict, row.ours


# ---------------------------------------------------------------------------------------------- the claim list

def test_claims_are_data_with_unique_keys_and_existing_presets():
    assert 10 <= len(CLAIMS) <= 16
    assert len({c.key for c in CLAIMS}) == len(CLAIMS)
    for claim in CLAIMS:
        assert (PRESETS / f"{claim.experiment}.yaml").is_file(), claim.experiment
        assert claim.claim and claim.paper_number and callable(claim.compute)
    assert {c.paper for c in CLAIMS} >= {"DistServe OSDI'24", "Mooncake FAST'25", "Splitwise ISCA'24"}


# ---------------------------------------------------------------------------------------------- job selection

def test_the_newest_ok_job_is_used(tmp_path):
    make_job(tmp_path, "mooncake_scheduling", scheduling((20, 5, 4, 3)), job="old", finished="2026-01-01T00:00:00")
    make_job(tmp_path, "mooncake_scheduling", scheduling((1, 5, 4, 3)), job="new", finished="2026-01-02T00:00:00")
    make_job(tmp_path, "mooncake_scheduling", scheduling((20, 5, 4, 3)), job="newest_failed", status="failed",
             finished="2026-01-03T00:00:00")
    jobs = find_latest_jobs([tmp_path])
    assert jobs["mooncake_scheduling"].path.name == "new"
    assert verdict("mooncake_scheduling", tmp_path)[0] == FAILS


def test_jobs_are_found_across_several_results_dirs(tmp_path):
    make_job(tmp_path / "a", "mooncake_scheduling", scheduling((20, 5, 4, 3)), finished="2026-01-01T00:00:00")
    make_job(tmp_path / "b", "mooncake_rejection", rejection({"8P8D": (3, 2, 1)}))
    assert set(find_latest_jobs([tmp_path / "a", tmp_path / "b", tmp_path / "missing"])) == {
        "mooncake_scheduling", "mooncake_rejection"}


# ---------------------------------------------------------------------------------------------- verdicts

def test_scheduling_ordering_and_global_vs_local(tmp_path):
    make_job(tmp_path, "mooncake_scheduling", scheduling((19.65, 5.27, 3.58, 3.07)))
    state, ours = verdict("mooncake_scheduling", tmp_path)
    assert state == DIRECTION and "19.65 / 5.27 / 3.58 / 3.07 s" in ours
    state, ours = verdict("mooncake_global_vs_local", tmp_path)
    assert state == DIRECTION and "-14.2%" in ours
    assert verdict("mooncake_hit_global_local", tmp_path)[0] == DIRECTION


def test_scheduling_out_of_order_does_not_hold(tmp_path):
    make_job(tmp_path, "mooncake_scheduling", scheduling((19.0, 5.0, 3.0, 3.5), hits=(0.3, 0.2)))
    assert verdict("mooncake_scheduling", tmp_path)[0] == FAILS
    assert verdict("mooncake_global_vs_local", tmp_path)[0] == FAILS
    assert verdict("mooncake_hit_global_local", tmp_path)[0] == FAILS


def test_hit_rate_tolerance(tmp_path):
    make_job(tmp_path / "near", "mooncake_scheduling", scheduling((4, 3, 2, 1), hits=(0.2, 0.33)))
    make_job(tmp_path / "far", "mooncake_scheduling", scheduling((4, 3, 2, 1), hits=(0.2, 0.25)))
    assert verdict("mooncake_hit_rate", tmp_path / "near")[0] == DIRECTION
    assert verdict("mooncake_hit_rate", tmp_path / "far")[0] == FAILS


def test_capacity_gain_holds_when_mooncake_serves_more(tmp_path):
    make_job(tmp_path, "mooncake_capacity", capacity([0.99, 0.95, 0.85, 0.1], [0.95, 0.85, 0.5, 0.1]))
    state, ours = verdict("mooncake_capacity_100", tmp_path)
    assert state == DIRECTION
    assert "+67%" in ours  # 2.5 / (1 + 0.05 / 0.10) = 2.5 / 1.5
    assert verdict("mooncake_capacity_synthetic", tmp_path)[0] == DIRECTION


def test_capacity_gain_does_not_hold_when_vllm_serves_more(tmp_path):
    make_job(tmp_path, "mooncake_capacity", capacity([0.95, 0.85, 0.5, 0.1], [0.99, 0.95, 0.85, 0.1]))
    assert verdict("mooncake_capacity_200", tmp_path)[0] == FAILS


def test_capacity_when_vllm_fails_everywhere_and_when_both_do(tmp_path):
    make_job(tmp_path / "a", "mooncake_capacity", capacity([0.99, 0.95, 0.85, 0.1], [0.5, 0.4, 0.3, 0.1]))
    state, ours = verdict("mooncake_capacity_300", tmp_path / "a")
    assert state == DIRECTION and ">=+150%" in ours  # 2.5 against a vLLM capacity below the slowest rate, 1
    make_job(tmp_path / "b", "mooncake_capacity", capacity([0.5, 0.4, 0.3, 0.1], [0.5, 0.4, 0.3, 0.1]))
    state, ours = verdict("mooncake_capacity_300", tmp_path / "b")
    assert state == FAILS and "inconclusive" in ours


def test_capacity_below_the_slowest_point_is_an_upper_bound(tmp_path):
    make_job(tmp_path, "mooncake_capacity", capacity([0.5, 0.4, 0.3, 0.1], [0.99, 0.95, 0.85, 0.1]))
    state, ours = verdict("mooncake_capacity_100", tmp_path)
    assert state == FAILS and "<=-60%" in ours and "inconclusive" not in ours  # <= 1 / 2.5 - 1


def test_ratio_ranges_follow_the_capacity_bounds():
    exact, above = Bounded(2.0, "exact", 1.0, "2"), Bounded(4.0, "at_least", 1.0, ">=4")
    below = Bounded(0.0, "below_range", 1.0, "0 (<1)")
    assert ratio_range(exact, Bounded(1.0, "exact", 1.0, "1")) == (2.0, 2.0)
    assert ratio_range(above, exact) == (2.0, math.inf)
    assert ratio_range(exact, above) == (0.0, 0.5)
    assert ratio_range(exact, below) == (2.0, math.inf)
    assert ratio_range(below, below) == (0.0, math.inf)
    assert format_range(2.0, math.inf, str) == ">=2.0"
    assert format_range(0.0, 0.5, str) == "<=0.5"
    assert format_range(0.0, math.inf, str) == "n/a"
    assert format_range(-0.5, 1.0, str, floor=-1.0) == "-0.5 to 1.0"
    assert greater_than_one(2.0, math.inf) == (True, "")
    assert greater_than_one(0.0, 0.5) == (False, "")
    assert greater_than_one(0.5, 2.0)[1].startswith("inconclusive")


def test_capacity_missing_threshold_is_not_run(tmp_path):
    table = capacity([0.99, 0.95, 0.85, 0.1], [0.5, 0.4, 0.3, 0.1]).drop(columns=["attainment_tbt_200ms"])
    make_job(tmp_path, "mooncake_capacity", table)
    state, ours = verdict("mooncake_capacity_200", tmp_path)
    assert state == NOT_RUN and "attainment_tbt_200ms" in ours and "experiment=mooncake_capacity" in ours
    assert verdict("mooncake_capacity_100", tmp_path)[0] == DIRECTION


def test_rejection_is_judged_on_the_papers_split(tmp_path):
    make_job(tmp_path / "a", "mooncake_rejection", rejection({"8P8D": (400, 300, 200), "12P2D": (1, 2, 3)}))
    state, ours = verdict("mooncake_rejection", tmp_path / "a")
    assert state == DIRECTION and "8P8D: 400 / 300 / 200" in ours and "12P2D: 1 / 2 / 3" in ours
    make_job(tmp_path / "b", "mooncake_rejection", rejection({"8P8D": (228, 228, 228)}))
    assert verdict("mooncake_rejection", tmp_path / "b")[0] == FAILS
    make_job(tmp_path / "c", "mooncake_rejection", rejection({"12P2D": (104, 183, 732)}))
    state, ours = verdict("mooncake_rejection", tmp_path / "c")
    assert state == FAILS and "no 8P8D" in ours


def test_distserve_goodput_ratio(tmp_path):
    make_job(tmp_path / "a", "distserve_slo_attainment", slo([1.0, 1.0, 0.95, 0.5], [1.0, 0.95, 0.85, 0.5]))
    state, ours = verdict("distserve_goodput", tmp_path / "a")
    assert state == DIRECTION and "azure_conv: 1.24x" in ours  # (3 + 0.05/0.45) / 2.5
    make_job(tmp_path / "b", "distserve_slo_attainment", slo([1.0, 0.95, 0.85, 0.5], [1.0, 1.0, 1.0, 0.95]))
    state, ours = verdict("distserve_goodput", tmp_path / "b")
    assert state == FAILS and "<=0.62x" in ours  # vLLM still passes at the highest rate: an upper bound


def test_distserve_tighter_slo(tmp_path):
    table = pd.DataFrame({"variant": ["vLLM 4xTP1/seqs16", "DistServe 2P2D/seqs16", "DistServe 1P3D/seqs16"],
                          "p90_ttft_ms": [500.0, 200.0, 100.0], "p90_tpot_ms": [50.0, 150.0, 50.0],
                          "slo_attainment": [0.5, 0.5, 0.95]})
    make_job(tmp_path, "distserve_pareto", table)
    state, ours = verdict("distserve_tighter_slo", tmp_path)
    assert state == DIRECTION and ours.startswith("**holds in direction**: 4.00x")  # vLLM scale 2.0 vs DistServe 0.5


def test_distserve_placement(tmp_path):
    def report(decode_tp: int) -> dict[str, Any]:
        return {"chosen": {"prefill_tp": 2, "prefill_pp": 1, "n_prefill": 1, "decode_tp": decode_tp,
                           "decode_pp": 1, "n_decode": 1}, "per_gpu_goodput_rps": 1.5,
                "workload": {"name": "azure_conv"}}
    table = pd.DataFrame({"phase": ["prefill"], "tp": [2], "pp": [1], "per_gpu_rate": [2.0], "chosen": [True]})
    make_job(tmp_path / "a", "distserve_placement", table, files={"placement.json": report(1)})
    make_job(tmp_path / "b", "distserve_placement", table, files={"placement.json": report(2)})
    assert verdict("distserve_placement", tmp_path / "a")[0] == DIRECTION
    assert verdict("distserve_placement", tmp_path / "b")[0] == FAILS


def test_splitwise_claims_use_the_chosen_rows(tmp_path):
    make_job(tmp_path / "a", "splitwise_provisioning", splitwise(aa_conv_power=12.9))
    state, ours = verdict("splitwise_aa_isopower", tmp_path / "a")
    assert state == DIRECTION and ours.startswith("**holds in direction**: 2.15x")
    assert verdict("splitwise_ha_isopower", tmp_path / "a")[0] == DIRECTION  # 7/6 at 110 vs 123.2 $/hr
    assert verdict("splitwise_aa_isocost", tmp_path / "a")[0] == FAILS  # 5 vs Baseline-H100's 10
    assert verdict("splitwise_pool_sizing", tmp_path / "a")[0] == DIRECTION
    make_job(tmp_path / "b", "splitwise_provisioning", splitwise(aa_conv_power=5.0, split_code="1P/3T"))
    assert verdict("splitwise_aa_isopower", tmp_path / "b")[0] == FAILS
    assert verdict("splitwise_pool_sizing", tmp_path / "b")[0] == FAILS


def test_missing_experiment_is_not_run_with_the_command(tmp_path):
    state, ours = verdict("splitwise_aa_isopower", tmp_path)
    assert state == NOT_RUN and "`python -m harness experiment=splitwise_provisioning`" in ours


def test_a_claim_that_lacks_data_is_not_run(tmp_path):
    def compute(job: JobFolder) -> Outcome:
        raise MissingData("no variant x")

    claim = Claim("k", "P", "c", "1", "mooncake_scheduling", compute, Setup("their setup", "ours", ("one difference",)))
    make_job(tmp_path, "mooncake_scheduling", scheduling((4, 3, 2, 1)))
    row = evaluate(claim, find_latest_jobs([tmp_path]))
    assert row.verdict == NOT_RUN and "no variant x" in row.ours


# ---------------------------------------------------------------------------------------------- the file

def test_report_file_has_header_and_a_four_column_table(tmp_path):
    make_job(tmp_path, "mooncake_scheduling", scheduling((19.65, 5.27, 3.58, 3.07)))
    out, rows = write_report([tmp_path], tmp_path / "REPORT.md", now=datetime(2026, 1, 2, 3, 4, tzinfo=UTC))
    text = out.read_text(encoding="utf-8")
    assert "2026-01-02 03:04 UTC" in text and "abcdef123456" in text
    assert str(tmp_path / "mooncake_scheduling" / "2026-01-01_00-00-00") in text
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert table[0] == "| Claim | Paper's number | Setup | Our number |"
    assert len(table) == 2 + len(CLAIMS)
    for line in table:
        cells = line.replace("\\|", "").strip("|").split("|")
        assert len(cells) == 4, line
    verdicts = {r.claim.key: r.verdict for r in rows}
    assert verdicts["mooncake_scheduling"] == DIRECTION
    assert verdicts["mooncake_capacity_100"] == NOT_RUN
    assert "python -m harness experiment=mooncake_capacity" in text
    assert f"{sum(v == DIRECTION for v in verdicts.values())} hold" in text


def test_main_writes_to_the_first_results_dir_by_default(tmp_path, capsys):
    make_job(tmp_path, "mooncake_scheduling", scheduling((19.65, 5.27, 3.58, 3.07)))
    assert main(["--results-dir", str(tmp_path)]) == 0
    assert (tmp_path / "REPORT.md").is_file()
    assert capsys.readouterr().out.strip() == str(tmp_path / "REPORT.md")


@pytest.mark.parametrize("key", [c.key for c in CLAIMS])
def test_every_claim_is_not_run_without_jobs(tmp_path, key):
    assert verdict(key, tmp_path)[0] == NOT_RUN
