"""Prefix-cache replay on the real Mooncake FAST'25 conversation trace (read from ../shared)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from systems.kvcache import EvictionPolicy, ReplayRouting, flatten_blocks, hit_rates, replay_prefix_hits
from systems.kvcache import replay_global_vs_local as global_vs_local
from tests.unit.test_prefix_cache_replay import ref_local, ref_replay

_NAME = "conversation_trace.jsonl"
_REPO = Path(__file__).resolve().parents[2]


def _trace_path() -> Path | None:
    candidates = []
    if os.environ.get("DATA_DIR"):
        data_dir = Path(os.environ["DATA_DIR"])
        candidates += [data_dir / "mooncake_fast25" / _NAME, data_dir / _NAME]
    candidates += [
        _REPO / "data" / "mooncake_fast25" / _NAME,
        _REPO.parent / "shared" / "traces" / "mooncake_fast25" / _NAME,
    ]
    return next((p for p in candidates if p.is_file()), None)


@pytest.fixture(scope="module")
def trace() -> list[dict]:
    path = _trace_path()
    if path is None:
        pytest.skip(f"{_NAME} not found (published in kvcache-ai/Mooncake FAST25-release/traces/)")
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def test_trace_shape(trace: list[dict]) -> None:
    assert len(trace) == 12031
    assert sum(len(r["hash_ids"]) for r in trace) == 288500


def test_infinite_block_hit_rate_matches_set_based_check(trace: list[dict]) -> None:
    seen: set[int] = set()
    hit_blocks = 0
    for r in trace:
        ids = r["hash_ids"]
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        hit_blocks += k
        seen.update(ids)
    total_blocks = sum(len(r["hash_ids"]) for r in trace)
    expected = hit_blocks / total_blocks

    d, o = flatten_blocks([r["hash_ids"] for r in trace])
    n_blocks = np.diff(o)
    input_lengths = np.array([r["input_length"] for r in trace])
    for policy in EvictionPolicy:
        hits = replay_prefix_hits(d, o, None, policy)
        block_rate, token_rate = hit_rates(hits, n_blocks, input_lengths, 512)
        assert block_rate == pytest.approx(expected, abs=1e-12)
        assert int(hits.sum()) == hit_blocks
        assert 0.0 < token_rate <= 1.0


def test_finite_capacities_on_trace(trace: list[dict]) -> None:
    d, o = flatten_blocks([r["hash_ids"] for r in trace])
    capacities = (1000, 10_000, 30_000, 50_000, 100_000, None)
    prev = np.zeros(len(trace), dtype=np.int64)
    for capacity in capacities:  # LRU stack property, per request
        hits = replay_prefix_hits(d, o, capacity, EvictionPolicy.LRU)
        assert np.all(hits >= prev)
        prev = hits
    for policy in EvictionPolicy:
        rates = [replay_prefix_hits(d, o, c, policy).sum() for c in capacities]
        assert rates[0] < rates[-1]
        assert max(rates) == rates[-1]


def test_kernels_match_reference_on_trace_head(trace: list[dict]) -> None:
    reqs = [r["hash_ids"] for r in trace[:250]]
    d, o = flatten_blocks(reqs)
    for policy in EvictionPolicy:
        assert replay_prefix_hits(d, o, 200, policy).tolist() == ref_replay(reqs, 200, policy)
    for routing in ReplayRouting:
        res = global_vs_local(d, o, 3, 80, EvictionPolicy.LFU, routing, seed=5)
        hits, inst = ref_local(reqs, 3, 80, EvictionPolicy.LFU, routing, 5)
        assert res.local_hits.tolist() == hits
        assert res.instance.tolist() == inst
