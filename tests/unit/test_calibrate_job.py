"""``job=calibrate`` without a server: what it refuses before anything starts, the profile it builds from
samples (read back by the simulator's loader, with the request overheads separated from the engine's
iterations), and the calibration figure."""

from __future__ import annotations

import json
import math

import pytest

from figures.calibration import plot_calibration_fit
from harness.calibrate import job as calibrate_job
from harness.calibrate.job import (
    VllmMissing,
    build_profile,
    check_can_calibrate,
    disaggregated_overhead_ms,
    fitted_values,
    token_budget,
)
from systems.sim.perf.fitting import fit_prefill_with_overhead
from systems.sim.perf.profile_file import host_cpu_model, profile_from_dict
from vocab.errors import ConfigError

# the "engine" these samples come from: overhead 6 ms per request, prefill 2 + 0.01/token (+1e-6/token^2) ms,
# decode 2 + 1e-5/context token + 0.05/sequence ms, transfer 0.5 ms + 1 GB/s; plus a 4 ms P/D-path extra
OVERHEAD, PD_EXTRA = 6.0, 4.0


def prefill_ms(n_tokens: float, n_seqs: int = 1) -> float:
    return 2.0 + 0.01 * n_seqs * n_tokens + 1e-6 * n_seqs * n_tokens ** 2


def samples() -> list[dict]:
    out = []
    for n in (64, 256, 512, 1024, 2048):
        out.append({"phase": "prefill", "route": "router", "span": "send", "cell_batch": 1.0, "batch_size": 1.0,
                    "prompt_tokens": float(n), "sum_tokens": float(n), "sum_sq_tokens": float(n * n), "n_seqs": 1.0,
                    "time_ms": OVERHEAD + prefill_ms(n)})
        out.append({"phase": "prefill", "route": "direct", "span": "send", "cell_batch": 1.0, "batch_size": 1.0,
                    "prompt_tokens": float(n), "sum_tokens": float(n), "sum_sq_tokens": float(n * n), "n_seqs": 1.0,
                    "time_ms": OVERHEAD - 1.0 + prefill_ms(n)})
        if n <= 512:
            out.append({"phase": "prefill", "route": "router", "span": "iteration", "cell_batch": 4.0,
                        "batch_size": 3.0, "prompt_tokens": float(n), "sum_tokens": 3.0 * n, "sum_sq_tokens": 3.0 * n * n,
                        "n_seqs": 3.0, "time_ms": prefill_ms(n, 3)})
    for ctx in (128, 1024):
        for b in (1, 4, 16):
            out.append({"phase": "decode", "route": "router", "batch_size": float(b), "context_tokens": float(ctx),
                        "sum_context": b * (ctx + 16.0), "time_ms": 2.0 + 1e-5 * b * (ctx + 16) + 0.05 * b})
    for n in (256, 1024, 2048):
        n_bytes = n * 1024.0
        transfer_ms = 0.5 + n_bytes / 1e6
        ttft = prefill_ms(n) + transfer_ms + 2.0 + 1e-5 * n + 0.05 + PD_EXTRA
        out.append({"phase": "kv_transfer", "prompt_tokens": float(n), "bytes": n_bytes, "time_s": transfer_ms / 1e3,
                    "ttft_ms": ttft})
    return out


@pytest.fixture
def cal_cfg(compose):
    return compose(["experiment=calibrate_cpu"])


def test_the_prefill_fit_separates_the_request_overhead_from_the_iterations() -> None:
    prefill = [s for s in samples() if s["phase"] == "prefill" and s["route"] == "router"]
    fit, overhead = fit_prefill_with_overhead(prefill)
    assert overhead == pytest.approx(OVERHEAD, rel=1e-6)
    assert fit.coefficients["a"] == pytest.approx(2.0, rel=1e-6) and fit.coefficients["b"] == pytest.approx(0.01)
    only_sends = [s for s in prefill if s["span"] == "send"]
    fit, overhead = fit_prefill_with_overhead(only_sends)  # no iteration samples: one constant holds both
    assert overhead == 0.0 and fit.coefficients["a"] == pytest.approx(OVERHEAD + 2.0, rel=1e-6)


