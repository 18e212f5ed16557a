"""Prefix-cache replay: hand-computed traces and cross-checks against a plain-Python reference."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from systems.kvcache import (
    EvictionPolicy,
    GlobalLocalResult,
    ReplayRouting,
    flatten_blocks,
    hit_rates,
    prefix_cache_replay,
    replay_global_vs_local,
    replay_prefix_hits,
    replay_sweep,
)

LRU, LFU, LA = EvictionPolicy.LRU, EvictionPolicy.LFU, EvictionPolicy.LENGTH_AWARE


# --------------------------------------------------------------------------------------------------
# Reference implementation: a dict of block -> [count, position, last access time] and min() scans.
# --------------------------------------------------------------------------------------------------
def _victim_key(policy: EvictionPolicy):
    if policy is LRU:
        return lambda e: (e[2],)
    if policy is LFU:
        return lambda e: (e[0], e[2])
    return lambda e: (e[0], -e[1], e[2])


class RefCache:
    """Straightforward cache with the documented semantics (capacity None/0 = infinite)."""

    def __init__(self, capacity: int | None, policy: EvictionPolicy, clock: list[int] | None = None):
        self.capacity = capacity or 0
        self.key = _victim_key(policy)
        self.entries: dict[int, list[int]] = {}
        self.clock = clock if clock is not None else [0]

    def lookup(self, blocks: list[int]) -> int:
        k = 0
        while k < len(blocks) and blocks[k] in self.entries:
            k += 1
        return k

    def access(self, blocks: list[int]) -> None:
        for j, b in enumerate(blocks):
            self.clock[0] += 1
            e = self.entries.get(b)
            if e is not None:
                e[0] += 1
                e[1] = j
                e[2] = self.clock[0]
                continue
            if self.capacity and len(self.entries) >= self.capacity:
                victim = min(self.entries, key=lambda x: self.key(self.entries[x]))
                del self.entries[victim]
            self.entries[b] = [1, j, self.clock[0]]


def ref_replay(reqs: list[list[int]], capacity: int | None, policy: EvictionPolicy) -> list[int]:
    cache = RefCache(capacity, policy)
    hits = []
    for blocks in reqs:
        hits.append(cache.lookup(blocks))
        cache.access(blocks)
    return hits


def ref_lru_ordereddict(reqs: list[list[int]], capacity: int) -> list[int]:
    cache: OrderedDict[int, None] = OrderedDict()
    hits = []
    for blocks in reqs:
        k = 0
        while k < len(blocks) and blocks[k] in cache:
            k += 1
        hits.append(k)
        for b in blocks:
            if b in cache:
                cache.move_to_end(b)
            else:
                if len(cache) >= capacity:
                    cache.popitem(last=False)
                cache[b] = None
    return hits


def ref_local(
    reqs: list[list[int]],
    n_instances: int,
    capacity: int | None,
    policy: EvictionPolicy,
    routing: ReplayRouting,
    seed: int,
) -> tuple[list[int], list[int]]:
    clock = [0]
    caches = [RefCache(capacity, policy, clock) for _ in range(n_instances)]
    routed = [0] * n_instances
    rnd = np.random.default_rng(seed).integers(0, n_instances, size=len(reqs), dtype=np.int64)
    hits, inst = [], []
    for r, blocks in enumerate(reqs):
        if routing is ReplayRouting.CACHE_AWARE:
            i = min(range(n_instances), key=lambda x: (-caches[x].lookup(blocks), routed[x], x))
        elif routing is ReplayRouting.RANDOM:
            i = int(rnd[r])
        else:
            i = r % n_instances
        hits.append(caches[i].lookup(blocks))
        inst.append(i)
        routed[i] += 1
        caches[i].access(blocks)
    return hits, inst


# --------------------------------------------------------------------------------------------------
# Trace generators
# --------------------------------------------------------------------------------------------------
def random_trace(rng: np.random.Generator, n_req: int, universe: int, max_len: int) -> list[list[int]]:
    """Requests that often start with a prefix of an earlier one, then random blocks (repeats allowed)."""
    reqs: list[list[int]] = []
    for _ in range(n_req):
        blocks: list[int] = []
        if reqs and rng.random() < 0.7:
            src = reqs[int(rng.integers(len(reqs)))]
            blocks = list(src[: int(rng.integers(1, len(src) + 1))])
        n_new = int(rng.integers(0 if blocks else 1, max_len + 1))
        blocks += [int(x) for x in rng.integers(0, universe, size=n_new)]
        reqs.append(blocks[: max_len + 2])
    return reqs


def grouped_trace(
    rng: np.random.Generator, n_req: int, n_groups: int, prefix_len: int, suffix_len: int
) -> list[list[int]]:
    """Each request = the shared prefix of a random group + unique blocks."""
    reqs = []
    next_id = n_groups * prefix_len
    for _ in range(n_req):
        g = int(rng.integers(n_groups))
        suffix = list(range(next_id, next_id + suffix_len))
        next_id += suffix_len
        reqs.append(list(range(g * prefix_len, (g + 1) * prefix_len)) + suffix)
    return reqs


def flat(reqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    return flatten_blocks(reqs)


# --------------------------------------------------------------------------------------------------
# Hand-computed traces
# --------------------------------------------------------------------------------------------------
# capacity 3: after r2 the cache holds 0 (count 2, oldest), 1 (count 1, pos 0), 2 (count 1, pos 1).
# r3 inserts 3: LRU evicts 0, LFU evicts 1 (older of the count-1 blocks), LengthAware evicts 2 (pos 1).
HAND_TRACE = [[0], [0], [1, 2], [3], [0], [1], [2]]
HAND_EXPECTED = {
    LRU: [0, 1, 0, 0, 0, 0, 0],
    LFU: [0, 1, 0, 0, 1, 0, 0],
    LA: [0, 1, 0, 0, 1, 1, 0],
}


@pytest.mark.parametrize("policy", list(EvictionPolicy))
def test_hand_trace_policies_choose_different_victims(policy: EvictionPolicy) -> None:
    d, o = flat(HAND_TRACE)
    hits = replay_prefix_hits(d, o, 3, policy)
    assert hits.dtype == np.int64
    assert hits.tolist() == HAND_EXPECTED[policy]
    assert ref_replay(HAND_TRACE, 3, policy) == HAND_EXPECTED[policy]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(LRU, [0, 0]), (LFU, [0, 0]), (LA, [0, 1])],
)
def test_request_longer_than_capacity_evicts_its_own_blocks(
    policy: EvictionPolicy, expected: list[int]
) -> None:
    # capacity 2, request [0, 1, 2]: inserting 2 evicts one of this request's own blocks.
    # LRU/LFU evict 0 (oldest), LengthAware evicts 1 (largest position), so block 0 survives.
    d, o = flat([[0, 1, 2], [0, 1, 2]])
    assert replay_prefix_hits(d, o, 2, policy).tolist() == expected


@pytest.mark.parametrize("policy", list(EvictionPolicy))
def test_ties_go_to_least_recent(policy: EvictionPolicy) -> None:
    # 0 and 1 have equal count and position; inserting 2 evicts 0, the older one.
    d, o = flat([[0], [1], [2], [1], [0]])
    assert replay_prefix_hits(d, o, 2, policy).tolist() == [0, 0, 0, 1, 0]


def test_lookup_happens_before_the_request_inserts() -> None:
    # a block repeated inside one request is not a hit for that request's own lookup
    d, o = flat([[5, 5, 7], [5, 7]])
    assert replay_prefix_hits(d, o, None, LRU).tolist() == [0, 2]
    assert replay_prefix_hits(d, o, 2, LFU).tolist() == [0, 2]


def test_flatten_blocks_remaps_to_dense_ranks() -> None:
    d, o = flatten_blocks([[10**12, -3], [], [7, 10**12]])
    assert d.dtype == np.int64 and o.dtype == np.int64
    assert o.tolist() == [0, 2, 2, 4]
    assert d.tolist() == [2, 0, 1, 2]
    d0, o0 = flatten_blocks([])
    assert d0.shape == (0,) and o0.tolist() == [0]
    assert replay_prefix_hits(d0, o0, 10, LRU).shape == (0,)


def test_infinite_capacity_is_leading_blocks_seen_before() -> None:
    rng = np.random.default_rng(1)
    reqs = random_trace(rng, 300, 40, 8)
    d, o = flat(reqs)
    seen: set[int] = set()
    expected = []
    for blocks in reqs:
        k = 0
        while k < len(blocks) and blocks[k] in seen:
            k += 1
        expected.append(k)
        seen.update(blocks)
    for policy in EvictionPolicy:
        assert replay_prefix_hits(d, o, None, policy).tolist() == expected
        assert replay_prefix_hits(d, o, 0, policy).tolist() == expected
        # a capacity at least the number of distinct blocks never evicts
        assert replay_prefix_hits(d, o, int(d.max()) + 1, policy).tolist() == expected


def test_invalid_inputs_raise() -> None:
    d, o = flat([[0, 1]])
    with pytest.raises(ValueError):
        replay_prefix_hits(d, o, -1, LRU)
    with pytest.raises(ValueError):
        replay_prefix_hits(d, np.array([0, 3]), 4, LRU)
    with pytest.raises(ValueError):
        replay_prefix_hits(d, o, 4, "fifo")
    with pytest.raises(ValueError):
        replay_global_vs_local(d, o, 0, 4)
    with pytest.raises(ValueError, match="flatten_blocks"):
        replay_prefix_hits(np.array([0, 10**9]), np.array([0, 2]), 4, LRU)


# --------------------------------------------------------------------------------------------------
# Cross-checks against the reference
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_kernels_match_reference_on_random_traces(seed: int) -> None:
    rng = np.random.default_rng(seed)
    reqs = random_trace(rng, 150, universe=12 + 6 * seed, max_len=7)
    d, o = flat(reqs)
    for capacity in (1, 2, 3, 5, 8, 13, None):
        for policy in EvictionPolicy:
            got = replay_prefix_hits(d, o, capacity, policy).tolist()
            assert got == ref_replay(reqs, capacity, policy), (capacity, policy)
        if capacity is not None:
            lru = replay_prefix_hits(d, o, capacity, LRU).tolist()
            assert lru == ref_lru_ordereddict(reqs, capacity)


@pytest.mark.parametrize("max_dense", [1, 2, 5, 63, 64, 65, 130])
def test_overflow_heap_matches_reference(monkeypatch: pytest.MonkeyPatch, max_dense: int) -> None:
    # Few dense buckets push frequent blocks into the kernels' overflow heap; results must not change.
    monkeypatch.setattr(prefix_cache_replay, "_MAX_DENSE_BUCKETS", max_dense)
    for seed in range(3):
        rng = np.random.default_rng(50 + seed)
        reqs = random_trace(rng, 200, universe=15, max_len=12)
        d, o = flat(reqs)
        for capacity in (1, 3, 7, 20):
            for policy in EvictionPolicy:
                got = replay_prefix_hits(d, o, capacity, policy).tolist()
                assert got == ref_replay(reqs, capacity, policy), (seed, capacity, policy)
        res = replay_global_vs_local(d, o, 3, 4, LA, ReplayRouting.CACHE_AWARE)
        hits, inst = ref_local(reqs, 3, 4, LA, ReplayRouting.CACHE_AWARE, 0)
        assert res.local_hits.tolist() == hits and res.instance.tolist() == inst


def test_sweep_matches_single_runs() -> None:
    reqs = random_trace(np.random.default_rng(7), 100, 20, 6)
    d, o = flat(reqs)
    out = replay_sweep(d, o, [2, 5, None], ["lru", "length_aware"])
    assert set(out) == {(p, c) for p in (LRU, LA) for c in (2, 5, None)}
    for (p, c), hits in out.items():
        assert hits.tolist() == ref_replay(reqs, c, p)


@pytest.mark.parametrize("routing", list(ReplayRouting))
@pytest.mark.parametrize("seed", range(3))
def test_local_routing_matches_reference(routing: ReplayRouting, seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    reqs = random_trace(rng, 120, universe=25, max_len=6)
    d, o = flat(reqs)
    for n_inst, capacity in ((1, 4), (3, 3), (4, None), (2, 1)):
        for policy in EvictionPolicy:
            res = replay_global_vs_local(d, o, n_inst, capacity, policy, routing, seed=seed)
            assert isinstance(res, GlobalLocalResult)
            hits, inst = ref_local(reqs, n_inst, capacity, policy, routing, seed)
            assert res.instance.tolist() == inst, (n_inst, capacity, policy)
            assert res.local_hits.tolist() == hits, (n_inst, capacity, policy)
            total = None if capacity is None else capacity * n_inst
            assert res.global_hits.tolist() == ref_replay(reqs, total, policy)


def test_one_instance_local_equals_global() -> None:
    reqs = random_trace(np.random.default_rng(3), 200, 30, 8)
    d, o = flat(reqs)
    for routing in ReplayRouting:
        res = replay_global_vs_local(d, o, 1, 6, LFU, routing)
        assert np.array_equal(res.local_hits, res.global_hits)
        assert not res.instance.any()


# --------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------
def test_lru_hits_are_monotone_in_capacity() -> None:
    reqs = random_trace(np.random.default_rng(11), 600, 80, 10)
    d, o = flat(reqs)
    prev = np.zeros(len(reqs), dtype=np.int64)
    for capacity in (1, 2, 4, 8, 16, 32, 64, None):
        hits = replay_prefix_hits(d, o, capacity, LRU)
        assert np.all(hits >= prev), capacity
        prev = hits


def test_global_pool_beats_private_caches_with_round_robin() -> None:
    reqs = grouped_trace(np.random.default_rng(5), 2000, n_groups=16, prefix_len=10, suffix_len=5)
    d, o = flat(reqs)
    for policy in EvictionPolicy:
        res = replay_global_vs_local(d, o, 4, 60, policy, ReplayRouting.ROUND_ROBIN)
        assert res.global_hits.sum() >= res.local_hits.sum(), policy
    res = replay_global_vs_local(d, o, 4, 60, LRU, ReplayRouting.ROUND_ROBIN)
    assert res.global_hits.sum() > 1.2 * res.local_hits.sum()
    assert np.bincount(res.instance).tolist() == [500] * 4


def test_cache_aware_routing_beats_random_on_prefix_groups() -> None:
    reqs = grouped_trace(np.random.default_rng(9), 2000, n_groups=8, prefix_len=12, suffix_len=4)
    d, o = flat(reqs)
    aware = replay_global_vs_local(d, o, 4, 40, LRU, ReplayRouting.CACHE_AWARE)
    rand = replay_global_vs_local(d, o, 4, 40, LRU, "random", seed=1)
    assert aware.local_hits.sum() > 1.5 * rand.local_hits.sum()
    # the global result does not depend on routing
    assert np.array_equal(aware.global_hits, rand.global_hits)


def test_random_routing_is_seeded_and_isolated() -> None:
    reqs = random_trace(np.random.default_rng(2), 100, 20, 5)
    d, o = flat(reqs)
    np.random.seed(0)
    a = replay_global_vs_local(d, o, 3, 5, LRU, ReplayRouting.RANDOM, seed=42)
    np.random.seed(1)
    b = replay_global_vs_local(d, o, 3, 5, LRU, ReplayRouting.RANDOM, seed=42)
    c = replay_global_vs_local(d, o, 3, 5, LRU, ReplayRouting.RANDOM, seed=43)
    assert np.array_equal(a.instance, b.instance)
    assert not np.array_equal(a.instance, c.instance)


def test_hit_rates() -> None:
    hits = np.array([0, 2, 3])
    n_blocks = np.array([2, 3, 3])
    input_lengths = np.array([1000, 1300, 1100])
    block_rate, token_rate = hit_rates(hits, n_blocks, input_lengths, block_size=512)
    assert block_rate == pytest.approx(5 / 8)
    assert token_rate == pytest.approx((0 + 1024 + 1100) / 3400)
    assert hit_rates(np.zeros(0), np.zeros(0), np.zeros(0), 512) == (0.0, 0.0)
