"""Validity surfaced everywhere, without starting servers: a bad workload fails before any deployment is
brought up (serve and compare); a comparison's summary carries every variant's validity; the comparison
figure and REPORT.md mark an invalid variant with its reasons."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from figures.disagg_compare import comparison_table, plot_disagg_comparison, variant_label
from figures.report import write_report
from harness.results import RunFolder
from harness.serve_job import run_serve
from harness.studies.real_compare import _row, compare_validity, failed_validity, run_compare
from harness.studies.variants import compose_variant
from systems.contract import EngineResult
from vocab.records import RequestRecord, RequestStatus, RunSummary
from vocab.result_files import STUDY_FILE


class ScriptedDeployment:
    """Serves every request in 50 ms TTFT and 10 ms per further token, sent ``send_lag_s`` late."""

    context_limit = 4096
    kv_block_size = 16

    def __init__(self, send_lag_s: float = 0.0) -> None:
        self.send_lag_s = send_lag_s

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run_point(self, requests, folder) -> EngineResult:
        records = []
        for spec in requests.specs:
            chunks = tuple(spec.arrival_s + 0.05 + 0.01 * k for k in range(spec.output_length))
            records.append(RequestRecord(
                request_id=spec.request_id, status=RequestStatus.OK, arrival_s=spec.arrival_s,
                sent_s=spec.arrival_s + self.send_lag_s, first_token_s=chunks[0], finish_s=chunks[-1],
                input_length=spec.input_length, output_length=spec.output_length, n_out=spec.output_length,
                chunk_times_s=chunks, instance="fake0"))
        return EngineResult(records=tuple(records), info={})

    def check_health(self) -> None:
        pass


class RecordingFactory:
    """A deployment factory that records every bring-up; distserve deployments send 0.5 s late."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, cfg, folder) -> ScriptedDeployment:
        self.calls.append(cfg.system.name)
        return ScriptedDeployment(send_lag_s=0.5 if cfg.system.name == "distserve" else 0.0)


SMALL = ["workload.num_groups=2", "workload.prompts_per_group=5", "workload.shared_prefix_len=64",
         "workload.question_len=16", "workload.output_len=8", "validity.min_requests=1",
         "validity.min_duration_s=0", "validity.max_ci_relative_width=null", "sweep.saturation_fractions=[]"]


def bad_trace(tmp_path: Path) -> Path:
    trace = tmp_path / "bad_trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n{not json\n',
                     encoding="utf-8")
    return trace


def test_bad_workload_fails_before_the_deployment_is_brought_up(compose, tmp_path: Path) -> None:
    cfg = compose(["workload=mooncake_conversation", f"workload.file={bad_trace(tmp_path)}"])
    factory = RecordingFactory()
    with pytest.raises(Exception, match="invalid JSON"):
        run_serve(cfg, RunFolder(tmp_path / "job"), factory)
    assert factory.calls == []  # no server was started for a workload that cannot be built


def test_good_workload_brings_the_deployment_up_once(compose, tmp_path: Path) -> None:
    factory = RecordingFactory()
    run_serve(compose(["experiment=disagg_cpu", "job=serve", *SMALL]), RunFolder(tmp_path), factory)
    assert factory.calls == ["vllm_baseline"]


def compare_cfg(compose, variants: dict[str, list[str]]):
    cfg = compose(["experiment=disagg_cpu", *SMALL])
    cfg.study.variants = {label: ["experiment=disagg_cpu", *SMALL, *overrides] for label, overrides in variants.items()}
    return cfg


VARIANTS = {
    "vllm_baseline": ["system=vllm_baseline", "system.colocated_instances=2"],
    "distserve": ["system=distserve", "system.prefill_instances=1", "system.decode_instances=1"],
}


def test_compare_with_a_bad_variant_workload_starts_no_server(compose, tmp_path: Path) -> None:
    cfg = compare_cfg(compose, VARIANTS)
    cfg.study.variants["broken"] = ["workload=mooncake_conversation", f"workload.file={bad_trace(tmp_path)}"]
    factory = RecordingFactory()
    with pytest.raises(Exception, match="invalid JSON"):
        run_compare(cfg, RunFolder(tmp_path / "job"), factory)
    assert factory.calls == []  # the broken third variant stopped the job before the first bring-up


@pytest.fixture
def compare_job(compose, tmp_path: Path) -> tuple[Path, object]:
    """A finished ``job=compare`` folder of disagg_cpu (fake deployments): distserve sent 0.5 s late."""
    folder = RunFolder(tmp_path / "results" / "disagg_cpu" / "2026-12-01_00-00-00")
    folder.path.mkdir(parents=True, exist_ok=True)
    factory = RecordingFactory()
    result = run_compare(compare_cfg(compose, VARIANTS), folder, factory)
    assert factory.calls == ["vllm_baseline", "distserve"]
    folder.write_summary(RunSummary(status="ok", experiment="disagg_cpu", job=folder.path.name, kind="compare",
                                    finished_at="2026-12-01T00:10:00+00:00", metrics=result.metrics,
                                    validity=result.validity, files=result.files))
    return folder.path, result


