"""Colocated instances without chunked prefill follow vLLM v0's default scheduler (``_schedule_default``,
e.g. v0.5.1): an iteration that prefills runs no decodes, so a running request waits out the whole prefill
and then a decode step; with chunked prefill the prefill chunk and its decode share one iteration."""

from __future__ import annotations

import numpy as np
import pytest

from systems.config import HardwareConfig
from systems.policies import build_policy
from systems.sim.deployment_setup import DeploymentSetup, PoolSetup
from systems.sim.links import LinkSpec
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.simulation import Simulation
from vocab.records import RequestSpec, RequestStatus

HW = HardwareConfig(name="test", peak_tflops_bf16=1.0, mem_bandwidth_gbps=1.0, mem_gib=1.0)
SHAPE = InstanceShape("test")
LINK = LinkSpec("test", bandwidth_gbps=1.0, latency_s=0.0, efficiency=1.0)
PREFILL_S = 0.010 + 1e-4 * 1000  # b's whole prompt


class LinearPerf(PerfModel):
    """prefill = 10 ms + 1 ms per 10 tokens; decode step = 5 ms + 1 ms per sequence + 1 us per context token."""

    name = "linear"

    @property
    def kv_bytes_per_token(self) -> int:
        return 1000

    @property
    def kv_capacity_tokens(self) -> int:
        return 100_000

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        return 0.010 + 1e-4 * sum_tokens

    def decode_step_time_s(self, batch_size, sum_context):  # type: ignore[override]
        return 0.005 + 1e-3 * batch_size + 1e-6 * np.asarray(sum_context, dtype=float)


def _run(chunked: bool):
    setup = DeploymentSetup("vllm_baseline", (PoolSetup("colocated", 1, SHAPE, LinearPerf(), HW),), LINK,
                         router=build_policy("round_robin"), prefix_caching=False, chunked_prefill=chunked,
                         max_num_batched_tokens=131072)
    specs = [RequestSpec(request_id=0, arrival_s=0.0, input_length=1000, output_length=50),
             RequestSpec(request_id=1, arrival_s=0.2, input_length=1000, output_length=5)]
    run = Simulation(setup).run(specs)
    return [r.to_record() for r in run.requests]


def _gap_over(times: tuple[float, ...], t: float) -> tuple[float, float]:
    """The interval of ``times`` that contains ``t`` (its end may equal ``t``)."""
    arr = np.asarray(times)
    k = int(np.searchsorted(arr, t, side="left"))
    return float(arr[k - 1]), float(arr[k])


def test_unchunked_prefill_iterations_decode_nothing():
    a, b = _run(chunked=False)
    assert a.status == b.status == RequestStatus.OK and a.n_out == 50 and b.n_out == 5
    assert b.first_token_s not in a.chunk_times_s  # a got no token at the end of b's prefill
    start, end = _gap_over(a.chunk_times_s, b.first_token_s)
    assert start <= b.first_token_s - PREFILL_S + 1e-9  # a's interval spans the whole prefill of b ...
    ctx = 2 * 1000 + (a.chunk_times_s.index(end) + 1) + 1  # ... then one decode step of both sequences
    assert end - b.first_token_s == pytest.approx(0.005 + 2e-3 + 1e-6 * ctx, abs=2e-6)


def test_chunked_prefill_decodes_in_the_same_iteration():
    a, b = _run(chunked=True)
    assert b.first_token_s in a.chunk_times_s  # the mixed iteration gave a its next token too
    start, end = _gap_over(a.chunk_times_s, b.first_token_s)
    assert end == b.first_token_s
    assert end - start == pytest.approx(PREFILL_S + 1e-3 + 1e-6 * (1000 + a.chunk_times_s.index(end)), abs=2e-6)
