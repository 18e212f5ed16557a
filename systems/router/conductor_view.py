"""The real router's side of the disaggregation policies: cluster state and cost estimates behind
:class:`systems.policies.pd.PDClusterView`, so the router runs the simulator's ``PDScheduler`` unchanged.

Estimates (documented, calibrated online, never read from the engines' internals):

* prefill time = ``prefill_overhead_s + prefill_s_per_token * (prompt - reused)``; ``prefill_s_per_token``
  starts at the configured value and follows an exponential moving average of what the router measures
  (prefill request time / tokens computed);
* a prefill instance's queue = the estimated compute of the prefills routed to it and not yet answered;
* loading a prefix = fetched tokens * KV bytes per token / the pool's bandwidth (local hits are free);
* decode step (TBT) = ``decode_step_s + decode_step_s_per_seq * running``, also followed by a moving
  average of measured TPOT; KV room = the configured capacity minus the KV of the requests routed there.

What each prefill instance holds locally comes from vLLM's KV-cache events when the instances publish them
(:mod:`systems.router.kv_events`, reported as ``local_cache_source: kv_events``), else from the router's
own record of what it routed there (an LRU per instance of the configured capacity, ``routed``). What the
pool holds comes from Mooncake Store (:class:`systems.router.pool_index.PoolIndex`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

from systems.policies.cache_aware import BlockLRU
from systems.policies.pd import DecodeView, PrefillView, PrefixSource

EWMA = 0.2  # weight of a new measurement in the moving averages


@dataclass
class EstimateStart:
    """Starting values of the cost model (seconds, bytes): what ``engine.router_estimates`` configures."""

    prefill_overhead_s: float = 0.02
    prefill_s_per_token: float = 2e-4
    decode_step_s: float = 0.02
    decode_step_s_per_seq: float = 0.002
    pool_bytes_per_s: float = 5e8  # measured loopback TCP through the Mooncake transfer engine: 0.5-0.9 GB/s


@dataclass
class Estimates(EstimateStart):
    """Cost-model parameters (seconds, bytes); the router refines the two per-token rates as it runs."""

    kv_bytes_per_token: int = 4096
    decode_kv_capacity_tokens: int = 1 << 20
    local_capacity_tokens: int = 1 << 20

    def observe_prefill(self, seconds: float, computed_tokens: int) -> None:
        if computed_tokens > 0 and seconds > self.prefill_overhead_s:
            rate = (seconds - self.prefill_overhead_s) / computed_tokens
            self.prefill_s_per_token += EWMA * (rate - self.prefill_s_per_token)

    def observe_tpot(self, tpot_s: float, running: int) -> None:
        if tpot_s > 0 and math.isfinite(tpot_s):
            predicted = self.decode_step_s + self.decode_step_s_per_seq * max(running - 1, 0)
            self.decode_step_s += EWMA * (tpot_s - predicted)
            self.decode_step_s = max(self.decode_step_s, 1e-4)


@dataclass
class PrefillState:
    name: str
    local: BlockLRU
    outstanding: int = 0
    queued_work_s: float = 0.0


@dataclass
class DecodeState:
    name: str
    running: int = 0
    kv_tokens: int = 0
    alive: bool = True


@dataclass
class ClusterState:
    """Counters of the router's prefill and decode instances (event-loop thread only)."""

    prefill: list[PrefillState]
    decode: list[DecodeState]
    estimates: Estimates
    block_size: int
    local_cache_source: str = "routed"

    @classmethod
    def create(cls, prefill_names: Sequence[str], decode_names: Sequence[str], estimates: Estimates,
               block_size: int) -> ClusterState:
        capacity = max(1, estimates.local_capacity_tokens // block_size)
        return cls([PrefillState(n, BlockLRU(capacity)) for n in prefill_names],
                   [DecodeState(n) for n in decode_names], estimates, block_size)


class RouterPDView:
    """The :class:`~systems.policies.pd.PDClusterView` of one request, over a :class:`ClusterState`."""

    def __init__(self, state: ClusterState, hashes: Sequence[int], pool_prefix_tokens: int,
                 output_tokens: int, local_blocks: Optional[Callable[[int], int]] = None) -> None:
        self.state = state
        self.hashes = hashes
        self.pool_prefix_tokens = pool_prefix_tokens
        self.output_tokens = output_tokens
        self.local_blocks = local_blocks  # from the instances' KV-cache events; None: from what was routed

    def local_prefix_tokens(self, i: int) -> int:
        if self.local_blocks is not None:
            return self.local_blocks(i) * self.state.block_size
        return self.state.prefill[i].local.prefix_len(self.hashes) * self.state.block_size

    def prefill_views(self) -> Sequence[PrefillView]:
        return [PrefillView(p.name, p.queued_work_s, self.local_prefix_tokens(i), p.outstanding)
                for i, p in enumerate(self.state.prefill)]

    def decode_views(self, prompt_tokens: int, after_s: float) -> Sequence[DecodeView]:
        est = self.state.estimates
        views = []
        for d in self.state.decode:
            free = est.decode_kv_capacity_tokens - d.kv_tokens - prompt_tokens - self.output_tokens
            if not d.alive:
                free = -1
            step = est.decode_step_s + est.decode_step_s_per_seq * d.running
            views.append(DecodeView(d.name, d.running, free, step, step, free))
        return views

    def global_prefix(self) -> PrefixSource:
        return PrefixSource(self.pool_prefix_tokens, "pool" if self.pool_prefix_tokens else "")

    def prefill_time_s(self, index: int, prompt_tokens: int, cached_tokens: int) -> float:
        est = self.state.estimates
        return est.prefill_overhead_s + est.prefill_s_per_token * max(prompt_tokens - cached_tokens, 0)

    def load_time_s(self, index: int, local_tokens: int, fetched_tokens: int) -> float:
        est = self.state.estimates
        return fetched_tokens * est.kv_bytes_per_token / est.pool_bytes_per_s


def least_loaded_decode(state: ClusterState) -> Optional[int]:
    """The live decode instance with the fewest running requests (None when all are down)."""
    alive = [(d.running, i) for i, d in enumerate(state.decode) if d.alive]
    return min(alive)[1] if alive else None
