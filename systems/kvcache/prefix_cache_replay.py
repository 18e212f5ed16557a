"""Trace-driven prefix-cache replay: Mooncake's cache study (FAST'25 §5.3, arXiv 2407.00079 §4).

Replays the ``hash_ids`` (512-token prefix blocks) of a request trace, in timestamp order, through a
block cache and reports, per request, how many *leading* blocks were already cached.

Semantics (exact):

* Input: requests in order; request ``r`` has blocks ``b_0..b_{n-1}``, dense ints ``0..U-1`` (use
  :func:`flatten_blocks` to remap arbitrary hash ids), stored flat with CSR offsets.
* For each request, first LOOK UP: the prefix hit is the largest ``k`` such that ``b_0..b_{k-1}`` are all
  in the cache, before this request inserts anything. Then ACCESS all ``n`` blocks in order, each access
  advancing a logical clock by one: a cached block is touched (count += 1, recency = now, position = its
  index in this request); a missing block is inserted (count = 1, recency = now, position = its index),
  evicting one victim first when the cache is full. The victim may be any cached block, including one
  this same request has just touched or inserted; this only matters when a request has more blocks than
  the capacity (then its own early blocks can be evicted by its late ones). A block id repeated inside a
  request is a touch the second time.
* ``capacity``: number of blocks; ``None`` or ``0`` means infinite (never evict). A capacity at least the
  number of distinct blocks never evicts either, so it gives the infinite result.
* :attr:`EvictionPolicy.LRU`: evict the least recently accessed block.
* :attr:`EvictionPolicy.LFU`: evict the block with the lowest access count since it entered the cache (the
  count restarts at 1 when an evicted block comes back); ties -> least recently accessed.
* :attr:`EvictionPolicy.LENGTH_AWARE` (Mooncake's LengthAwareCache idea: blocks late in a request are less
  likely to be shared): among the blocks with the lowest count, evict the one with the largest position in
  the request where it was last accessed; ties -> least recently accessed.
* Global vs local (:func:`replay_global_vs_local`): *local* is N private caches of
  ``capacity_per_instance`` blocks each, every request looked up and accessed only in the cache of the
  instance it is routed to; *global* is one cache of ``N * capacity_per_instance`` blocks that every
  instance reads, so routing does not change its hits. Routing (:class:`ReplayRouting`): ``random``
  (uniform, from ``np.random.default_rng(seed)``), ``round_robin`` (request ``r`` -> ``r mod N``) or
  ``cache_aware`` (the instance whose private cache holds the longest prefix of the request; ties -> the
  instance with the fewest requests routed so far, then the lowest index).
* Token hits (:func:`hit_rates`): a request's hit tokens are ``min(hit_blocks * block_size, input_length)``.

The replay runs in numba kernels (:mod:`systems.kvcache._replay_kernels`) over dense arrays: blocks sit in
linked-list buckets keyed by (count, position) as each policy needs, so an access is O(1) amortised.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

import numpy as np

from systems.kvcache import _replay_kernels as _k

logger = logging.getLogger(__name__)

__all__ = [
    "EvictionPolicy",
    "GlobalLocalResult",
    "ReplayRouting",
    "flatten_blocks",
    "hit_rates",
    "precompile",
    "replay_global_vs_local",
    "replay_prefix_hits",
    "replay_sweep",
]


class EvictionPolicy(StrEnum):
    """Which cached block a full cache evicts."""

    LRU = "lru"
    LFU = "lfu"
    LENGTH_AWARE = "length_aware"


class ReplayRouting(StrEnum):
    """How requests are spread over prefill instances in the local (private caches) setting."""

    RANDOM = "random"
    ROUND_ROBIN = "round_robin"
    CACHE_AWARE = "cache_aware"


_POLICY_CODE = {
    EvictionPolicy.LRU: _k.POLICY_LRU,
    EvictionPolicy.LFU: _k.POLICY_LFU,
    EvictionPolicy.LENGTH_AWARE: _k.POLICY_LENGTH_AWARE,
}


# Bucket keys beyond this live in the kernels' overflow heap (bounded memory for very frequent blocks).
_MAX_DENSE_BUCKETS = 1 << 16
# Kernel state is indexed by block id: ids far above the number of references must be remapped first.
_MAX_SPARSE_IDS = 1 << 24


@dataclass(frozen=True)
class GlobalLocalResult:
    """Per-request prefix hits (in blocks) of the local and the global setting, and the routing used."""

    local_hits: np.ndarray
    global_hits: np.ndarray
    instance: np.ndarray
    n_instances: int
    capacity_per_instance: Optional[int]
    routing: ReplayRouting


def flatten_blocks(hash_id_lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Remap arbitrary hash ids to dense ints and flatten: returns (dense_ids int64, offsets int64).

    ``offsets`` has length ``n_requests + 1``; request ``r`` owns ``dense_ids[offsets[r]:offsets[r+1]]``.
    Dense ids are the ranks of the hash ids among the distinct ones (``np.unique(..., return_inverse)``).
    """
    lengths = np.fromiter((len(h) for h in hash_id_lists), dtype=np.int64, count=len(hash_id_lists))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=np.int64), offsets
    flat = np.fromiter((h for hs in hash_id_lists for h in hs), dtype=np.int64, count=total)
    _, inverse = np.unique(flat, return_inverse=True)
    return inverse.astype(np.int64, copy=False).reshape(-1), offsets


