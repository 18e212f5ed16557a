"""Registry, build_workload from every config form, and the steps shared by all workload kinds."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from vocab.records import RequestSpec
from workloads import (
    WORKLOAD_CLASSES,
    WORKLOAD_KINDS,
    ArrivalConfig,
    AzureTraceWorkload,
    MooncakeTraceConfig,
    MooncakeTraceWorkload,
    SharedPrefixConfig,
    SharedPrefixWorkload,
    Workload,
    WorkloadConfigError,
    build_workload,
    prefix_hit_stats,
    workload_class,
)


def _trace(tmp_path) -> str:
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 7, "hash_ids": [0, 1, 2]},
        {"timestamp": 1000, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 1600, "output_length": 9, "hash_ids": [0, 1, 3, 4]},
        {"timestamp": 4000, "input_length": 100, "output_length": 1, "hash_ids": [5]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _mooncake(tmp_path, **kw) -> MooncakeTraceConfig:
    return MooncakeTraceConfig(name="m", kind="mooncake_trace", file=_trace(tmp_path), **kw)


def test_registry_covers_every_configured_kind():
    assert set(WORKLOAD_CLASSES) == set(WORKLOAD_KINDS)
    for kind, cls in WORKLOAD_CLASSES.items():
        assert (cls.kind, cls.config_cls.KIND) == (kind, kind) and issubclass(cls, Workload)
    with pytest.raises(TypeError):
        WORKLOAD_CLASSES["x"] = MooncakeTraceWorkload  # read-only


def test_unknown_kind_lists_known_kinds():
    with pytest.raises(
        WorkloadConfigError,
        match="unknown workload kind 'sharegpt'; known kinds: azure_trace, distserve_requests, mooncake_trace, shared_prefix",
    ):
        build_workload({"name": "x", "kind": "sharegpt"})
    with pytest.raises(WorkloadConfigError, match="known kinds"):
        workload_class("nope")


def test_build_from_dataclass_dictconfig_and_dict(tmp_path):
    file = _trace(tmp_path)
    as_dataclass = build_workload(MooncakeTraceConfig(name="m", kind="mooncake_trace", file=file))
    as_dictconfig = build_workload(OmegaConf.create({"name": "m", "kind": "mooncake_trace", "file": file}))
    as_dict = build_workload({"name": "m", "kind": "mooncake_trace", "file": file})
    assert isinstance(as_dataclass, MooncakeTraceWorkload)
    assert as_dataclass.requests().specs == as_dictconfig.requests().specs == as_dict.requests().specs
    sp = build_workload({"name": "s", "kind": "shared_prefix", "arrival": {"rate_rps": 2.0}})
    assert isinstance(sp, SharedPrefixWorkload)
    az = build_workload(
        {"name": "a", "kind": "azure_trace", "file": "azure_llm_2023/AzureLLMInferenceTrace_code.csv"}
    )
    assert isinstance(az, AzureTraceWorkload)


def test_build_errors_name_the_key(tmp_path):
    with pytest.raises(WorkloadConfigError, match=r"^workload\.bogus"):
        build_workload({"name": "m", "kind": "mooncake_trace", "file": "f", "bogus": 1})
    with pytest.raises(WorkloadConfigError, match=r"^workload\.block_size"):
        build_workload({"name": "m", "kind": "mooncake_trace", "file": "f", "block_size": "big"})
    with pytest.raises(WorkloadConfigError, match=r"^workload\.file"):
        build_workload({"name": "m", "kind": "mooncake_trace"})
    with pytest.raises(WorkloadConfigError, match=r"^workload\.file: missing required value"):
        MooncakeTraceWorkload(MooncakeTraceConfig(name="m", kind="mooncake_trace"))
    with pytest.raises(WorkloadConfigError, match="needs a MooncakeTraceConfig"):
        MooncakeTraceWorkload(
            SharedPrefixConfig(
                name="s", kind="shared_prefix", arrival=ArrivalConfig(kind="poisson", rate_rps=1.0)
            )
        )


def test_trace_pipeline_ids_arrivals_stats(tmp_path):
    req = build_workload(_mooncake(tmp_path)).requests()
    assert [s.request_id for s in req.specs] == [0, 1, 2, 3]
    assert [s.arrival_s for s in req.specs] == [0.0, 1.0, 1.5, 4.0]
    assert req.schedule.offered_rate_rps == pytest.approx(3 / 4.0)
    stats = req.stats
    # Block refs: 3 + 2 + 4 + 1 = 10; prefix hits: [0,1] in request 1, [0,1] in request 2.
    assert stats["prefix_hit_rate_blocks"] == pytest.approx(4 / 10)
    assert stats["prefix_hit_rate_tokens"] == pytest.approx(4 * 512 / (1100 + 1024 + 1600 + 100))
    assert stats["input_len_median"] == pytest.approx((1100 + 1024) / 2) and stats["output_len_mean"] == 5.5
    assert stats["n_requests"] == 4 and stats["n_skipped_rows"] == 0 and stats["block_size"] == 512
    json.dumps(stats)  # plain, serialisable values


def test_truncation_scaling_and_time_scale_are_shared(tmp_path):
    req = build_workload(
        _mooncake(tmp_path, max_requests=3, block_tokens=16, arrival=ArrivalConfig(time_scale=0.5))
    ).requests()
    assert len(req.specs) == 3 and req.stats["n_loaded"] == 4 and req.stats["n_requests"] == 3
    assert [s.arrival_s for s in req.specs] == [0.0, 0.5, 0.75]
    assert [s.input_length for s in req.specs] == [2 * 16 + 3, 2 * 16, 3 * 16 + 2]
    assert all(s.block_size == 16 and s.n_blocks == len(s.hash_ids) for s in req.specs)
    assert req.stats["block_size"] == 16 and req.stats["source_block_size"] == 512
    sp = build_workload(
        {
            "name": "s",
            "kind": "shared_prefix",
            "max_requests": 5,
            "block_tokens": 4,
            "arrival": {"rate_rps": 2.0},
        }
    ).requests()
    assert len(sp.specs) == 5 and all(s.shared_prefix_len == 1024 // 4 for s in sp.specs)


def test_open_loop_process_replaces_trace_times_but_keeps_row_order(tmp_path):
    req = build_workload(
        _mooncake(tmp_path, arrival=ArrivalConfig(kind="poisson", rate_rps=10.0, seed=4))
    ).requests()
    assert [s.output_length for s in req.specs] == [7, 5, 9, 1]
    assert req.specs[0].arrival_s == 0.0 and req.specs[1].arrival_s not in (0.0, 1.0)
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(req.specs, req.specs[1:], strict=False))
    closed = build_workload(
        _mooncake(tmp_path, arrival=ArrivalConfig(kind="closed_loop", concurrency=2))
    ).requests()
    assert closed.schedule.mode == "closed" and math.isnan(closed.stats["offered_rate_rps"])


def _reference_prefix_hits(specs):
    seen, hits, refs = set(), 0, 0
    for s in specs:
        for i in range(len(s.hash_ids)):
            key = s.hash_ids[: i + 1]
            hits += key in seen
            refs += 1
        seen.update(s.hash_ids[: i + 1] for i in range(len(s.hash_ids)))
    return hits, refs


def test_prefix_hit_stats_matches_a_plain_reference():
    rng = np.random.default_rng(5)
    specs = []
    for i in range(300):
        n = int(rng.integers(1, 8))
        ids = tuple(int(x) for x in rng.integers(0, 6, size=n))  # ids recur at other positions too
        specs.append(RequestSpec(i, 0.0, n * 16 - int(rng.integers(0, 16)), 1, ids, 16))
    stats = prefix_hit_stats(specs)
    hits, refs = _reference_prefix_hits(specs)
    assert (stats.prefix_hit_blocks, stats.block_refs) == (hits, refs)
    assert stats.unique_blocks == len({h for s in specs for h in s.hash_ids})
    assert 0 < stats.prefix_hit_blocks < stats.reused_blocks  # same id after a different prefix is no hit
    huge = [RequestSpec(0, 0.0, 16, 1, (2**70,), 16), RequestSpec(1, 0.0, 16, 1, (2**70,), 16)]
    assert prefix_hit_stats(huge).prefix_hit_blocks == 1
