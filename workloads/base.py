"""The workload interface and the steps every workload shares.

A workload produces its requests in order (:meth:`Workload._load`); :meth:`Workload.requests` then applies,
for every kind in the same way: ``max_requests`` truncation, the arrival process, request ids 0..n-1,
a fixed ``output_length`` (trace replays), ``block_tokens`` rescaling, and the summary statistics.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import statistics
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import numpy as np

from vocab.records import RequestSpec
from workloads.arrivals import ArrivalSchedule, assign_arrivals
from workloads.config import WorkloadConfig, missing_keys
from workloads.errors import WorkloadConfigError, WorkloadError
from workloads.tokens import scale_blocks

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedRequests:
    """What a workload kind produces before the shared steps.

    ``specs`` are in arrival order; when ``timed`` their ``arrival_s`` is the trace time in seconds (used by
    trace replay), otherwise it is meaningless. ``stats`` holds kind-specific statistics.
    """

    specs: tuple[RequestSpec, ...]
    timed: bool
    source: str
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadRequests:
    """The requests of a run: specs (ids 0..n-1 in arrival order), how they are issued, and statistics."""

    specs: tuple[RequestSpec, ...]
    schedule: ArrivalSchedule
    stats: dict[str, Any]

    def __len__(self) -> int:
        return len(self.specs)


@dataclass(frozen=True)
class PrefixHitStats:
    """What an infinite prefix cache would get on a request sequence (blocks in the order given)."""

    block_refs: int  # block references (sum of len(hash_ids))
    unique_blocks: int  # distinct hash ids
    prefix_hit_blocks: int  # references whose whole prefix up to and including them was seen before
    reused_blocks: int  # references whose hash id was seen before (anywhere)
    prefix_hit_tokens: int  # prompt tokens in prefix-hit blocks
    input_tokens: int

    @property
    def prefix_hit_rate_blocks(self) -> float:
        return self.prefix_hit_blocks / self.block_refs if self.block_refs else math.nan

    @property
    def prefix_hit_rate_tokens(self) -> float:
        return self.prefix_hit_tokens / self.input_tokens if self.input_tokens else math.nan

    @property
    def block_reuse_rate(self) -> float:
        return self.reused_blocks / self.block_refs if self.block_refs else math.nan


def dense_block_ids(specs: Sequence[RequestSpec]) -> np.ndarray:
    """All hash ids, request after request, renumbered densely as 0..U-1 (U distinct ids)."""
    chained = itertools.chain.from_iterable(s.hash_ids for s in specs)
    try:
        flat = np.fromiter(chained, dtype=np.int64)
    except OverflowError:  # ids beyond int64: renumber in Python
        numbering: dict[int, int] = {}
        flat = np.array(
            [numbering.setdefault(h, len(numbering)) for s in specs for h in s.hash_ids], dtype=np.int64
        )
    return np.unique(flat, return_inverse=True)[1].reshape(-1)


def prefix_hit_stats(specs: Sequence[RequestSpec]) -> PrefixHitStats:
    """Leading-block hits of an infinite prefix cache: a block hits when its whole prefix was seen before.

    Exact (no hashing): prefix-tree nodes are numbered depth by depth, node = (parent node, hash id), and a
    block reference hits when its node already occurred in an earlier request.
    """
    n = len(specs)
    lengths = np.fromiter((len(s.hash_ids) for s in specs), dtype=np.int64, count=n)
    input_len = np.fromiter((s.input_length for s in specs), dtype=np.int64, count=n)
    block_size = np.fromiter((s.block_size for s in specs), dtype=np.int64, count=n)
    refs = int(lengths.sum())
    if refs == 0:
        return PrefixHitStats(0, 0, 0, 0, 0, int(input_len.sum()))
    dense = dense_block_ids(specs)
    n_unique = int(dense.max()) + 1
    starts = np.cumsum(lengths) - lengths
    parent = np.full(n, -1, dtype=np.int64)  # node of each request's prefix so far
    alive = np.arange(n)
    hits = hit_tokens = next_node = 0
    for depth in range(int(lengths.max())):
        alive = alive[lengths[alive] > depth]
        key = (parent[alive] + 1) * n_unique + dense[starts[alive] + depth]
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        hit = first[inverse] != np.arange(len(alive))
        if hit.any():
            rows = alive[hit]
            tokens = np.minimum(block_size[rows], input_len[rows] - depth * block_size[rows])
            hits += int(hit.sum())
            hit_tokens += int(np.clip(tokens, 0, None).sum())
        parent[alive] = next_node + inverse
        next_node += len(uniq)
    return PrefixHitStats(refs, n_unique, hits, refs - n_unique, hit_tokens, int(input_len.sum()))


def _same_float(value: Any, t: float) -> bool:
    """Whether ``value`` is the float ``t`` itself (type, value and sign of zero)."""
    return type(value) is float and value == t and math.copysign(1.0, value) == math.copysign(1.0, t)


def _mean(values: Sequence[int]) -> float:
    return float(statistics.fmean(values)) if values else math.nan


def _median(values: Sequence[int]) -> float:
    return float(statistics.median(values)) if values else math.nan


def describe_specs(specs: Sequence[RequestSpec]) -> dict[str, Any]:
    """Length and prefix-sharing statistics of ``specs`` (JSON-friendly plain numbers)."""
    inputs = [s.input_length for s in specs]
    outputs = [s.output_length for s in specs]
    hit = prefix_hit_stats(specs)
    return {
        "n_requests": len(specs),
        "input_len_mean": _mean(inputs),
        "input_len_median": _median(inputs),
        "input_len_min": min(inputs) if inputs else 0,
        "input_len_max": max(inputs) if inputs else 0,
        "output_len_mean": _mean(outputs),
        "output_len_median": _median(outputs),
        "output_len_min": min(outputs) if outputs else 0,
        "output_len_max": max(outputs) if outputs else 0,
        "total_input_tokens": int(sum(inputs)),
        "total_output_tokens": int(sum(outputs)),
        "n_block_refs": hit.block_refs,
        "n_unique_blocks": hit.unique_blocks,
        "prefix_hit_rate_blocks": hit.prefix_hit_rate_blocks,
        "prefix_hit_rate_tokens": hit.prefix_hit_rate_tokens,
        "block_reuse_rate": hit.block_reuse_rate,
    }


class Workload(ABC):
    """One kind of workload. Subclasses set ``kind`` and ``config_cls`` and implement :meth:`_load`."""

    kind: ClassVar[str]
    config_cls: ClassVar[type[WorkloadConfig]]

    def __init__(self, cfg: WorkloadConfig, data_dir: Optional[str] = None) -> None:
        if not isinstance(cfg, self.config_cls):
            raise WorkloadConfigError(
                f"workload: {type(self).__name__} needs a {self.config_cls.__name__}, got {type(cfg).__name__} "
                "(use workloads.build_workload to build from a DictConfig or a dict)"
            )
        missing = missing_keys(cfg)
        if missing:
            raise WorkloadConfigError(
                f"{missing[0]}: missing required value (all missing: {', '.join(missing)})"
            )
        if cfg.kind != self.kind:
            raise WorkloadConfigError(
                f"workload.kind: {type(self).__name__} builds {self.kind!r}, got {cfg.kind!r}"
            )
        cfg.arrival.validate()
        self.cfg = cfg
        self.data_dir = data_dir

    @abstractmethod
    def _load(self) -> LoadedRequests:
        """All requests of this workload in arrival order, before truncation, arrivals and rescaling."""

    def requests(self) -> WorkloadRequests:
        """The run's requests: truncated, scheduled, numbered 0..n-1, rescaled, with statistics."""
        loaded = self._load()
        cfg = self.cfg
        specs = loaded.specs
        if cfg.max_requests is not None:
            specs = specs[: cfg.max_requests]
        if not specs:
            raise WorkloadError(f"workload {cfg.name!r}: no requests (source {loaded.source})")
        trace_times = np.array([s.arrival_s for s in specs], dtype=np.float64) if loaded.timed else None
        times, schedule = assign_arrivals(len(specs), cfg.arrival, trace_times)
        source_block_size = specs[0].block_size
        output_length = getattr(cfg, "output_length", None)  # trace replays may fix every output's length
        out = []
        for i, (spec, t) in enumerate(zip(specs, times.tolist(), strict=True)):
            if spec.request_id != i or not _same_float(spec.arrival_s, t):  # a trace replayed as is keeps its specs
                spec = dataclasses.replace(spec, request_id=i, arrival_s=t)
            if output_length is not None:
                spec = dataclasses.replace(spec, output_length=output_length)
            if cfg.block_tokens is not None:
                spec = scale_blocks(spec, cfg.block_tokens)
            out.append(spec)
        final = tuple(out)
        stats: dict[str, Any] = {
            "name": cfg.name,
            "kind": self.kind,
            "source": loaded.source,
            "n_loaded": len(loaded.specs),
            "max_requests": cfg.max_requests,
            "n_skipped_rows": 0,
            "skipped_reasons": {},
        }
        stats.update(loaded.stats)
        stats.update(describe_specs(final))
        stats.update(
            {
                "block_size": final[0].block_size,
                "source_block_size": source_block_size,
                "block_tokens": cfg.block_tokens,
                "arrival_kind": cfg.arrival.kind,
                "arrival_rate_rps": cfg.arrival.rate_rps,
                "arrival_cv": cfg.arrival.cv,
                "arrival_time_scale": cfg.arrival.time_scale,
                "arrival_concurrency": cfg.arrival.concurrency,
                "arrival_seed": cfg.arrival.seed,
                "schedule_mode": schedule.mode,
                "concurrency": schedule.concurrency,
                "offered_rate_rps": schedule.offered_rate_rps,
                "duration_s": schedule.duration_s,
            }
        )
        logger.info(
            "workload %s (%s): %d requests from %s, offered %.3g req/s, infinite-cache prefix hit rate %.3f",
            cfg.name,
            self.kind,
            len(final),
            loaded.source,
            schedule.offered_rate_rps,
            stats["prefix_hit_rate_blocks"],
        )
        return WorkloadRequests(specs=final, schedule=schedule, stats=stats)