def test_compare_summary_holds_every_variants_validity(compare_job) -> None:
    path, result = compare_job
    validity = json.loads((path / "summary.json").read_text())["validity"]
    assert validity["valid"] is False
    assert validity["variants"]["vllm_baseline"]["valid"] is True
    assert validity["variants"]["distserve"]["valid"] is False
    assert validity["reasons"] and all(r.startswith("distserve: ") for r in validity["reasons"])
    assert any("p99 issue lag 500.000 ms" in r for r in validity["reasons"])
    study = pd.read_csv(path / STUDY_FILE).set_index("variant")
    assert study.loc["vllm_baseline", "valid"] == True  # noqa: E712 (numpy bool)
    assert study.loc["distserve", "valid"] == False  # noqa: E712
    assert "p99 issue lag" in study.loc["distserve", "validity_reasons"]


def test_compare_validity_of_failed_and_valid_variants() -> None:
    ok = {"valid": True, "reasons": []}
    assert compare_validity({"a": ok, "b": ok})["valid"] is True
    combined = compare_validity({"a": ok, "b": failed_validity("DeploymentError: boom")})
    assert combined["valid"] is False and combined["reasons"] == ["b: variant failed: DeploymentError: boom"]


def test_study_row_carries_validity() -> None:
    vcfg = compose_variant(["experiment=disagg_cpu", "job=serve"])
    swept = {"valid": False, "points": [{"valid": True, "reasons": []},
                                        {"valid": False, "reasons": ["p99 issue lag 16.000 ms exceeds 10 ms"]}]}
    row = _row("vllm_baseline", vcfg, {}, pd.DataFrame({"extra": []}), swept)
    assert row["valid"] is False and row["validity_reasons"] == "point 1: p99 issue lag 16.000 ms exceeds 10 ms"
    row = _row("vllm_baseline", vcfg, {}, pd.DataFrame({"extra": []}), {"valid": True, "reasons": []})
    assert row["valid"] is True and row["validity_reasons"] == ""


def test_figure_marks_the_invalid_variant(compare_job) -> None:
    path, _ = compare_job
    written = plot_disagg_comparison(path)
    data = pd.read_csv(next(p for p in written if p.suffix == ".csv"))
    late = data[data["variant"] == "distserve"]
    assert (~late["valid"]).all() and late["label"].str.contains("INVALID: p99 issue lag").all()
    assert late["validity_reasons"].str.contains("p99 issue lag 500.000 ms").all()
    good = data[data["variant"] == "vllm_baseline"]
    assert good["valid"].all() and (good["label"] == "vllm_baseline").all()
    assert not late["value"].isna().all()  # an invalid variant is still drawn (hatched), unlike a failed one


def test_figure_of_an_old_study_csv_without_validity(tmp_path: Path) -> None:
    pd.DataFrame([{"variant": "a", "status": "ok", "median_ttft_ms": 1.0}]).to_csv(tmp_path / STUDY_FILE, index=False)
    assert comparison_table(tmp_path)["valid"].all()
    assert variant_label("a", False, "x" * 100).startswith("a\nINVALID: xxx") and len(variant_label("a", False, "x" * 100)) < 50


def test_report_marks_the_invalid_comparison_variant(compare_job, tmp_path: Path) -> None:
    path, _ = compare_job
    out, _ = write_report([path.parents[1]], tmp_path / "REPORT.md")
    text = out.read_text()
    job_line = next(line for line in text.splitlines() if line.startswith("- `disagg_cpu` ("))
    assert "**INVALID**: distserve: p99 issue lag 500.000 ms" in job_line
    rows = [line for line in text.splitlines() if line.startswith("  | ")]
    distserve = next(r for r in rows if r.startswith("  | distserve |"))
    baseline = next(r for r in rows if r.startswith("  | vllm_baseline |"))
    assert "**INVALID**: p99 issue lag 500.000 ms" in distserve
    assert baseline.endswith("| valid |")
    assert not list(tmp_path.glob(".REPORT.md.*"))  # written through a temporary file, nothing left behind


def test_report_marks_claims_computed_from_an_invalid_job(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "mooncake_scheduling" / "2026-01-01_00-00-00"
    folder.mkdir(parents=True)
    summary = {"status": "ok", "experiment": "mooncake_scheduling", "job": folder.name, "kind": "sim_study",
               "finished_at": "2026-01-01T00:10:00+00:00", "git_sha": "abc",
               "validity": {"valid": False, "reasons": ["random: 5 of 100 requests unfinished (5.00%)"]}}
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "config.yaml").write_text("experiment_name: mooncake_scheduling\n")
    pd.DataFrame({"variant": ["random", "load_balancing", "local_cache_aware", "global_cache_aware"], "point": 0,
                  "mean_ttft_ms": [4000.0, 3000.0, 2000.0, 1000.0],
                  "sim_prefix_hit_rate_tokens": [0.1, 0.1, 0.2, 0.3]}).to_csv(folder / "study.csv", index=False)
    out, rows = write_report([tmp_path / "results"], tmp_path / "REPORT.md")
    text = out.read_text()
    claim_rows = [line for line in text.splitlines() if line.startswith("| [Mooncake")]
    marked = [r for r in claim_rows if "(INVALID job)" in r]
    assert marked, "a claim computed from the invalid job is not marked in the summary"
    section = text[text.index('<a id="mooncake_scheduling"></a>'):text.index('<a id="mooncake_global_vs_local"></a>')]
    assert "**INVALID job**: random: 5 of 100 requests unfinished" in section  # and in its section, with reasons
    assert "`mooncake_scheduling` (`2026-01-01_00-00-00`): **INVALID**: random: 5 of 100" in text
