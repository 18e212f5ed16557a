"""A simulated instance's derived state stays equal to what it is derived from at every point a performance model
sees: the ``outstanding`` counter to its four queues, the finish heap to its running requests, and the timeline
to its decode iterations (plus the planned segment's), through preemptions, failures and hand-offs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from systems.policies.pd import PDScheduler
from systems.sim.deployment_setup import DeploymentSetup, PoolSetup
from systems.sim.simulation import Simulation
from tests.unit.test_sim_simulation import HW, LINK, SHAPE, LinearPerf, colocated, spec
from vocab.records import RequestStatus


class CheckingPerf(LinearPerf):
    """:class:`LinearPerf` that checks every instance of its cluster each time it is asked for a time."""

    def __init__(self, capacity: int = 100_000) -> None:
        super().__init__(capacity)
        self.instances: list[Any] = []
        self.checks = 0

    def _check(self) -> None:
        for inst in self.instances:
            assert inst.outstanding == len(inst.waiting) + len(inst.prefilling) + len(inst.running) + len(inst.pending)
            heap = inst._finish_heap
            assert sorted(r.rid for r in heap) == sorted(inst.running)
            for i in range(1, len(heap)):
                parent, child = heap[(i - 1) >> 1], heap[i]
                assert (parent.finish_diter, parent.rid) < (child.finish_diter, child.rid)
            planned = inst._timeline[:inst.diter + inst._seg_n]
            assert len(planned) == inst.diter + inst._seg_n and all(planned[i] <= planned[i + 1] for i in range(len(planned) - 1))
        self.checks += 1

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        self._check()
        return super().prefill_time_s(sum_tokens, sum_sq_tokens, n_seqs)

    def decode_step_time_s(self, batch_size, sum_context):  # type: ignore[override]
        self._check()
        return super().decode_step_time_s(batch_size, sum_context)


def _run(setup: DeploymentSetup, perfs: list[CheckingPerf], specs: list) -> Any:
    cluster = Simulation(setup)
    for perf in perfs:
        perf.instances = cluster.instances
    sim = cluster.run(specs)
    assert all(p.checks for p in perfs)
    for inst in cluster.instances:
        assert inst.outstanding == 0 and not inst._finish_heap and len(inst._timeline) >= inst.diter
    return sim


def test_colocated_with_preemptions_and_a_failure() -> None:
    perf = CheckingPerf(capacity=1500)
    specs = [spec(i, 0.01 * i, 300 + 11 * (i % 4), 120 + 13 * (i % 3)) for i in range(24)] + [spec(99, 0.05, 1600, 4)]
    sim = _run(colocated(2, perf=perf, router="least_outstanding"), [perf], specs)
    recs = [r.to_record() for r in sim.requests]
    assert sim.info["preemptions"] > 0
    assert sum(r.status == RequestStatus.FAILED for r in recs) == 1
    for r in recs:
        if r.status == RequestStatus.OK:
            assert np.all(np.diff(r.chunk_times_s) > 0)


@pytest.mark.parametrize("chunked", [True, False])
def test_disaggregated_decodes_under_kv_pressure(chunked: bool) -> None:
    prefill, decode = CheckingPerf(), CheckingPerf(capacity=2500)
    setup = DeploymentSetup("distserve", (PoolSetup("prefill", 2, SHAPE, prefill, HW), PoolSetup("decode", 2, SHAPE, decode, HW)),
                         LINK, scheduler=PDScheduler("load_balancing"), max_num_seqs=8, max_num_batched_tokens=256,
                         chunked_prefill=chunked)
    sim = _run(setup, [prefill, decode], [spec(i, i * 0.005, 300 + 7 * (i % 5), 150) for i in range(120)])
    assert sim.info["preemptions"] > 0
    assert all(r.status == RequestStatus.OK for r in sim.requests)
