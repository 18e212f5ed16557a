"""Routing policies on hand-built cluster views: round-robin, least-outstanding, random, cache-aware."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from systems.policies import (
    BlockLRU,
    CacheAwarePolicy,
    InstanceLoad,
    LeastOutstandingPolicy,
    RandomPolicy,
    RoundRobinPolicy,
    RouteRequest,
    block_hashes,
)


def loads(*outstanding: int) -> list[InstanceLoad]:
    return [InstanceLoad(f"i{k}", o) for k, o in enumerate(outstanding)]


def req(hashes: Sequence[int] = (), rid: int = 0, tenant: str = "") -> RouteRequest:
    return RouteRequest(rid, tuple(hashes), 128 * len(hashes), tenant)


def test_round_robin_cycles_whatever_the_load() -> None:
    p = RoundRobinPolicy()
    assert [p.choose(req(), loads(5, 0, 9)) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_picks_the_minimum() -> None:
    p = LeastOutstandingPolicy()
    assert p.choose(req(), loads(3, 1, 2)) == 1
    assert p.choose(req(), loads(0, 1, 2)) == 0
    assert p.choose(req(), loads(4, 4, 3)) == 2


def test_least_outstanding_ties_rotate() -> None:
    """Ties go round-robin: the first tied index at or after the one after the last choice."""
    p = LeastOutstandingPolicy()
    assert [p.choose(req(), loads(0, 0, 0)) for _ in range(4)] == [0, 1, 2, 0]
    p = LeastOutstandingPolicy()
    assert p.choose(req(), loads(0, 5, 0)) == 0
    assert p.choose(req(), loads(0, 5, 0)) == 2  # next tie at or after 1
    assert p.choose(req(), loads(0, 5, 0)) == 0  # wraps
    assert p.describe()["tie_break"] == "round_robin"


def test_random_is_reproducible_by_seed_and_covers_instances() -> None:
    pa, pb, pc = RandomPolicy(seed=7), RandomPolicy(seed=7), RandomPolicy(seed=8)
    seq_a = [pa.choose(req(), loads(0, 0, 0, 0)) for _ in range(200)]
    seq_b = [pb.choose(req(), loads(0, 0, 0, 0)) for _ in range(200)]
    seq_c = [pc.choose(req(), loads(0, 0, 0, 0)) for _ in range(200)]
    assert seq_a == seq_b and seq_a != seq_c
    assert set(seq_a) == {0, 1, 2, 3}
    assert pa.describe() == {"name": "random", "source_of_truth": "none", "seed": 7}


@pytest.mark.parametrize(
    "policy", [RandomPolicy(), RoundRobinPolicy(), LeastOutstandingPolicy(), CacheAwarePolicy()]
)
def test_no_instances_is_an_error(policy) -> None:
    with pytest.raises(ValueError, match="no instances"):
        policy.choose(req(), [])


def route(p: CacheAwarePolicy, r: RouteRequest, view: Sequence[InstanceLoad]) -> int:
    index = p.choose(r, view)
    p.on_routed(r, index)
    return index


A = (101, 102, 103, 104)  # chained hashes: a prefix of A is A[:k]
B = (201, 202, 203)


def test_cache_aware_follows_the_longest_prefix() -> None:
    p = CacheAwarePolicy(block_size=128)
    assert p.describe()["source_of_truth"] == "routed-history"
    p.on_routed(req(A[:1]), 0)
    p.on_routed(req(A[:3]), 1)
    p.on_routed(req(B), 2)
    assert p.choose(req(A), loads(0, 0, 0)) == 1  # 3 blocks beat 1
    assert p.choose(req(A), loads(0, 9, 0)) == 1  # load ignored without a guard or weight
    assert p.choose(req(B[:2] + (999,)), loads(0, 0, 5)) == 2
    assert p.prefix_match(req(A), 0) == 1 and p.prefix_match(req(A), 1) == 3


def test_cache_aware_ties_and_misses_go_to_least_outstanding() -> None:
    p = CacheAwarePolicy()
    p.on_routed(req(A[:2]), 0)
    p.on_routed(req(A[:2]), 2)
    assert p.choose(req(A), loads(3, 0, 1)) == 2  # tie between 0 and 2 -> fewer outstanding
    assert p.choose(req((777,)), loads(3, 0, 1)) == 1  # no match anywhere -> least outstanding
    assert p.choose(req(()), loads(2, 2, 1)) == 2  # no hashes at all


def test_cache_aware_spreads_new_prefixes_over_an_idle_cluster_and_keeps_them_sticky() -> None:
    p = CacheAwarePolicy()
    prefixes = [tuple(range(10 * g, 10 * g + 3)) for g in range(3)]
    first = [route(p, req(h), loads(0, 0, 0)) for h in prefixes]
    assert first == [0, 1, 2]
    again = [route(p, req(h + (5000 + i,)), loads(0, 0, 0)) for i, h in enumerate(prefixes * 2)]
    assert again == first * 2


def test_cache_aware_load_guard() -> None:
    p = CacheAwarePolicy(max_imbalance=2)
    p.on_routed(req(A), 0)
    assert p.choose(req(A), loads(2, 0, 0)) == 0  # within the allowed imbalance
    assert p.choose(req(A), loads(3, 0, 1)) == 1  # 3 > 0 + 2: the match is out of bounds
    p.on_routed(req(A[:1]), 2)
    assert p.choose(req(A), loads(3, 0, 1)) == 2  # best match among instances inside the bound


def test_cache_aware_load_weight_trades_blocks_for_requests() -> None:
    p = CacheAwarePolicy(load_weight=0.5)
    p.on_routed(req(A), 0)  # 4 blocks on 0
    assert p.choose(req(A), loads(6, 0)) == 0  # 4 - 3 = 1 > 0
    assert p.choose(req(A), loads(10, 0)) == 1  # 4 - 5 < 0


def test_cache_aware_capacity_evicts_least_recently_routed() -> None:
    p = CacheAwarePolicy(capacity_blocks_per_instance=3)
    p.on_routed(req(A[:2]), 0)
    p.on_routed(req(B[:2]), 0)  # 4 blocks > 3: A[1] (oldest) goes
    assert p.prefix_match(req(A), 0) == 1 and p.prefix_match(req(B), 0) == 2
    p.on_routed(req((301, 302, 303)), 0)
    assert p.prefix_match(req(A), 0) == 0 and p.prefix_match(req(B), 0) == 0
    assert p.cached_blocks(0) == 3


def test_lru_keeps_the_head_of_a_request_longer_than_its_tail() -> None:
    lru = BlockLRU(capacity=3)
    lru.record(A)  # 4 blocks into 3: the tail block is the one dropped
    assert lru.prefix_len(A) == 3 and A[3] not in lru
    unbounded = BlockLRU(None)
    unbounded.record(tuple(range(10_000)))
    assert len(unbounded) == 10_000
    with pytest.raises(ValueError):
        BlockLRU(0)


def test_cache_aware_tenants_never_match_each_other() -> None:
    tokens = list(range(1024))
    p = CacheAwarePolicy(block_size=128)
    r_a = RouteRequest(0, block_hashes(tokens, 128, "a"), 1024, "a")
    r_b = RouteRequest(1, block_hashes(tokens, 128, "b"), 1024, "b")
    assert route(p, r_a, loads(0, 0)) == 0
    assert p.prefix_match(r_b, 0) == 0
    assert route(p, r_b, loads(1, 0)) == 1  # no match: least outstanding
    assert p.prefix_match(RouteRequest(2, block_hashes(tokens, 128, "a"), 1024, "a"), 0) == 8


def test_cache_aware_rejects_bad_parameters() -> None:
    for kwargs in (
        {"block_size": 0},
        {"capacity_blocks_per_instance": 0},
        {"load_weight": -1},
        {"max_imbalance": -1},
    ):
        with pytest.raises(ValueError):
            CacheAwarePolicy(**kwargs)


def test_policies_are_deterministic_under_a_replayed_call_sequence() -> None:
    """The simulator and the router drive the same object: same calls, same decisions."""

    def drive(p: CacheAwarePolicy) -> list[int]:
        out, outstanding = [], [0, 0, 0]
        for k in range(60):
            r = req(tuple(range(k % 5 * 100, k % 5 * 100 + 1 + k % 3)) + (k,), rid=k)
            i = p.choose(r, loads(*outstanding))
            p.on_routed(r, i)
            outstanding[i] += 1
            out.append(i)
            if k % 4 == 3:
                j = out[k - 2]
                outstanding[j] -= 1
                p.on_finished(r, j)
        return out

    assert drive(CacheAwarePolicy(max_imbalance=2)) == drive(CacheAwarePolicy(max_imbalance=2))