@pytest.mark.integration
def test_profile_from_samples_is_read_back_by_the_simulator(cal_cfg, tmp_path) -> None:
    profile = build_profile(cal_cfg, samples(), cores="0")
    assert profile["request_overhead_ms"]["colocated"] == pytest.approx(OVERHEAD, rel=1e-6)
    assert profile["request_overhead_ms"]["disaggregated"] == pytest.approx(PD_EXTRA, abs=0.05)
    assert profile["kv_transfer"]["bandwidth_bytes_per_s"] == pytest.approx(1e9, rel=1e-3)
    assert profile["provenance"]["cpu_model"] == host_cpu_model()
    assert profile["provenance"]["model"]["name"] == "tiny_llama" and profile["provenance"]["model"]["architecture_hash"]
    assert profile["provenance"]["router_hop_ms"] == pytest.approx(1.0)
    assert profile["prefill"]["prompt_tokens"] == [64, 2048] and profile["decode"]["context_tokens"] == [128, 1056]
    loaded = profile_from_dict(json.loads(json.dumps(profile)), where="test")
    assert loaded.overhead_s(disaggregated=False) == pytest.approx(OVERHEAD / 1e3, rel=1e-6)
    table = fitted_values(profile, samples())
    routed = table[(table["phase"] != "prefill") | (table["route"] == "router")]
    assert routed["rel_error"].abs().max() < 0.02
    path = tmp_path / "samples.csv"
    table.to_csv(path, index=False)
    written = plot_calibration_fit(tmp_path)
    assert {p.name for p in written} == {"calibration_fit.png", "calibration_fit.csv"}


@pytest.mark.integration
def test_pd_overhead_is_never_negative(cal_cfg) -> None:
    profile = build_profile(cal_cfg, samples(), cores="0")
    fast = [{**s, "ttft_ms": 0.1} for s in samples() if s["phase"] == "kv_transfer"]
    assert disaggregated_overhead_ms(profile, fast) == 0.0


def test_calibration_refuses_what_it_cannot_profile(compose, monkeypatch) -> None:
    with pytest.raises(ConfigError, match="engine=vllm"):
        check_can_calibrate(compose(["job=calibrate", "engine=sim", "system.colocated_instances=1"]))
    with pytest.raises(ConfigError, match="one colocated instance"):
        check_can_calibrate(compose(["experiment=calibrate_cpu", "system.colocated_instances=2"]))
    real_find_spec = calibrate_job.importlib.util.find_spec
    monkeypatch.setattr(calibrate_job.importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    with pytest.raises(VllmMissing, match="vllm is not installed"):
        check_can_calibrate(compose(["experiment=calibrate_cpu"]))


def test_token_budget_follows_the_engine_arguments(compose) -> None:
    assert token_budget(compose(["experiment=calibrate_cpu"])) == 2048
    assert token_budget(compose(["experiment=calibrate_cpu", "engine.extra_args=['--max-num-batched-tokens=4096']"])) == 4096
    with pytest.raises(ConfigError, match="needs an integer"):
        token_budget(compose(["experiment=calibrate_cpu", "engine.extra_args=['--max-num-batched-tokens','lots']"]))


def test_calibrate_settings_are_checked(compose) -> None:
    for bad, match in ((["calibrate.decode_tokens=2"], "decode_tokens"), (["calibrate.repeats=0"], "repeats"),
                       (["calibrate.prompt_lengths=[0]"], "prompt_lengths"),
                       (["calibrate.prompt_lengths=[64,128,64]"], "at least 3 different lengths"),
                       (["calibrate.decode_batches=[1]", "calibrate.decode_contexts=[128,512,1024]"], "at least 4 cells"),
                       (["calibrate.repeats=1", "calibrate.transfer_lengths=[256,512]"], r"2 length\(s\) x 1 repeat")):
        with pytest.raises(ConfigError, match=match):
            compose(["experiment=calibrate_cpu", *bad])
    assert not math.isnan(token_budget(compose(["experiment=calibrate_cpu"])))
