"""simdistserve's own placement search (harness/studies/placement_pairs.py): its configurations, its
bisection grid, its choice and ties, its two percentile checks, and the job on the README's example."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from harness.results import RunFolder
from harness.studies import placement_pairs
from harness.studies.placement_algorithm import Parallelism, PlacementSimulator
from harness.studies.placement_pairs import (
    PairConfig,
    PairProbe,
    PairSettings,
    UnboundedKV,
    bisect_pair,
    enumerate_pairs,
    probe_pair,
    search_pairs,
)
from harness.studies.variants import compose_variant
from systems.config import HardwareConfig
from systems.policies.pd import PDScheduler
from systems.sim.deployment_setup import DeploymentSetup, PoolSetup
from systems.sim.links import LinkSpec
from systems.sim.perf.base import InstanceShape, PerfModel
from vocab.errors import ConfigError
from vocab.records import RequestSpec

HW = HardwareConfig(name="test", peak_tflops_bf16=1.0, mem_bandwidth_gbps=1.0, mem_gib=1.0, devices_per_node=4)
LINK = LinkSpec("test", bandwidth_gbps=100.0, latency_s=0.0, efficiency=1.0)


class FixedPerf(PerfModel):
    """Prefill 50 ms per request, decode 20 ms per step, whatever the batch (``capacity`` KV tokens)."""

    name = "fixed"

    def __init__(self, capacity: int = 10_000_000) -> None:
        self.capacity = capacity

    @property
    def kv_bytes_per_token(self) -> int:
        return 1000

    @property
    def kv_capacity_tokens(self) -> int:
        return self.capacity

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        return 0.05 * n_seqs if sum_tokens > 0 else 0.0

    def decode_step_time_s(self, batch_size, sum_context):  # type: ignore[override]
        if isinstance(batch_size, np.ndarray) or isinstance(sum_context, np.ndarray):
            bs, _ = np.broadcast_arrays(np.asarray(batch_size, dtype=float), np.asarray(sum_context, dtype=float))
            return np.full(bs.shape, 0.02)
        return 0.02


def make_sim(n: int = 40, out: int = 11, capacity: int = 10_000_000) -> PlacementSimulator:
    times = np.concatenate([[0.0], np.cumsum(np.random.default_rng(3).exponential(1.0, n - 1))])
    specs = [RequestSpec(request_id=i, arrival_s=float(t), input_length=100, output_length=out, block_size=100)
             for i, t in enumerate(times)]

    def make_setup(pools: tuple[PoolSetup, ...]) -> DeploymentSetup:
        return DeploymentSetup("distserve", pools, LINK, scheduler=PDScheduler("load_balancing"), prefix_caching=False)

    return PlacementSimulator(specs, HW, lambda shape: FixedPerf(capacity), make_setup, 0.2, 0.1)


def test_pairs_are_simdistserve_low_affinity_configs_within_the_node():
    pairs, skipped = enumerate_pairs(4)
    assert len(pairs) == 13 and not skipped and all(p.n_gpus <= 4 for p in pairs)
    assert pairs[0] == PairConfig(Parallelism(1, 1), Parallelism(1, 1)) and pairs == sorted(pairs)
    usable, skipped = enumerate_pairs(4, lambda p: "no pp" if p.pp > 1 else ("no tp3" if p.tp == 3 else None))
    assert [(p.prefill.tp, p.decode.tp) for p in usable] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert len(skipped) == 9 and all(reason for _, reason in skipped)
    with pytest.raises(ValueError):
        enumerate_pairs(1)


def test_bisection_walks_simdistserve_grid_to_1_5625(monkeypatch):
    seen = []

    def fake_probe(sim, pair, rate, settings):
        seen.append(rate)
        return PairProbe(rate, 0.0, 0.0, rate <= 1.6)

    monkeypatch.setattr(placement_pairs, "probe_pair", fake_probe)
    result = bisect_pair(None, PairConfig(Parallelism(2), Parallelism(1)), PairSettings())  # type: ignore[arg-type]
    # [0, 5]: 2.5 fails, 1.25 passes, 1.875 fails, 1.5625 passes, 1.71875 fails; then the bracket is 0.156
    assert seen == [2.5, 1.25, 1.875, 1.5625, 1.71875]
    assert result.per_gpu_rate == 1.5625 and result.rate_rps == pytest.approx(1.5625 * 3)


def test_choice_prefers_rate_then_fewer_gpus_and_lists_ties(monkeypatch):
    rates = {(1, 1): 1.0, (1, 2): 1.25, (2, 1): 1.25, (2, 2): 1.25}

    def fake_bisect(sim, pair, settings):
        return placement_pairs.PairResult(pair, rates[(pair.prefill.tp, pair.decode.tp)], ())

    monkeypatch.setattr(placement_pairs, "bisect_pair", fake_bisect)
    result = search_pairs(make_sim(), 4, PairSettings(), lambda p: "skip" if p.pp > 1 or p.tp == 3 else None)
    assert result.best is not None and (result.best.config.prefill.tp, result.best.config.decode.tp) == (1, 2)
    assert [(r.config.prefill.tp, r.config.decode.tp) for r in result.tied] == [(1, 2), (2, 1), (2, 2)]


def test_probe_checks_each_percentile_with_the_tpot_rule():
    sim = make_sim(out=11)
    pair = PairConfig(Parallelism(1), Parallelism(1))
    ours = probe_pair(sim, pair, 0.5, PairSettings(tpot_rule="suite"))
    theirs = probe_pair(sim, pair, 0.5, PairSettings())
    # alone, every request decodes 10 steps of 20 ms after its first token (plus a short KV transfer)
    assert ours.tpot_quantile_s == pytest.approx(0.02, rel=0.1)
    assert theirs.tpot_quantile_s == pytest.approx(ours.tpot_quantile_s * 10 / 11)
    assert ours.ttft_quantile_s == pytest.approx(0.05, rel=0.05) and ours.passed
    tight = make_sim(out=11)
    tight.tpot_s = 0.019
    assert not probe_pair(tight, pair, 0.5, PairSettings(tpot_rule="suite")).passed


def test_quantile_interpolates_like_pandas_and_propagates_unfinished_requests():
    values = np.array([0.3, 0.1, 0.2, 0.4, 0.5])
    assert placement_pairs.quantile(values, 0.9) == pytest.approx(float(pd.Series(values).quantile(0.9)))
    assert placement_pairs.quantile(np.array([0.1, 0.2, np.inf]), 0.9) == np.inf
    assert placement_pairs.quantile(np.array([0.1, 0.2, 0.3, np.inf]), 0.5) == pytest.approx(0.25)


def test_unbounded_kv_only_lifts_the_capacity():
    inner = FixedPerf(capacity=500)
    wrapped = UnboundedKV(inner)
    assert wrapped.kv_capacity_tokens > 10**9 and wrapped.kv_bytes_per_token == 1000
    assert wrapped.prefill_time_s(100, 1e4, 2) == inner.prefill_time_s(100, 1e4, 2)
    assert wrapped.decode_step_time_s(4, 400) == inner.decode_step_time_s(4, 400)
    # a decode instance that holds two requests at a time queues the rest; unbounded, they all run at once
    small = make_sim(n=20, out=50, capacity=400)
    pair = PairConfig(Parallelism(1), Parallelism(1))
    limited = probe_pair(small, pair, 5.0, PairSettings())
    lifted = probe_pair(small, pair, 5.0, PairSettings(decode_kv_limit="none"))
    assert lifted.tpot_quantile_s < limited.tpot_quantile_s
    with pytest.raises(ValueError, match="decode_kv_limit"):
        PairSettings(decode_kv_limit="half")


# -- the job on the README's example, reduced -------------------------------------------------------
def test_the_job_runs_simdistserve_search_and_its_sensitivity(tmp_path, shared_traces):
    from harness.studies.placement_search import run_placement_search
    from vocab.result_files import PLACEMENT_FILE, STUDY_FILE

    cfg = compose_variant(["experiment=distserve_placement", "study.max_requests=40", "study.params.esp=1.0",
                           f"data_dir={shared_traces}"])
    result = run_placement_search(cfg, RunFolder(tmp_path))
    table = pd.read_csv(tmp_path / STUDY_FILE)
    searched = table[table["status"] == "searched"]
    # OPT-13B's profiles have TP 1, 2, 4; pipelines are skipped with a reason, so 4 pairs are searched
    assert set(zip(searched["prefill_tp"], searched["decode_tp"], strict=True)) == {(1, 1), (1, 2), (2, 1), (2, 2)}
    assert (searched["probes"] == 3).all()  # [0, 5] bisected until the bracket is <= 1.0 wide
    assert (table.loc[table["status"] == "skipped", "note"].str.len() > 0).all()
    assert table["chosen"].sum() == 1 and table.loc[table["chosen"], "tied"].all()
    report = json.loads((tmp_path / PLACEMENT_FILE).read_text())
    assert report["method"] == "simdistserve" and report["iteration_overhead"] == "simdistserve"
    assert report["workload"]["name"] == "distserve_sharegpt" and report["workload"]["n_requests"] == 40
    assert report["readme_pair"]["searched"] and report["chosen"] in report["tied"]
    assert report["per_gpu_goodput_rps"] == max(searched["per_gpu_rate"])
    assert set(report["sensitivity"]) == {"decode_kv_unlimited", "sarathi_sharegpt_lengths"}
    assert report["sensitivity"]["decode_kv_unlimited"]["changes"] == {"decode_kv_limit": "none"}
    # the workload sensitivity searches the same pairs on the other workload's requests
    sarathi = report["sensitivity"]["sarathi_sharegpt_lengths"]
    assert sarathi["changes"] == {"workload": "sharegpt"} and sarathi["n_simulations"] > 0
    assert sarathi["readme_pair"]["per_gpu_rate"] != report["readme_pair"]["per_gpu_rate"]
    assert result.metrics["per_gpu_goodput_rps"] == report["per_gpu_goodput_rps"]
    assert result.metrics["n_simulations"] == searched["probes"].sum()
    from figures.sim_studies import plot_placement

    assert sorted(p.name for p in plot_placement(tmp_path)) == ["placement_pairs.csv", "placement_pairs.png"]


@pytest.mark.parametrize(("override", "key"), [
    ("study.params.method=bogus", "study.params.method"),
    ("study.params.tpot_rule=n", "study.params.tpot_rule"),
    ("study.params.decode_kv_limit=half", "study.params.decode_kv_limit"),
    ("study.params.nodes=2", "study.params.nodes"),
    ("+study.params.sensitivity.x={method: alg1}", "study.params.sensitivity.x.method"),
    ("+study.params.sensitivity.x={esp: -1}", "study.params.esp"),
])
def test_bad_params_name_the_key(override, key):
    from harness.studies.placement_search import placement_params

    cfg = compose_variant(["experiment=distserve_placement", override])
    with pytest.raises(ConfigError, match=rf"^{key}"):
        placement_params(cfg.study)


def test_pairs_use_the_distserve_profile_on_the_search_shapes():
    from harness.studies.placement_search import build_simulator

    cfg = compose_variant(["experiment=distserve_placement", "study.max_requests=5"])
    sim, _ = build_simulator(cfg)
    perf = sim.perf(Parallelism(1))
    assert perf.describe()["source"].endswith("distserve.json")
    assert InstanceShape("a100_80gb", 1, 1) == sim.shape(Parallelism(1))
