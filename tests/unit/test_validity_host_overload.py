"""Host interference and overload in the validity block (harness/validity.py), with synthetic host-load
blocks and records: their reasons and thresholds, an overloaded and a stable open-loop point, the closed
loop left unchecked, the old call unchanged; and where they surface: points.csv of a real-engine serve job,
the comparison's study row, its figure label and REPORT.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from figures.disagg_compare import comparison_table, variant_label
from figures.report import write_report
from harness.metrics import summarize
from harness.results import RunFolder
from harness.serve_job import run_serve
from harness.slo import SLOConfig
from harness.studies.real_compare import _row
from harness.studies.variants import compose_variant
from harness.validity import ValidityConfig, assess_validity, host_interference_reasons, overload_check
from tests.unit.test_validity_surfaced import ScriptedDeployment
from vocab.errors import ConfigError
from vocab.records import RequestRecord, RequestStatus
from vocab.result_files import POINTS_FILE, STUDY_FILE

NAN = float("nan")


def host_block(share: float = 0.0, steal: float = 0.0, wall: float = 10.0, top=()) -> dict:
    return {"wall_s": wall, "outside_cpu_s": share * wall, "outside_cpu_share": share, "steal_share": steal,
            "job_cpu_s": 15.0, "top_outside": [list(t) for t in top]}


# --- host interference -----------------------------------------------------------------------------------


def test_outside_cpu_above_the_threshold_names_the_processes() -> None:
    block = host_block(0.45, top=[("stress-ng", 901, 4.0), ("python3", 77, 0.3)])
    assert host_interference_reasons(block, ValidityConfig()) == [
        "host interference: processes outside the job used 0.45 cores (threshold 0.10): stress-ng 0.40, python3 0.03"]
    assert host_interference_reasons(block, ValidityConfig(max_outside_cpu_share=0.5)) == []


def test_steal_above_the_threshold() -> None:
    assert host_interference_reasons(host_block(steal=0.08), ValidityConfig()) == [
        "host interference: steal 8% (threshold 5%)"]
    assert host_interference_reasons(host_block(steal=0.05), ValidityConfig()) == []  # at the limit passes


def test_quiet_unmeasured_or_too_short_points_give_no_reason() -> None:
    cfg = ValidityConfig()
    assert host_interference_reasons(host_block(0.05, 0.01), cfg) == []
    assert host_interference_reasons(host_block(NAN, NAN), cfg) == []  # no /proc: not measured, not judged
    short = host_block(3.0, 0.5, wall=0.2)  # a 0.2 s point: 10 ms ticks cannot resolve it
    assert host_interference_reasons(short, cfg) == []
    assert len(host_interference_reasons(short, ValidityConfig(min_host_load_wall_s=0.1))) == 2


@pytest.mark.parametrize(("key", "value"), [("max_outside_cpu_share", -0.1), ("max_outside_cpu_share", NAN),
                                            ("max_steal_share", 1.5), ("min_host_load_wall_s", -1.0),
                                            ("overload_ttft_growth", 0.5), ("overload_min_ttft_ms", NAN),
                                            ("overload_min_ttft_ms", "500")])
def test_bad_thresholds_are_refused(key: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"^validity\.{key}: must be"):
        ValidityConfig(**{key: value})


def test_a_bad_threshold_on_the_command_line_is_a_config_error(compose) -> None:
    with pytest.raises(ConfigError, match=r"validity\.max_outside_cpu_share: must be"):
        compose(["validity.max_outside_cpu_share=-1"])


# --- overload --------------------------------------------------------------------------------------------


def served(arrivals: list[float], service_s: float, *, statuses=None) -> list[RequestRecord]:
    """One FIFO server taking ``service_s`` per request: the first token comes with the end of service."""
    records, free_at = [], 0.0
    for i, arrival in enumerate(arrivals):
        status = statuses[i] if statuses else RequestStatus.OK
        ok = status == RequestStatus.OK
        start = max(arrival, free_at)
        free_at = start + service_s if ok else free_at
        first, end = start + service_s * 0.8, start + service_s
        records.append(RequestRecord(
            request_id=i, status=status, arrival_s=arrival, sent_s=arrival, first_token_s=first if ok else NAN,
            finish_s=end if ok else NAN, input_length=10, output_length=2, n_out=2 if ok else 0,
            chunk_times_s=(first, end) if ok else ()))
    return records


def open_loop(rate: float, n: int = 60) -> list[float]:
    return [i / rate for i in range(n)]


@pytest.mark.integration
def test_queues_growing_through_the_run_is_overload() -> None:
    records = served(open_loop(4.0), service_s=1 / 2.9)  # offered 4 req/s to a 2.9 req/s server
    block = overload_check(records, 4.0, saturation_rps=2.9)
    assert block["overloaded"] is True and block["checked"] is True
    assert block["completed_rate_rps"] == pytest.approx(2.9, rel=1e-6)
    assert block["last_third_ttft_ms"] > 3 * block["first_third_ttft_ms"]
    reason = block["reason"]
    assert reason.startswith("overloaded: offered 4.0 req/s against a measured saturation rate of 2.9 req/s; TTFT grew "
                             "from 1.2 s to 5.0 s through the run; ")  # the queue grew from the first request on
    assert "requests completed at 2.9 req/s, 28% short of the offered rate" in reason
    assert reason.endswith("read as a saturation point, not a latency result")
    assert "measured saturation rate" not in overload_check(records, 4.0)["reason"]  # unknown: not mentioned


def test_a_stable_point_is_not_overloaded() -> None:
    records = served(open_loop(2.0), service_s=0.3)
    block = overload_check(records, 2.0)
    assert block["overloaded"] is False and block["reason"] is None
    assert block["completed_rate_rps"] == pytest.approx(2.0)
    assert block["first_third_ttft_ms"] == pytest.approx(240.0) == block["last_third_ttft_ms"]


def test_ttft_growth_below_the_floor_is_not_overload() -> None:
    """TTFT grows tenfold, but from 10 to 100 ms: a warming cache, not a queue."""
    arrivals = open_loop(2.0)
    records = [RequestRecord(request_id=i, status=RequestStatus.OK, arrival_s=a, sent_s=a,
                             first_token_s=a + (0.01 if i < 20 else 0.1), finish_s=a + 0.2, input_length=1,
                             output_length=2, n_out=2, chunk_times_s=(a + 0.01, a + 0.2))
               for i, a in enumerate(arrivals)]
    assert overload_check(records, 2.0)["overloaded"] is False
    assert overload_check(records, 2.0, cfg=ValidityConfig(overload_min_ttft_ms=50.0))["overloaded"] is True


def test_completing_fewer_requests_than_offered_is_overload() -> None:
    statuses = [RequestStatus.OK if i % 2 == 0 else RequestStatus.REJECTED for i in range(60)]
    block = overload_check(served(open_loop(2.0), 0.1, statuses=statuses), 2.0)
    assert block["overloaded"] is True and block["completed_rate_rps"] == pytest.approx(1.0)
    assert "requests completed at 1.0 req/s, 50% short of the offered rate" in block["reason"]


def test_a_closed_loop_is_not_checked() -> None:
    records = served([0.0] * 30, 0.5)  # all at 0: a closed loop, growing "TTFT" by construction
    for offered in (None, NAN):
        block = overload_check(records, offered)
        assert block["checked"] is False and block["overloaded"] is False and block["reason"] is None


# --- assess_validity -------------------------------------------------------------------------------------


def assess(records: list[RequestRecord], cfg: ValidityConfig | None = None, *args, **kwargs) -> dict:
    return assess_validity(records, summarize(records, SLOConfig()), cfg or ValidityConfig(), *args, **kwargs)


def test_the_old_call_is_unchanged() -> None:
    records = served(open_loop(4.0), service_s=1 / 2.9)  # overloaded, but nobody asked
    old = assess(records, ValidityConfig(), (), offered_rate_rps=4.0)
    assert "host_load" not in old and "overload" not in old
    assert not any("overloaded" in r or "host interference" in r for r in old["reasons"])
    assert assess(records, offered_rate_rps=4.0, host_load=None, saturation_rps=None) == old
    assert json.loads(json.dumps(old)) == old


def test_a_busy_host_makes_the_point_invalid_with_its_reason_first() -> None:
    records = served(open_loop(2.0), service_s=0.3)
    block = host_block(0.45, 0.08, top=[("stress-ng", 9, 4.0)])
    v = assess(records, ValidityConfig(), ("outstanding-request cap hit",), offered_rate_rps=2.0, host_load=block)
    assert v["valid"] is False
    assert v["reasons"][:2] == [
        "host interference: processes outside the job used 0.45 cores (threshold 0.10): stress-ng 0.40",
        "host interference: steal 8% (threshold 5%)"]
    assert v["reasons"][-1] == "outstanding-request cap hit"
    assert v["host_load"]["outside_cpu_share"] == 0.45 and v["host_load"]["max_outside_cpu_share"] == 0.10
    assert v["host_load"]["max_steal_share"] == 0.05
    assert v["overload"]["checked"] is True and v["overload"]["overloaded"] is False  # checked with host_load


def test_a_quiet_host_and_a_stable_point_stay_valid() -> None:
    v = assess(served(open_loop(2.0), service_s=0.3), offered_rate_rps=2.0, host_load=host_block(0.02, 0.0))
    assert v["valid"] is True and v["reasons"] == []


def test_an_overloaded_point_is_invalid() -> None:
    records = served(open_loop(4.0), service_s=1 / 2.9)
    v = assess(records, ValidityConfig(max_p99_issue_lag_ms=1e9), offered_rate_rps=4.0, saturation_rps=2.9)
    assert v["valid"] is False and v["overload"]["overloaded"] is True
    assert v["reasons"][0].startswith("overloaded: offered 4.0 req/s against a measured saturation rate of 2.9 req/s")
    assert "host_load" not in v  # only what was given
    forced = assess(records, offered_rate_rps=4.0, check_overload=True)
    assert forced["overload"]["overloaded"] is True and forced["overload"]["saturation_rps"] is None
    assert "overload" not in assess(records, offered_rate_rps=4.0, saturation_rps=2.9, check_overload=False)


def test_a_closed_loop_point_gets_no_overload_reason() -> None:
    records = served([0.0] * 30, 0.5)
    v = assess(records, offered_rate_rps=NAN, host_load=host_block())
    assert v["overload"]["checked"] is False
    assert not any("overloaded" in r for r in v["reasons"])


# --- where it surfaces -----------------------------------------------------------------------------------



SMALL = ["workload.num_groups=2", "workload.prompts_per_group=5", "workload.shared_prefix_len=64",
         "workload.question_len=16", "workload.output_len=8", "validity.min_requests=1",
         "validity.min_duration_s=0", "validity.max_ci_relative_width=null", "sweep.saturation_fractions=[]"]


def test_a_real_engine_point_carries_host_load_and_overload(compose, tmp_path: Path) -> None:
    cfg = compose(["experiment=disagg_cpu", "job=serve", *SMALL, "sweep.rates_rps=[2.0,3.0]"])
    assert cfg.engine.name == "vllm"
    result = run_serve(cfg, RunFolder(tmp_path), lambda c, f: ScriptedDeployment())
    for point in result.validity["points"]:
        assert set(point["host_load"]) >= {"wall_s", "outside_cpu_share", "steal_share", "job_cpu_s", "top_outside"}
        assert point["overload"]["checked"] is True and point["overload"]["overloaded"] is False
    points = pd.read_csv(tmp_path / POINTS_FILE)
    assert {"outside_cpu_share", "steal_share", "overloaded"} <= set(points.columns)
    assert points["overloaded"].tolist() == [False, False]


def test_a_simulated_point_has_no_host_columns(compose, tmp_path: Path) -> None:
    cfg = compose(["workload=shared_prefix", *SMALL, "system.colocated_instances=1"])
    assert cfg.engine.name == "sim"
    result = run_serve(cfg, RunFolder(tmp_path), lambda c, f: ScriptedDeployment())
    assert "host_load" not in result.validity and "overload" not in result.validity
    assert not {"outside_cpu_share", "steal_share", "overloaded"} & set(pd.read_csv(tmp_path / POINTS_FILE).columns)


def test_study_row_takes_the_worst_point() -> None:
    vcfg = compose_variant(["experiment=disagg_cpu", "job=serve"])
    swept = {"valid": False, "reasons": ["point 1: host interference: steal 8% (threshold 5%)"],
             "points": [{"valid": True, "reasons": [], "host_load": host_block(0.05, 0.01),
                         "overload": {"checked": True, "overloaded": False}},
                        {"valid": False, "reasons": ["host interference: steal 8% (threshold 5%)"],
                         "host_load": host_block(0.02, 0.08), "overload": {"checked": True, "overloaded": False}}]}
    row = _row("vllm_baseline", vcfg, {}, pd.DataFrame({"extra": []}), swept)
    assert row["outside_cpu_share"] == 0.05 and row["steal_share"] == 0.08 and row["overloaded"] is False
    single = {"valid": True, "reasons": [], "host_load": host_block(0.3, NAN),
              "overload": {"checked": True, "overloaded": True}}
    row = _row("vllm_baseline", vcfg, {}, pd.DataFrame({"extra": []}), single)
    assert row["outside_cpu_share"] == 0.3 and math.isnan(row["steal_share"]) and row["overloaded"] is True
    row = _row("vllm_baseline", vcfg, {}, pd.DataFrame({"extra": []}), {"valid": True, "reasons": []})
    assert math.isnan(row["outside_cpu_share"]) and row["overloaded"] is None  # not measured (simulator)


HOST_REASON = "host interference: processes outside the job used 0.45 cores (threshold 0.10): stress-ng 0.40"
OVERLOAD_REASON = ("overloaded: offered 4.0 req/s against a measured saturation rate of 2.9 req/s; TTFT grew from 80 ms "
                   "to 5.1 s through the run; read as a saturation point, not a latency result")


def write_compare_job(root: Path) -> Path:
    folder = root / "results" / "disagg_cpu" / "2026-12-02_00-00-00"
    folder.mkdir(parents=True)
    variants = {"vllm_baseline": {"valid": True, "reasons": [], "host_load": host_block(0.02, 0.0)},
                "distserve": {"valid": False, "reasons": ["p99 issue lag 40.000 ms exceeds 10 ms", HOST_REASON],
                              "host_load": host_block(0.45, 0.01)},
                "mooncake": {"valid": False, "reasons": [OVERLOAD_REASON], "host_load": host_block(0.01, 0.08)}}
    summary = {"status": "ok", "experiment": "disagg_cpu", "job": folder.name, "kind": "compare",
               "finished_at": "2026-12-02T00:10:00+00:00", "git_sha": "abc",
               "validity": {"valid": False, "reasons": [], "variants": variants}}
    (folder / "summary.json").write_text(json.dumps(summary))
    rows = [{"variant": name, "status": "ok", "valid": block["valid"], "validity_reasons": "; ".join(block["reasons"]),
             "median_ttft_ms": 100.0, "p90_ttft_ms": 200.0, "outside_cpu_share": block["host_load"]["outside_cpu_share"],
             "steal_share": block["host_load"]["steal_share"]} for name, block in variants.items()]
    rows[-1].pop("outside_cpu_share")  # an older study.csv cell: read from the validity block instead
    pd.DataFrame(rows).to_csv(folder / STUDY_FILE, index=False)
    return folder


def test_figure_labels_name_host_interference_and_overload(tmp_path: Path) -> None:
    data = comparison_table(write_compare_job(tmp_path))
    labels = dict(zip(data["variant"], data["label"], strict=False))
    assert labels["vllm_baseline"] == "vllm_baseline"
    assert labels["distserve"].startswith("distserve\nINVALID: host interference")  # before the issue lag
    assert labels["mooncake"].startswith("mooncake\nINVALID: overloaded: offered 4.0")
    assert variant_label("x", False, "p99 issue lag 40 ms; point 1: overloaded: offered 9 req/s").startswith(
        "x\nINVALID: point 1: overloaded")


def test_report_shows_outside_cpu_and_steal_per_variant(tmp_path: Path) -> None:
    write_compare_job(tmp_path)
    out, _ = write_report([tmp_path / "results"], tmp_path / "REPORT.md")
    lines = out.read_text().splitlines()
    header = next(line for line in lines if line.startswith("  | Variant |"))
    assert header.endswith("| outside CPU (cores) | steal | Validity |")
    row = {line.split("|")[1].strip(): line for line in lines if line.startswith("  | ") and "Variant" not in line}
    assert "| 0.02 | 0% | valid |" in row["vllm_baseline"]
    assert "| 0.45 | 1% | **INVALID**: p99 issue lag" in row["distserve"] and HOST_REASON in row["distserve"]
    assert "| 0.01 | 8% | **INVALID**: overloaded: offered 4.0 req/s" in row["mooncake"]
