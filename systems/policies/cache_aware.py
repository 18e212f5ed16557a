"""Cache-aware routing: send a request where the longest prefix of its blocks is already cached.

The policy cannot see inside the engines, so its source of truth is its own *routed history*: per
instance, an LRU set of the block hashes of the requests it routed there (``on_routed``), capped at
``capacity_blocks_per_instance`` blocks (``None``: never forget). A request's blocks are recorded last
block first, so within one request the leading blocks are the most recent and are evicted last, as in
vLLM, whose prefix cache frees a request's blocks tail first; a chain whose head was evicted is useless.

Decision, for a request with chained block hashes ``h_0..h_{n-1}``:

1. Load guard (``max_imbalance``, ``None``: off): only instances whose outstanding count is at most the
   cluster minimum plus ``max_imbalance`` are candidates. Pure cache-aware routing otherwise piles every
   request sharing a popular first block onto one instance (seen on the Mooncake conversation trace).
2. Score each candidate ``match_blocks - load_weight * outstanding``, where ``match_blocks`` is the
   number of leading hashes present in its record. ``load_weight = 0`` (default) is pure longest-prefix.
3. Highest score wins; ties (including "no match anywhere") go to the fewest outstanding requests, then
   round-robin among those (see :class:`~systems.policies.base.TieBreaker`).

The policy also keeps, for every block hash it has recorded, the bit set of the instances holding it. Given
an :class:`~systems.policies.base.IndexedLoads` and ``load_weight = 0``, it finds the longest match by
intersecting those sets along the request's hashes and the least-loaded tied instance from the driver's
outstanding index, instead of scoring every instance: the same answer in about ``log n`` steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Optional

from systems.policies.base import (
    IndexedLoads,
    InstanceLoad,
    OutstandingIndex,
    RouteRequest,
    RoutingPolicy,
    TieBreaker,
    least_outstanding,
)
from systems.policies.block_lru import BlockLRU

__all__ = ["BlockLRU", "CacheAwarePolicy"]

_SCORE_TOL = 1e-9


class CacheAwarePolicy(RoutingPolicy):
    """Longest-prefix-match routing over the policy's own routed history (see the module docstring)."""

    name: ClassVar[str] = "cache_aware"
    source_of_truth: ClassVar[str] = "routed-history"
    needs_prompt: ClassVar[bool] = True

    def __init__(
        self,
        block_size: int = 128,
        capacity_blocks_per_instance: Optional[int] = None,
        load_weight: float = 0.0,
        max_imbalance: Optional[int] = None,
    ) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if load_weight < 0:
            raise ValueError(f"load_weight must be >= 0, got {load_weight}")
        if max_imbalance is not None and max_imbalance < 0:
            raise ValueError(f"max_imbalance must be >= 0 or None, got {max_imbalance}")
        if capacity_blocks_per_instance is not None and capacity_blocks_per_instance <= 0:
            raise ValueError(
                f"capacity_blocks_per_instance must be positive or None, got {capacity_blocks_per_instance}"
            )
        self.block_size = block_size
        self.capacity_blocks_per_instance = capacity_blocks_per_instance
        self.load_weight = float(load_weight)
        self.max_imbalance = max_imbalance
        self._caches: list[BlockLRU] = []
        self._holders: dict[int, int] = {}  # block hash -> bit set of the instances whose record holds it
        self._ties = TieBreaker()

    def _cache(self, index: int) -> BlockLRU:
        holders = self._holders
        while len(self._caches) <= index:
            bit = 1 << len(self._caches)

            def inserted(h: int, bit: int = bit) -> None:
                holders[h] = holders.get(h, 0) | bit

            def evicted(h: int, bit: int = bit) -> None:
                left = holders[h] ^ bit
                if left:
                    holders[h] = left
                else:
                    del holders[h]

            self._caches.append(BlockLRU(self.capacity_blocks_per_instance, on_evict=evicted, on_insert=inserted))
        return self._caches[index]

    def prefix_match(self, req: RouteRequest, index: int) -> int:
        """Leading blocks of ``req`` that instance ``index`` holds according to the routed history."""
        return self._cache(index).prefix_len(req.block_hashes)

    def cached_blocks(self, index: int) -> int:
        """Number of blocks recorded for instance ``index``."""
        return len(self._cache(index))

    def choose(self, req: RouteRequest, instances: Sequence[InstanceLoad]) -> int:
        n = len(instances)
        if n == 0:
            raise ValueError("cannot route: no instances")
        self._cache(n - 1)
        if isinstance(instances, IndexedLoads) and self.load_weight == 0:
            return self._choose_indexed(req, n, instances.outstanding_index)
        candidates: Sequence[int] = range(n)
        if self.max_imbalance is not None:
            limit = min(inst.outstanding for inst in instances) + self.max_imbalance
            candidates = [i for i in range(n) if instances[i].outstanding <= limit]
        hashes = req.block_hashes
        w = self.load_weight
        scores = [self._caches[i].prefix_len(hashes) - w * instances[i].outstanding for i in candidates]
        best = max(scores)
        tied = [i for i, s in zip(candidates, scores, strict=True) if s >= best - _SCORE_TOL]
        return least_outstanding(instances, self._ties, among=tied)

    def _choose_indexed(self, req: RouteRequest, n: int, index: OutstandingIndex) -> int:
        """``choose`` with ``load_weight == 0`` from the holder sets and the outstanding index (module docstring)."""
        candidates = (1 << n) - 1
        if self.max_imbalance is not None:
            candidates = index.at_most(index.min_value() + self.max_imbalance)
        tied = candidates  # the longest match (all candidates when none matches a first block)
        holders = self._holders
        for h in req.block_hashes:
            deeper = tied & holders.get(h, 0)
            if not deeper:
                break
            tied = deeper
        return self._ties.pick_mask(index.least(tied), n)

    def on_routed(self, req: RouteRequest, index: int) -> None:
        self._cache(index).record(req.block_hashes)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "block_size": self.block_size,
            "capacity_blocks_per_instance": self.capacity_blocks_per_instance,
            "load_weight": self.load_weight,
            "max_imbalance": self.max_imbalance,
            "tie_break": "least_outstanding, then round_robin",
        }
