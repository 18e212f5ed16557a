"""Routing policies: plain, synchronous objects over a cluster-state view, driven by the simulator and the router.
Their block LRU and outstanding-count index are imported from the compiled core when it is built
(:mod:`systems.compiled_core`)."""

from systems.compiled_core import package_path

__path__ = package_path(__name__, __path__)

from systems.policies.base import (
    IndexedLoads,
    InstanceLoad,
    OutstandingIndex,
    RouteRequest,
    RoutingPolicy,
    TieBreaker,
)
from systems.policies.cache_aware import BlockLRU, CacheAwarePolicy
from systems.policies.hashing import block_hashes, byte_block_hashes, chain_block_ids, spec_block_hashes
from systems.policies.registry import POLICY_NAMES, build_policy, policy_class, policy_parameters
from systems.policies.simple import LeastOutstandingPolicy, RandomPolicy, RoundRobinPolicy

__all__ = [
    "POLICY_NAMES",
    "BlockLRU",
    "CacheAwarePolicy",
    "IndexedLoads",
    "InstanceLoad",
    "LeastOutstandingPolicy",
    "OutstandingIndex",
    "RandomPolicy",
    "RoundRobinPolicy",
    "RouteRequest",
    "RoutingPolicy",
    "TieBreaker",
    "block_hashes",
    "build_policy",
    "byte_block_hashes",
    "chain_block_ids",
    "policy_class",
    "policy_parameters",
    "spec_block_hashes",
]
