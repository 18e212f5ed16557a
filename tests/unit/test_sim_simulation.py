"""The simulator's cluster mechanics against hand-computed timings with a linear performance model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from systems.config import HardwareConfig
from systems.policies import build_policy
from systems.policies.pd import PDScheduler
from systems.sim.deployment_setup import DeploymentSetup, KVPoolSetup, PoolSetup
from systems.sim.links import LinkSpec, get_link
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.simulation import Simulation
from vocab.records import RequestSpec, RequestStatus

HW = HardwareConfig(name="test", peak_tflops_bf16=1.0, mem_bandwidth_gbps=1.0, mem_gib=1.0)
SHAPE = InstanceShape("test")
LINK = LinkSpec("test", bandwidth_gbps=1.0, latency_s=0.0, efficiency=1.0)  # 1 GB/s


class LinearPerf(PerfModel):
    """prefill = 10 ms + 1 ms per 10 tokens; decode step = 5 ms + 1 ms per sequence + 1 us per context token."""

    name = "linear"

    def __init__(self, capacity: int = 100_000, kv_bytes: int = 1000) -> None:
        self._cap = capacity
        self._kv = kv_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self._kv

    @property
    def kv_capacity_tokens(self) -> int:
        return self._cap

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        return 0.010 + 1e-4 * sum_tokens

    def decode_step_time_s(self, batch_size, sum_context):  # type: ignore[override]
        return 0.005 + 1e-3 * batch_size + 1e-6 * np.asarray(sum_context) if isinstance(sum_context, np.ndarray) \
            else 0.005 + 1e-3 * batch_size + 1e-6 * sum_context


def spec(i: int, t: float, n_in: int, n_out: int, ids: tuple[int, ...] = (), block: int = 100,
         tenant: str = "") -> RequestSpec:
    return RequestSpec(request_id=i, arrival_s=t, input_length=n_in, output_length=n_out, hash_ids=ids,
                       block_size=block, tenant=tenant)


def colocated(n: int = 1, perf: PerfModel | None = None, **kw) -> DeploymentSetup:
    return DeploymentSetup("vllm_baseline", (PoolSetup("colocated", n, SHAPE, perf or LinearPerf(), HW),), LINK,
                        router=build_policy(kw.pop("router", "round_robin")), **kw)


def disaggregated(perf: PerfModel | None = None, n_p: int = 1, n_d: int = 1, policy: str = "load_balancing",
                  rejection: str = "none", **kw) -> DeploymentSetup:
    perf = perf or LinearPerf()
    sched = PDScheduler(policy, rejection=rejection,
                        ttft_slo_s=kw.pop("ttft_slo_s", None), tbt_slo_s=kw.get("tbt_slo_s"))
    return DeploymentSetup("distserve", (PoolSetup("prefill", n_p, SHAPE, perf, HW), PoolSetup("decode", n_d, SHAPE, perf, HW)),
                        LINK, scheduler=sched, rejection=rejection, **kw)


def run(setup: DeploymentSetup, specs: list[RequestSpec]):
    sim = Simulation(setup).run(specs)
    return [r.to_record() for r in sim.requests], sim


def test_single_request_timings_match_the_model() -> None:
    (rec,), _ = run(colocated(), [spec(0, 1.0, 1000, 4)])
    assert rec.status == RequestStatus.OK
    prefill = 0.010 + 1e-4 * 1000
    assert rec.first_token_s == pytest.approx(1.0 + prefill)
    # each decode step: batch 1, context = prompt + tokens so far
    gaps = np.diff(rec.chunk_times_s)
    expected = [0.005 + 1e-3 + 1e-6 * (1001 + k) for k in range(3)]
    assert gaps == pytest.approx(expected)
    assert rec.n_out == 4 and rec.finish_s == pytest.approx(rec.chunk_times_s[-1])


def test_a_second_request_joins_at_the_next_iteration_boundary() -> None:
    specs = [spec(0, 0.0, 1000, 50), spec(1, 0.1, 1000, 5)]
    (a, b), _ = run(colocated(), specs)
    assert a.n_out == 50 and b.n_out == 5
    # b's prefill starts at the first iteration boundary at or after its arrival, and is mixed with a's decode
    assert b.first_token_s > 0.1
    gaps = np.diff(a.chunk_times_s)
    mixed = [g for g in gaps if g > 0.012]
    assert len(mixed) == 1  # exactly one of a's intervals contains b's prefill chunk
    assert mixed[0] == pytest.approx(0.010 + 0.1 + 1e-3 + 1e-6 * (1000 + 1 + 10), abs=2e-5)
    # while both decode, the step costs two sequences
    both = [t for t in a.chunk_times_s if b.first_token_s < t <= b.finish_s]
    assert len(both) == 4


def test_prompt_longer_than_the_kv_capacity_fails_with_the_reason() -> None:
    recs, _ = run(colocated(perf=LinearPerf(capacity=500)), [spec(0, 0.0, 800, 4), spec(1, 0.0, 100, 4)])
    assert recs[0].status == RequestStatus.FAILED and "can never fit" in recs[0].error
    assert recs[1].status == RequestStatus.OK


def test_over_max_model_len_fails() -> None:
    recs, _ = run(colocated(max_model_len=1000), [spec(0, 0.0, 990, 20)])
    assert recs[0].status == RequestStatus.FAILED and "max_model_len" in recs[0].error


def test_kv_pressure_preempts_and_every_request_still_completes() -> None:
    specs = [spec(i, 0.0, 300, 200) for i in range(6)]
    recs, sim = run(colocated(perf=LinearPerf(capacity=1500)), specs)
    assert all(r.status == RequestStatus.OK and r.n_out == 200 for r in recs)
    assert sim.info["preemptions"] > 0
    for r in recs:
        assert all(np.diff(r.chunk_times_s) > 0)


def test_prefix_cache_reuses_shared_leading_blocks() -> None:
    specs = [spec(0, 0.0, 1000, 2, ids=tuple(range(10))), spec(1, 5.0, 1000, 2, ids=(0, 1, 2, 3, 99, 5, 6, 7, 8, 9))]
    recs, _ = run(colocated(), specs)
    assert recs[0].cached_tokens == 0
    assert recs[1].cached_tokens == 400  # blocks 0-3 only: a key names its whole prefix
    ttft = recs[1].first_token_s - recs[1].arrival_s
    assert ttft == pytest.approx(0.010 + 1e-4 * 600)


def test_tenants_never_share_cached_prefixes() -> None:
    ids = tuple(range(10))
    specs = [spec(0, 0.0, 1000, 2, ids, tenant="a"), spec(1, 5.0, 1000, 2, ids, tenant="b"),
             spec(2, 10.0, 1000, 2, ids, tenant="a")]
    recs, _ = run(colocated(), specs)
    assert [r.cached_tokens for r in recs] == [0, 0, 999]  # the last token is always computed


def test_disaggregated_transfer_is_timed_and_recorded() -> None:
    (rec,), sim = run(disaggregated(), [spec(0, 0.0, 1000, 3)])
    prefill = 0.010 + 1e-4 * 1000
    transfer = 1000 * 1000 / 1e9  # 1000 tokens x 1000 B at 1 GB/s
    assert rec.first_token_s == pytest.approx(prefill)
    assert rec.extra["kv_transfer_s"] == pytest.approx(transfer)
    assert rec.extra["kv_transfer_bytes"] == 1e6
    assert rec.chunk_times_s[1] == pytest.approx(prefill + transfer + 0.005 + 1e-3 + 1e-6 * 1001)
    assert rec.instance == "P0->D0"
    assert sim.info["kv_transfer_bytes"] == 1e6


def test_layerwise_transfer_hides_most_of_the_transfer() -> None:
    (plain,), _ = run(disaggregated(), [spec(0, 0.0, 1000, 3)])
    (overlap,), _ = run(disaggregated(layerwise_transfer=True, num_layers=10), [spec(0, 0.0, 1000, 3)])
    assert overlap.extra["kv_transfer_s"] == pytest.approx(max(1e-3 - 0.11, 1e-3 / 10))
    assert overlap.extra["kv_transfer_s"] < plain.extra["kv_transfer_s"]


def test_runs_are_deterministic() -> None:
    rng = np.random.default_rng(1)
    specs = [spec(i, float(t), int(n), int(o), tuple(int(x) for x in rng.integers(0, 5, 6)))
             for i, (t, n, o) in enumerate(zip(np.cumsum(rng.exponential(0.05, 200)), rng.integers(100, 600, 200),
                                                rng.integers(1, 80, 200), strict=True))]
    a, _ = run(disaggregated(n_p=2, n_d=2, policy="random"), specs)
    b, _ = run(disaggregated(n_p=2, n_d=2, policy="random"), specs)
    assert a == b
    assert all(r.status == RequestStatus.OK for r in a)


def _overload(n: int = 400) -> list[RequestSpec]:
    return [spec(i, i * 0.07, 500, 300) for i in range(n)]


def test_rejection_modes_reject_under_overload_and_baseline_wastes_prefill() -> None:
    counts, computed = {}, {}
    for mode in ("none", "baseline", "early", "predictive"):
        recs, sim = run(disaggregated(rejection=mode, tbt_slo_s=0.06, ttft_slo_s=None), _overload())
        counts[mode] = sum(r.status == RequestStatus.REJECTED for r in recs)
        computed[mode] = sim.info["prefill_tokens_computed"]
        assert all(r.status in (RequestStatus.OK, RequestStatus.REJECTED) for r in recs)
    assert counts["none"] == 0
    assert counts["baseline"] > 0 and counts["early"] > 0 and counts["predictive"] > 0
    # the baseline computes the prefill of every request, including the ones it then rejects
    assert computed["baseline"] >= 400 * 500
    assert computed["early"] < computed["baseline"]


def _pool_setup(dram_bw: float, policy: str = "conductor") -> DeploymentSetup:
    perf = LinearPerf()
    sched = PDScheduler(policy, kvcache_balancing_threshold=1.0)
    return DeploymentSetup("mooncake", (PoolSetup("prefill", 2, SHAPE, perf, HW), PoolSetup("decode", 1, SHAPE, perf, HW)),
                        get_link("rdma_800"), scheduler=sched,
                        kv_pool=KVPoolSetup(10_000, dram_bw, LinkSpec("r", 1000.0, 0.0, 1.0), 0))


def _pool_specs() -> list[RequestSpec]:
    ids = tuple(range(20))
    # a long prompt prefilled on one instance, then the same prompt again while that instance is busy
    return [spec(0, 0.0, 2000, 2, ids), spec(1, 1.0, 9000, 2, tuple(range(100, 190))), spec(2, 1.0001, 2000, 2, ids)]


def test_conductor_fetches_a_remote_prefix_when_loading_beats_recomputing() -> None:
    recs, _ = run(_pool_setup(dram_bw=1000.0), _pool_specs())
    third = recs[2]
    assert third.instance.startswith("P1")  # P0 is busy with the 9000-token prompt
    assert third.cached_tokens == 1999 and third.extra["kv_fetched_tokens"] == 2000


def test_conductor_recomputes_when_loading_is_slower_eq2() -> None:
    recs, _ = run(_pool_setup(dram_bw=1e-3), _pool_specs())  # 1 MB/s: loading 2 MB takes 2000 s
    assert recs[2].extra["kv_fetched_tokens"] == 0
    assert recs[2].cached_tokens == 0


def test_local_cache_aware_never_fetches() -> None:
    recs, _ = run(_pool_setup(dram_bw=1000.0, policy="local_cache_aware"), _pool_specs())
    assert recs[2].extra["kv_fetched_tokens"] == 0


def test_mixed_pool_takes_prompt_overflow() -> None:
    perf = LinearPerf()
    setup = DeploymentSetup("splitwise", (PoolSetup("prefill", 1, SHAPE, perf, HW), PoolSetup("decode", 1, SHAPE, perf, HW),
                                       PoolSetup("mixed", 1, SHAPE, perf, HW)), LINK,
                         scheduler=PDScheduler("load_balancing"), mixed_overflow_queue_s=0.05)
    recs, sim = run(setup, [spec(i, 0.0, 2000, 3) for i in range(6)])
    assert all(r.status == RequestStatus.OK for r in recs)
    assert sim.info["n_mixed_prompts"] > 0
    assert any(r.instance == "M0" for r in recs)


def test_load_samples_cover_every_instance() -> None:
    _, sim = run(colocated(2, sample_interval_s=0.5), [spec(i, i * 0.3, 500, 40) for i in range(10)])
    names = {s["instance"] for s in sim.load_samples}
    assert names == {"C0", "C1"}
    assert all(0 <= s["kv_utilization"] <= 1 for s in sim.load_samples)
    assert not math.isnan(sim.info["utilization_colocated"])


def test_one_phase_clusters_time_each_phase_alone() -> None:
    perf = LinearPerf()
    prefill_only = DeploymentSetup("distserve", (PoolSetup("prefill", 1, SHAPE, perf, HW),), LINK)
    (rec,), _ = run(prefill_only, [spec(0, 0.0, 1000, 50)])
    assert rec.status == RequestStatus.OK and rec.n_out == 1
    assert rec.first_token_s == pytest.approx(0.010 + 0.1)
    decode_only = DeploymentSetup("distserve", (PoolSetup("decode", 1, SHAPE, perf, HW),), LINK)
    (rec,), _ = run(decode_only, [spec(0, 2.0, 1000, 3)])
    assert rec.first_token_s == 2.0 and rec.n_out == 3
    assert np.diff(rec.chunk_times_s) == pytest.approx([0.005 + 1e-3 + 1e-6 * (1001 + k) for k in range(2)])


def test_decode_instances_under_kv_pressure_never_deadlock() -> None:
    """Preempted sequences queue in front of started recomputations; the started ones must still finish."""
    perf = LinearPerf(capacity=2500)
    setup = DeploymentSetup("distserve", (PoolSetup("prefill", 2, SHAPE, LinearPerf(), HW), PoolSetup("decode", 1, SHAPE, perf, HW)),
                         LINK, scheduler=PDScheduler("load_balancing"), max_num_seqs=8, max_num_batched_tokens=256)
    recs, sim = run(setup, [spec(i, i * 0.01, 300 + 7 * (i % 5), 150) for i in range(120)])
    assert all(r.status == RequestStatus.OK and r.n_out == 150 for r in recs)
    assert sim.info["preemptions"] > 0


@pytest.mark.integration
@pytest.mark.parametrize("policy", ["conductor", "local_cache_aware", "load_balancing"])
def test_scoring_only_useful_prefill_candidates_changes_nothing(policy: str, monkeypatch,
                                                                ran_on_sources: bool) -> None:
    """Large pools score only prefix holders plus the best idle instance; the decisions must not change."""
    if ran_on_sources:  # the scan patches Simulation._candidates: on the Python sources only (tests/conftest.py)
        return
    rng = np.random.default_rng(3)
    specs = [spec(i, float(t), int(n) * 100, int(o), tuple(int(x) for x in rng.integers(0, 4, int(n))))
             for i, (t, n, o) in enumerate(zip(np.cumsum(rng.exponential(0.02, 300)), rng.integers(2, 12, 300),
                                                rng.integers(1, 30, 300), strict=True))]

    def setup() -> DeploymentSetup:
        perf = LinearPerf()
        return DeploymentSetup("mooncake", (PoolSetup("prefill", 8, SHAPE, perf, HW), PoolSetup("decode", 2, SHAPE, perf, HW)),
                            LINK, scheduler=PDScheduler(policy, kvcache_balancing_threshold=1.5),
                            kv_pool=KVPoolSetup(20_000, 100.0, LinkSpec("r", 100.0, 0.0, 1.0), 2))

    pruned, _ = run(setup(), specs)
    monkeypatch.setattr(Simulation, "_candidates",
                        lambda self, req: [(i, self._local_tokens(i, req)) for i in self.by_role["prefill"]])
    full, _ = run(setup(), specs)
    assert pruned == full
    assert sum(r.cached_tokens > 0 for r in full) > 50


def test_baseline_counts_the_prefill_it_wastes() -> None:
    _, base = run(disaggregated(rejection="baseline", tbt_slo_s=0.06, ttft_slo_s=None), _overload())
    _, early = run(disaggregated(rejection="early", tbt_slo_s=0.06, ttft_slo_s=None), _overload())
    assert base.info["n_rejected_after_prefill"] == base.info["n_rejected"] > 0
    assert base.info["wasted_prefill_tokens"] == 500 * base.info["n_rejected_after_prefill"]  # nothing cached
    assert early.info["wasted_prefill_tokens"] == 0 and "n_rejected_after_prefill" not in early.info
    assert base.info["busy_s_prefill"] > early.info["busy_s_prefill"] > 0


def test_predicted_decode_load_is_system_level_with_a_uniform_decode_time() -> None:
    """Mooncake's prediction (arXiv v3 §7): requests the prefill instances finish by t join (spread over the
    decode instances), running requests whose decode (uniform t_d) ends by t leave; no output length is read."""
    from systems.sim.request import SimRequest

    perf = LinearPerf()
    cluster = Simulation(disaggregated(perf, n_p=1, n_d=2, rejection="predictive", tbt_slo_s=0.1))
    d0, d1 = cluster.by_role["decode"]
    running = []
    for i, (inst, started) in enumerate(((d0, 1.0), (d0, 6.0), (d1, 9.0))):
        req = SimRequest(spec(i, 0.0, 1000, 50 + 1000 * i), ())
        req.generated, req.decode_start_s = 1, started
        inst._join_running(req)
        running.append(req)
    queued = SimRequest(spec(9, 0.0, 2000, 5), ())
    queued.est_work_s = 0.5
    cluster.by_role["prefill"][0].waiting.append(queued)
    cluster.loop.now = 10.0
    cluster._decode_s_sum, cluster._decode_s_n = 8.0, 1  # t_d = 8 s
    views = cluster.decode_views(100, 1.0)  # t = 11 s: d0's request started at 1.0 (ended at 9, already
    # past t_d, still running: not predicted to leave now) stays; the one started at 6.0 leaves at 14 > t: stays
    expected = float(perf.decode_step_time_s(2 + 1 + 0.5, 2 * 1001 + 101 + 1000.5))
    assert views[0].predicted_step_s == pytest.approx(expected)
    views = cluster.decode_views(100, 5.0)  # t = 15 s: the request started at 6.0 ends at 14 and leaves
    expected = float(perf.decode_step_time_s(1 + 1 + 0.5, 1001 + 101 + 1000.5))
    assert views[0].predicted_step_s == pytest.approx(expected)
    for req in running:  # the prediction never reads a request's own output length
        req.out_len = 7
    assert cluster.decode_views(100, 5.0)[0].predicted_step_s == pytest.approx(expected)
    assert views[0].step_s == pytest.approx(float(perf.decode_step_time_s(3, 2 * 1001 + 101)))
