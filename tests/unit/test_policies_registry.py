"""The colocated policy registry: canonical names, arguments and errors (aliases are systems/topology.py's)."""

from __future__ import annotations

import pytest

from systems.policies import POLICY_NAMES, build_policy, policy_parameters
from systems.policies.base import InstanceLoad, RouteRequest
from systems.policies.cache_aware import CacheAwarePolicy
from systems.policies.simple import LeastOutstandingPolicy, RandomPolicy, RoundRobinPolicy


def test_every_name_builds_its_policy() -> None:
    assert set(POLICY_NAMES) == {"random", "round_robin", "least_outstanding", "cache_aware"}
    assert isinstance(build_policy("random", seed=3), RandomPolicy)
    assert isinstance(build_policy("round_robin"), RoundRobinPolicy)
    assert isinstance(build_policy("least_outstanding"), LeastOutstandingPolicy)
    p = build_policy("cache_aware", block_size=16, capacity_blocks_per_instance=100, max_imbalance=4)
    assert isinstance(p, CacheAwarePolicy)
    assert p.describe() == {
        "name": "cache_aware",
        "source_of_truth": "routed-history",
        "block_size": 16,
        "capacity_blocks_per_instance": 100,
        "load_weight": 0.0,
        "max_imbalance": 4,
        "tie_break": "least_outstanding, then round_robin",
    }


def test_builds_are_independent() -> None:
    loads = [InstanceLoad("i0", 0), InstanceLoad("i1", 0)]
    request = RouteRequest(request_id=1, block_hashes=(), n_prompt_tokens=8)
    a, b = build_policy("round_robin"), build_policy("round_robin")
    assert [a.choose(request, loads) for _ in range(3)] == [0, 1, 0]
    assert b.choose(request, loads) == 0  # a's turns did not move b's


def test_unknown_name_lists_the_names() -> None:
    with pytest.raises(
        ValueError, match="unknown routing policy 'fastest'; known: cache_aware, least_outstanding, random, round_robin"
    ):
        build_policy("fastest")


def test_unknown_argument_names_what_the_policy_takes() -> None:
    with pytest.raises(ValueError, match="'round_robin' does not take seed; it takes: no arguments"):
        build_policy("round_robin", seed=1)
    with pytest.raises(ValueError, match="does not take capacity"):
        build_policy("random", capacity=4)
    assert policy_parameters("random") == ("seed",)