def _validate(dense_ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Return contiguous int64 copies/views, the number of distinct ids U and the longest request."""
    dense = np.ascontiguousarray(dense_ids, dtype=np.int64)
    offs = np.ascontiguousarray(offsets, dtype=np.int64)
    if dense.ndim != 1 or offs.ndim != 1 or offs.shape[0] < 1:
        raise ValueError("dense_ids and offsets must be 1-D, offsets of length n_requests + 1")
    if offs[0] != 0 or offs[-1] != dense.shape[0] or np.any(np.diff(offs) < 0):
        raise ValueError("offsets must start at 0, never decrease and end at len(dense_ids)")
    if dense.shape[0] and dense.min() < 0:
        raise ValueError("dense_ids must be non-negative (use flatten_blocks)")
    n_unique = int(dense.max()) + 1 if dense.shape[0] else 0
    if n_unique > max(4 * dense.shape[0], _MAX_SPARSE_IDS):
        raise ValueError(
            f"block ids go up to {n_unique - 1} for {dense.shape[0]} references: remap them with flatten_blocks"
        )
    max_len = int(np.diff(offs).max()) if offs.shape[0] > 1 else 0
    return dense, offs, n_unique, max_len


def _n_buckets(policy: EvictionPolicy, dense: np.ndarray, max_len: int) -> int:
    """Dense bucket keys the kernel keeps (larger keys go to its overflow heap)."""
    if policy is EvictionPolicy.LRU or dense.shape[0] == 0:
        return 1
    max_count = int(np.bincount(dense).max())  # no block can be accessed more often than this
    n_keys = max_count if policy is EvictionPolicy.LFU else max_count * max(max_len, 1)
    return max(1, min(n_keys, _MAX_DENSE_BUCKETS))


def _capacity(capacity: Optional[int]) -> int:
    """0 for infinite, else the positive capacity."""
    if capacity is None:
        return 0
    cap = int(capacity)
    if cap < 0:
        raise ValueError(f"capacity must be None, 0 (infinite) or positive, got {capacity}")
    return cap


def replay_prefix_hits(
    dense_ids: np.ndarray,
    offsets: np.ndarray,
    capacity: Optional[int],
    policy: EvictionPolicy | str = EvictionPolicy.LRU,
) -> np.ndarray:
    """Prefix hit blocks per request (int64) for one cache of ``capacity`` blocks under ``policy``."""
    pol = EvictionPolicy(policy)
    dense, offs, n_unique, max_len = _validate(dense_ids, offsets)
    cap = _capacity(capacity)
    if cap == 0 or cap >= n_unique:
        return _k.replay_infinite(dense, offs, max(n_unique, 1))
    return _k.replay_finite(
        dense, offs, n_unique, cap, _POLICY_CODE[pol], max(max_len, 1), _n_buckets(pol, dense, max_len)
    )


def replay_sweep(
    dense_ids: np.ndarray,
    offsets: np.ndarray,
    capacities: Iterable[Optional[int]],
    policies: Iterable[EvictionPolicy | str] = tuple(EvictionPolicy),
) -> dict[tuple[EvictionPolicy, Optional[int]], np.ndarray]:
    """:func:`replay_prefix_hits` for every (policy, capacity) pair, keyed by ``(policy, capacity)``."""
    caps = list(capacities)
    out: dict[tuple[EvictionPolicy, Optional[int]], np.ndarray] = {}
    for policy in policies:
        pol = EvictionPolicy(policy)
        for cap in caps:
            out[(pol, cap)] = replay_prefix_hits(dense_ids, offsets, cap, pol)
    return out


def replay_global_vs_local(
    dense_ids: np.ndarray,
    offsets: np.ndarray,
    n_instances: int,
    capacity_per_instance: Optional[int],
    policy: EvictionPolicy | str = EvictionPolicy.LRU,
    routing: ReplayRouting | str = ReplayRouting.ROUND_ROBIN,
    seed: int = 0,
) -> GlobalLocalResult:
    """Compare N private caches (local, requests routed by ``routing``) with one shared pool (global)."""
    pol = EvictionPolicy(policy)
    route = ReplayRouting(routing)
    if int(n_instances) < 1:
        raise ValueError(f"n_instances must be >= 1, got {n_instances}")
    n_inst = int(n_instances)
    dense, offs, n_unique, max_len = _validate(dense_ids, offsets)
    cap = _capacity(capacity_per_instance)
    n_req = offs.shape[0] - 1
    if route is ReplayRouting.RANDOM:
        preassigned = np.random.default_rng(seed).integers(0, n_inst, size=n_req, dtype=np.int64)
    else:
        preassigned = np.arange(n_req, dtype=np.int64) % n_inst
    n_unique = max(n_unique, 1)
    local_cap = n_unique if cap == 0 or cap >= n_unique else cap  # n_unique blocks never evict
    local_hits, instance = _k.replay_local(
        dense,
        offs,
        n_unique,
        n_inst,
        local_cap,
        _POLICY_CODE[pol],
        max(max_len, 1),
        _n_buckets(pol, dense, max_len),
        route is ReplayRouting.CACHE_AWARE,
        preassigned,
    )
    global_hits = replay_prefix_hits(dense, offs, cap * n_inst, pol)
    logger.debug(
        "global vs local: %d instances x %s blocks, %s, %s: local %d, global %d hit blocks",
        n_inst,
        capacity_per_instance,
        pol,
        route,
        int(local_hits.sum()),
        int(global_hits.sum()),
    )
    return GlobalLocalResult(
        local_hits=local_hits,
        global_hits=global_hits,
        instance=instance,
        n_instances=n_inst,
        capacity_per_instance=capacity_per_instance,
        routing=route,
    )


def hit_rates(
    hit_blocks: np.ndarray,
    n_blocks: np.ndarray,
    input_lengths: np.ndarray,
    block_size: int = 512,
) -> tuple[float, float]:
    """(block hit rate, token hit rate) summed over requests.

    Block rate = sum(hit_blocks) / sum(n_blocks); token rate = sum(min(hit_blocks * block_size,
    input_length)) / sum(input_length). An empty denominator gives 0.0.
    """
    hits = np.asarray(hit_blocks, dtype=np.int64)
    blocks = np.asarray(n_blocks, dtype=np.int64)
    lengths = np.asarray(input_lengths, dtype=np.int64)
    total_blocks = int(blocks.sum())
    total_tokens = int(lengths.sum())
    block_rate = float(hits.sum()) / total_blocks if total_blocks else 0.0
    token_rate = (
        float(np.minimum(hits * int(block_size), lengths).sum()) / total_tokens if total_tokens else 0.0
    )
    return block_rate, token_rate


def precompile() -> None:
    """Compile every kernel once on a tiny trace so numba's on-disk cache is filled.

    The first compile takes a few seconds; ``make`` runs this at set-up so studies and benchmarks in
    later processes load the cached machine code instead.
    """
    dense, offsets = flatten_blocks([[0, 1, 2], [0, 1, 3], [4]])
    for policy in EvictionPolicy:
        replay_prefix_hits(dense, offsets, 2, policy)
        replay_prefix_hits(dense, offsets, None, policy)
        for routing in ReplayRouting:
            replay_global_vs_local(dense, offsets, 2, 1, policy, routing, seed=0)
