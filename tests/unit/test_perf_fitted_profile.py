"""The fitted performance profile (issue #12): the file (round trip, malformed files named by field), the
checks (CPU model, model identity, coverage, with the engine.profile_check override), the fitted model's
numbers, and ``engine=sim engine.perf_model=fitted`` through the Hydra config path, kv_link=profile included."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.results import RunFolder, load_records
from harness.serve_job import plan_serve, run_serve
from systems.config import ModelConfig
from systems.hardware_catalog import load_hardware
from systems.launch.tiny_model import architecture_hash, load_model_config
from systems.sim.links import LinkSpec
from systems.sim.perf.base import InstanceShape
from systems.sim.perf.fitted import FittedProfileModel, profile_link
from systems.sim.perf.fitting import fit_decode, fit_prefill, fit_transfer
from systems.sim.perf.profile_file import (
    PROFILE_FORMAT,
    DecodeFit,
    KVTransferFit,
    PerfProfile,
    PrefillFit,
    check_coverage,
    check_profile_matches,
    host_cpu_model,
    load_profile,
    save_profile,
)
from systems.sim.perf.registry import build_perf_model
from systems.sim.simulated_deployment import SimulatedDeployment
from tests.unit.test_perf_fitting import decode_samples, prefill_samples, transfer_samples
from vocab.errors import ConfigError
from vocab.result_files import POINTS_FILE

REPO = Path(__file__).resolve().parents[2]
TINY = load_model_config(REPO / "conf" / "model" / "tiny_llama.yaml")
PREFILL = {"a": 9.1, "b": 0.018, "c": 1e-5}
DECODE = {"a": 2.8, "b": 1e-5, "c": 0.1}
LATENCY_S, BANDWIDTH = 0.004, 1.2e9
WORKLOAD = ["engine=sim", "model=tiny_llama", "hardware=cpu_core", "engine.perf_model=fitted", "workload=shared_prefix",
            "workload.num_groups=2", "workload.prompts_per_group=5", "workload.shared_prefix_len=64",
            "workload.question_len=16", "workload.output_len=8", "workload.arrival.rate_rps=0.5"]


def make_profile(model: ModelConfig = TINY, cpu_model: str | None = None, prefill: dict | None = None,
                 kv_transfer: bool = True, prompt_tokens: tuple[int, int] = (64, 2048),
                 context_tokens: tuple[int, int] = (128, 2100)) -> PerfProfile:
    """A profile fitted to noiseless synthetic samples, as a calibration on this host would write it."""
    pre = fit_prefill(prefill_samples(**(prefill or PREFILL)))
    dec = fit_decode(decode_samples(**DECODE))
    tr = fit_transfer(transfer_samples(LATENCY_S, BANDWIDTH)) if kv_transfer else None
    provenance = {"git_sha": "0" * 40, "git_dirty": False, "vllm_version": "0.32.0",
                  "cpu_model": host_cpu_model() if cpu_model is None else cpu_model, "hostname": "test",
                  "cores": "0", "hardware": "cpu_core",
                  "model": {**dataclasses.asdict(model), "architecture_hash": architecture_hash(model)},
                  "engine": {"max_num_batched_tokens": 2048, "max_num_seqs": 64, "kv_block_size": 128,
                             "cpu_kvcache_space_gib": 1}}
    return PerfProfile("2026-12-01T19:00:00Z", provenance, PrefillFit.from_fit(pre, prompt_tokens, (1, 4)),
                       DecodeFit.from_fit(dec, (1, 32), context_tokens),
                       None if tr is None else KVTransferFit.from_fit(tr, (1e6, 2e7)), 30000,
                       tuple(prefill_samples(**PREFILL)[:2]))


def write(tmp_path: Path, profile: PerfProfile, name: str = "profile.json") -> Path:
    path = tmp_path / name
    save_profile(profile, path)
    return path


# ----------------------------------------------------------------------------- the file

def test_a_saved_profile_loads_back_equal(tmp_path) -> None:
    profile = make_profile()
    path = write(tmp_path, profile)
    loaded = load_profile(path)
    assert loaded == profile and loaded.path == str(path)
    assert loaded.prefill.prompt_tokens == (64, 2048) and loaded.kv_transfer.bandwidth_bytes_per_s == pytest.approx(BANDWIDTH)
    raw = json.loads(path.read_text())
    assert raw["format"] == PROFILE_FORMAT and raw["prefill"]["form"] == "a + b*sum_tokens + c*sum_sq_tokens"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.json"]  # no temporary file left behind


def test_a_profile_without_kv_transfer_round_trips_as_null(tmp_path) -> None:
    path = write(tmp_path, make_profile(kv_transfer=False))
    assert json.loads(path.read_text())["kv_transfer"] is None and load_profile(path).kv_transfer is None


def test_a_transfer_fit_with_no_per_byte_cost_is_an_infinite_bandwidth(tmp_path) -> None:
    # transfers that take the same time whatever their size (loopback: the latency dominates)
    flat = fit_transfer([{"bytes": x, "time_s": 0.004 * (1 + 0.01 * (-1) ** i)} for i, x in enumerate((1e6, 2e6, 4e6, 8e6))])
    assert flat.coefficients["s_per_byte"] == 0.0
    profile = dataclasses.replace(make_profile(), kv_transfer=KVTransferFit.from_fit(flat, (1e6, 8e6)))
    path = write(tmp_path, profile)
    assert '"bandwidth_bytes_per_s": Infinity' in path.read_text()
    link = profile_link(load_profile(path))
    assert link.transfer_time_s(8e6) == pytest.approx(flat.coefficients["latency_s"])


def test_numpy_numbers_are_written_as_plain_json(tmp_path) -> None:
    profile = dataclasses.replace(make_profile(), kv_capacity_tokens=np.int64(30000),
                                  samples=({"phase": "prefill", "sum_tokens": np.int64(512), "time_ms": np.float32(2.5)},))
    loaded = load_profile(write(tmp_path, profile))
    assert loaded.kv_capacity_tokens == 30000 and loaded.samples[0]["sum_tokens"] == 512


def _mutated(tmp_path: Path, mutate) -> Path:
    raw = make_profile().to_dict()
    mutate(raw)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(("mutate", "field", "needle"), [
    (lambda r: r["prefill"]["coefficients_ms"].pop("b"), "prefill.coefficients_ms.b", "it is missing"),
    (lambda r: r["decode"].update(context_tokens=[128]), "decode.context_tokens", "got [128]"),
    (lambda r: r["decode"]["coefficients_ms"].update(c=-0.1), "decode.coefficients_ms.c", "got -0.1"),
    (lambda r: r.update(kv_capacity_tokens=0), "kv_capacity_tokens", "an integer > 0"),
    (lambda r: r["provenance"].pop("cpu_model"), "provenance.cpu_model", "it is missing"),
    (lambda r: r["provenance"]["model"].update(name=7), "provenance.model.name", "a string"),
    (lambda r: r["kv_transfer"].update(bandwidth_bytes_per_s=0), "kv_transfer.bandwidth_bytes_per_s", "> 0"),
    (lambda r: r["prefill"].update(form="a + b*n"), "prefill.form", "'a + b*sum_tokens + c*sum_sq_tokens'"),
    (lambda r: r["samples"].append({"phase": "warmup"}), "samples[2].phase", "one of prefill, decode, kv_transfer"),
    (lambda r: r.pop("format"), "format", "it is missing"),
])
def test_a_malformed_file_is_refused_naming_the_file_and_the_field(tmp_path, mutate, field, needle) -> None:
    path = _mutated(tmp_path, mutate)
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    message = str(info.value)
    assert message.startswith(f"profile {path}: field '{field}'") and needle in message, message


def test_an_unknown_format_is_refused(tmp_path) -> None:
    path = _mutated(tmp_path, lambda r: r.update(format="disagg-bench/perf-profile/2"))
    with pytest.raises(ConfigError, match=r"field 'format': this version reads 'disagg-bench/perf-profile/1', "
                                          r"got 'disagg-bench/perf-profile/2'"):
        load_profile(path)


def test_a_missing_or_unparsable_file_names_the_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match=rf"profile {tmp_path / 'none.json'}: no such file"):
        load_profile(tmp_path / "none.json")
    (tmp_path / "broken.json").write_text('{"format": ')
    with pytest.raises(ConfigError, match=r"broken.json: not valid JSON \(line 1, column 12"):
        load_profile(tmp_path / "broken.json")


def test_saving_refuses_what_loading_would_refuse_and_writes_nothing(tmp_path) -> None:
    bad = dataclasses.replace(make_profile(), prefill=dataclasses.replace(make_profile().prefill, prompt_tokens=(2048, 64)))
    with pytest.raises(ConfigError, match=r"field 'prefill.prompt_tokens'"):
        save_profile(bad, tmp_path / "p.json")
    nan = dataclasses.replace(make_profile(), decode=dataclasses.replace(make_profile().decode, rel_rmse=math.nan))
    with pytest.raises(ConfigError, match=r"field 'decode.rel_rmse': expected a finite number >= 0, got nan"):
        save_profile(nan, tmp_path / "p.json")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- the checks

def test_host_cpu_model_reads_proc_cpuinfo(tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                       "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    assert host_cpu_model(cpuinfo) == "Intel(R) Xeon(R) Platinum 8480+"
    assert host_cpu_model(tmp_path / "missing") == ""
    (tmp_path / "arm").write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")
    assert host_cpu_model(tmp_path / "arm") == ""


def test_a_matching_profile_passes() -> None:
    assert check_profile_matches(make_profile(cpu_model="CPU A"), TINY, "CPU A") == []


def test_another_cpu_is_refused_naming_both_sides_and_the_override(tmp_path) -> None:
    profile = load_profile(write(tmp_path, make_profile(cpu_model="AMD EPYC 9654")))
    with pytest.raises(ConfigError) as info:
        check_profile_matches(profile, TINY, "Intel(R) Xeon(R) Platinum 8480+")
    message = str(info.value)
    assert message.startswith(f"engine.profile: profile {profile.path} was measured on CPU 'AMD EPYC 9654'")
    assert "this run has CPU 'Intel(R) Xeon(R) Platinum 8480+'" in message
    assert "engine.profile_check=false" in message and "experiment=calibrate_cpu" in message


def test_another_model_is_refused_naming_both_sides() -> None:
    small = dataclasses.replace(TINY, name="small_llama", num_layers=4)
    ours, theirs = architecture_hash(small), architecture_hash(TINY)
    with pytest.raises(ConfigError) as info:
        check_profile_matches(make_profile(cpu_model="CPU A"), small, "CPU A")
    message = str(info.value)
    assert f"with model tiny_llama (arch {theirs})" in message and f"model small_llama (arch {ours})" in message
    assert "engine.profile_check=false" in message


def test_same_name_another_architecture_is_refused() -> None:
    wider = dataclasses.replace(TINY, hidden_size=512)
    with pytest.raises(ConfigError, match=rf"tiny_llama \(arch {architecture_hash(TINY)}\); this run has CPU 'CPU A' "
                                          rf"and model tiny_llama \(arch {architecture_hash(wider)}\)"):
        check_profile_matches(make_profile(cpu_model="CPU A"), wider, "CPU A")


def test_a_real_model_is_matched_by_name_only() -> None:
    real = dataclasses.replace(TINY, name="llama3_8b", synthetic=False, hidden_size=4096)
    profile = make_profile(model=real, cpu_model="CPU A")
    assert check_profile_matches(profile, dataclasses.replace(real, num_layers=7), "CPU A") == []
    with pytest.raises(ConfigError, match=r"with model llama3_8b; this run has CPU 'CPU A' and model tiny_llama \(arch"):
        check_profile_matches(profile, TINY, "CPU A")


def test_profile_check_false_accepts_a_mismatch_and_logs_it(caplog) -> None:
    small = dataclasses.replace(TINY, name="small_llama")
    with caplog.at_level(logging.WARNING, logger="systems.sim.perf.profile_file"):
        found = check_profile_matches(make_profile(cpu_model="CPU A"), small, "CPU B", check=False)
    assert len(found) == 2 and "CPU B" in found[0] and "small_llama" in found[1]
    assert "profile_check=false" in caplog.text and "'CPU A'" in caplog.text and "small_llama" in caplog.text


def test_coverage_names_the_missing_range() -> None:
    profile = make_profile()
    check_coverage(profile, 2048, 2100)
    with pytest.raises(ConfigError, match=r"covers prompts of 64\.\.2048 tokens; the workload needs prompts up to "
                                          r"3000 tokens: calibrate with longer calibrate\.prompt_lengths"):
        check_coverage(profile, 3000, 2100)
    with pytest.raises(ConfigError, match=r"covers decode contexts of 128\.\.2100 tokens; the workload x needs "
                                          r"contexts up to 2200 tokens \(prompt \+ output\): calibrate with longer "
                                          r"calibrate\.decode_contexts"):
        check_coverage(profile, 100, 2200, where="workload x")


# ----------------------------------------------------------------------------- the model

def fitted(profile: PerfProfile | str | Path, **kwargs) -> FittedProfileModel:
    hw = load_hardware("cpu_core")
    return FittedProfileModel(TINY, hw, InstanceShape("cpu_core"), profile=profile, **kwargs)


def test_the_fitted_model_follows_the_formula(tmp_path) -> None:
    profile = make_profile()
    model = fitted(write(tmp_path, profile))
    a, b, c = (profile.prefill.coefficients_ms[k] for k in "abc")
    assert model.prefill_time_s(512, 3 * 512**2, 3) == pytest.approx((a + b * 512 + c * 3 * 512**2) / 1e3, rel=1e-12)
    assert model.prefill_time_s(0, 0) == 0.0
    da, db, dc = (profile.decode.coefficients_ms[k] for k in "abc")
    assert model.decode_step_time_s(4, 1000) == pytest.approx((da + db * 1000 + dc * 4) / 1e3, rel=1e-12)
    bs, ctx = np.array([1, 4, 32]), np.array([100.0, 4000.0, 64000.0])
    want = (da + db * ctx + dc * bs) / 1e3
    np.testing.assert_allclose(model.decode_step_time_s(bs, ctx), want, rtol=1e-12)
    np.testing.assert_allclose(model.decode_step_time_s(4, ctx), (da + db * ctx + dc * 4) / 1e3, rtol=1e-12)
    assert model.kv_capacity_tokens == 30000 and model.kv_bytes_per_token == TINY.kv_bytes_per_token
    described = model.describe()
    assert described["profile"] == str(tmp_path / "profile.json") and described["model"] == "tiny_llama"
    assert described["cpu_model"] == host_cpu_model()
    assert described["prefill_rel_rmse"] == profile.prefill.rel_rmse and "decode_rel_rmse" in described


def test_the_fitted_link_is_the_profile_transfer() -> None:
    link = fitted(make_profile()).kv_link()
    assert isinstance(link, LinkSpec) and link.efficiency == 1.0
    assert link.bandwidth_gbps == pytest.approx(BANDWIDTH / 1e9)
    assert link.transfer_time_s(4e6) == pytest.approx(LATENCY_S + 4e6 / BANDWIDTH, rel=1e-9)
    assert fitted(make_profile(kv_transfer=False)).kv_link() is None


def test_the_model_checks_the_profile_unless_told_not_to() -> None:
    other = make_profile(cpu_model="Another CPU")
    with pytest.raises(ConfigError, match="was measured on CPU 'Another CPU'"):
        fitted(other)
    assert fitted(other, profile_check=False).profile.cpu_model == "Another CPU"
    with pytest.raises(ValueError, match="tp=1, pp=1"):
        FittedProfileModel(TINY, load_hardware("cpu_core"), InstanceShape("cpu_core", tp=2), profile=make_profile())


def test_the_registry_builds_it_by_name_and_checks_its_parameters(tmp_path) -> None:
    path = write(tmp_path, make_profile())
    hw = load_hardware("cpu_core")
    model = build_perf_model("fitted", TINY, hw, InstanceShape("cpu_core"), profile=str(path), profile_check=True)
    assert isinstance(model, FittedProfileModel) and model.profile.path == str(path)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) overlap; it accepts profile, profile_check"):
        build_perf_model("fitted", TINY, hw, InstanceShape("cpu_core"), profile=str(path), overlap=1.0)
    with pytest.raises(ValueError, match="needs engine.profile"):
        build_perf_model("fitted", TINY, hw, InstanceShape("cpu_core"))


# ----------------------------------------------------------------------------- through the config

def test_the_config_pairs_profile_with_perf_model_fitted(compose, tmp_path) -> None:
    with pytest.raises(ConfigError, match="engine.profile: engine.perf_model=fitted needs the path"):
        compose(["engine=sim", "engine.perf_model=fitted"])
    with pytest.raises(ConfigError, match="engine.profile: only engine.perf_model=fitted reads a profile"):
        compose(["engine=sim", f"engine.profile={tmp_path / 'p.json'}"])
    with pytest.raises(ConfigError, match="engine.kv_link: 'profile' is the fitted KV transfer"):
        compose(["engine=sim", "engine.kv_link=profile"])
    cfg = compose([*WORKLOAD, f"engine.profile={tmp_path / 'p.json'}", "engine.profile_check=false"])
    assert cfg.engine.profile == str(tmp_path / "p.json") and cfg.engine.profile_check is False


def _median_ttft(compose, tmp_path: Path, name: str, profile: PerfProfile, *overrides: str) -> tuple[float, list]:
    path = write(tmp_path, profile, f"{name}.json")
    folder = tmp_path / name
    folder.mkdir()
    run_serve(compose([*WORKLOAD, f"engine.profile={path}", *overrides]), RunFolder(folder))
    points = pd.read_csv(folder / POINTS_FILE)
    return float(points["median_ttft_ms"].iloc[0]), load_records(folder / "requests.parquet")


def test_a_simulation_with_a_fitted_profile_runs_and_its_ttft_follows_the_prefill_fit(compose, tmp_path) -> None:
    base, records = _median_ttft(compose, tmp_path, "base", make_profile())
    slower, _ = _median_ttft(compose, tmp_path, "slower", make_profile(prefill={**PREFILL, "b": 4 * PREFILL["b"]}))
    assert all(r.status.value == "ok" for r in records) and len(records) == 10
    assert slower > base
    first = min(records, key=lambda r: r.arrival_s)  # an empty cluster: TTFT is one prefill iteration
    n = first.input_length
    want_ms = PREFILL["a"] + PREFILL["b"] * n + PREFILL["c"] * n * n
    assert (first.first_token_s - first.arrival_s) * 1e3 == pytest.approx(want_ms, rel=1e-6)


def test_a_workload_longer_than_the_profile_is_refused_before_it_runs(compose, tmp_path) -> None:
    path = write(tmp_path, make_profile(prompt_tokens=(16, 64)))
    with pytest.raises(ConfigError, match=r"covers prompts of 16\.\.64 tokens; the workload shared_prefix needs "
                                          r"prompts up to 80 tokens"):
        run_serve(compose([*WORKLOAD, f"engine.profile={path}"]), RunFolder(tmp_path / "run"))
    assert not (tmp_path / "run" / POINTS_FILE).exists()


def test_a_profile_from_another_cpu_stops_the_cluster_unless_profile_check_is_false(compose, tmp_path) -> None:
    path = write(tmp_path, make_profile(cpu_model="Some Other CPU"))
    cfg = compose([*WORKLOAD, f"engine.profile={path}"])
    with pytest.raises(ConfigError, match=r"^engine.profile: profile .* was measured on CPU 'Some Other CPU'"):
        SimulatedDeployment(cfg)
    cluster = SimulatedDeployment(compose([*WORKLOAD, f"engine.profile={path}", "engine.profile_check=false"]))
    assert cluster.perf["colocated"].describe()["cpu_model"] == "Some Other CPU"


def test_a_malformed_profile_stops_the_cluster_naming_the_key_file_and_field(compose, tmp_path) -> None:
    path = _mutated(tmp_path, lambda r: r["decode"].pop("coefficients_ms"))
    with pytest.raises(ConfigError, match=rf"^engine.profile: profile {path}: field 'decode.coefficients_ms'"):
        SimulatedDeployment(compose([*WORKLOAD, f"engine.profile={path}"]))


def test_kv_link_profile_moves_kv_over_the_fitted_link(compose, tmp_path) -> None:
    profile = make_profile()
    path = write(tmp_path, profile)
    cfg = compose([*WORKLOAD, "system=distserve", f"engine.profile={path}", "engine.kv_link=profile"])
    cluster = SimulatedDeployment(cfg)
    link = profile_link(load_profile(path))
    assert cluster.setup().kv_link == link
    _, run = cluster.run(plan_serve(cfg).points[0][1].specs)
    first = min(run.records(), key=lambda r: r.arrival_s)
    moved = first.extra["kv_transfer_bytes"]
    assert moved == first.input_length * TINY.kv_bytes_per_token
    assert first.extra["kv_transfer_s"] == pytest.approx(LATENCY_S + moved / BANDWIDTH, rel=1e-6)


def test_kv_link_profile_needs_a_fitted_transfer(compose, tmp_path) -> None:
    path = write(tmp_path, make_profile(kv_transfer=False))
    cfg = compose([*WORKLOAD, "system=distserve", f"engine.profile={path}", "engine.kv_link=profile"])
    with pytest.raises(ConfigError, match=r"^engine.kv_link: profile .* has no fitted kv_transfer"):
        SimulatedDeployment(cfg)
    with pytest.raises(ConfigError, match=r"engine.kv_link: unknown link 'profil'.*; or profile"):
        SimulatedDeployment(compose([*WORKLOAD, "system=distserve", f"engine.profile={path}", "engine.kv_link=profil"]))


@pytest.mark.integration
def test_the_cli_exits_2_with_one_line_for_a_profile_from_another_cpu(tmp_path) -> None:
    path = write(tmp_path, make_profile(cpu_model="Some Other CPU"))
    proc = subprocess.run([sys.executable, "-m", "harness", *WORKLOAD, f"engine.profile={path}",
                           f"results_dir={tmp_path / 'results'}"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "was measured on CPU 'Some Other CPU'" in last and "engine.profile_check=false" in last, proc.stderr
