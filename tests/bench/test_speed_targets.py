"""Speed targets that used to be wall-clock assertions in the default tests (flaky on a busy 2-core
machine): run by hand with ``.venv/bin/python -m pytest -m bench tests/bench -s``. Each prints its figures
(medians over repeats) next to its target and fails when the target is missed on this machine."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import pytest

from harness.loadgen import LoadGenOptions, TargetConfig, run_load
from harness.loadgen.mock_process import mock_server_process
from systems.hardware_catalog import CONF_DIR, load_hardware
from systems.sim.perf.base import InstanceShape
from systems.sim.perf.roofline import RooflineModel
from vocab.records import RequestSpec
from workloads.arrivals import ArrivalSchedule
from workloads.datadir import resolve_trace_path
from workloads.mooncake_trace import load_mooncake_trace
from workloads.tokens import VocabSpec, prompt_token_ids

pytestmark = pytest.mark.bench


def median_s(fn: Callable[[], object], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def report(name: str, value: float, target: float, unit: str) -> None:
    print(f"{name}: median {value:.4g} {unit} (target < {target:g} {unit})")
    assert value < target, name


def test_roofline_decode_step_is_cheap():
    from benchmarks.perf_model_accuracy import load_model

    roof = RooflineModel(load_model("llama3_8b", CONF_DIR), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 1))
    n = 20000

    def calls() -> None:
        for i in range(n):
            roof.decode_step_time_s(8, 4000.0 + i)

    report("roofline decode_step_time_s per call", median_s(calls) / n * 1e6, 20.0, "us")


def test_the_conversation_trace_loads_fast():
    path = resolve_trace_path("mooncake_fast25/conversation_trace.jsonl")
    report("conversation trace load", median_s(lambda: load_mooncake_trace(path), repeats=3), 1.0, "s")


def test_a_long_prompt_is_built_vectorised():
    vocab = VocabSpec(vocab_size=32000, special_token_ids=(0, 1, 2))
    spec = RequestSpec(request_id=0, arrival_s=0.0, input_length=128_000, output_length=1, hash_ids=tuple(range(250)),
                       block_size=512)
    report("128k-token prompt", median_s(lambda: prompt_token_ids(spec, vocab)), 0.5, "s")


def test_load_generator_issue_lag_and_timing_accuracy():
    ttft_ms, itl_ms, n_out, n = 20.0, 5.0, 6, 120
    rng = np.random.default_rng(7)
    times = np.concatenate([[0.0], np.cumsum(rng.exponential(1 / 60.0, n - 1))])
    specs = [RequestSpec(request_id=i, arrival_s=float(t), input_length=2, output_length=n_out)
             for i, t in enumerate(times)]
    schedule = ArrivalSchedule("open", None, 60.0, float(times[-1]))
    with mock_server_process(ttft_ms=ttft_ms, itl_ms=itl_ms) as server:
        result = run_load(specs, schedule, [[5, 6]] * n, TargetConfig(server.url, "m"), LoadGenOptions(progress=False))
    lag = np.array([(r.sent_s - r.arrival_s) * 1e3 for r in result.records])
    ttft = np.array([(r.first_token_s - r.arrival_s) * 1e3 for r in result.records])
    tpot = np.array([(r.finish_s - r.first_token_s) * 1e3 / (r.n_out - 1) for r in result.records])
    print(f"issue lag median {np.median(lag):.3f} ms, p99 {np.percentile(lag, 99):.3f} ms; TTFT median error "
          f"{np.median(ttft) - ttft_ms:+.3f} ms; TPOT median error {np.median(tpot) - itl_ms:+.3f} ms")
    report("issue lag", float(np.median(lag)), 2.0, "ms")
    report("p99 issue lag", float(np.percentile(lag, 99)), 10.0, "ms")
    report("|TTFT error|", abs(float(np.median(ttft)) - ttft_ms), 4.0, "ms")
    report("|TPOT error|", abs(float(np.median(tpot)) - itl_ms), 1.0, "ms")
