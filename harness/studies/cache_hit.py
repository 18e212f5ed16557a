"""``job=cache_study``: Mooncake's prefix-cache question on real traces.

For each trace, the ``hash_ids`` are replayed in timestamp order through block caches of every
configured capacity and eviction policy, giving the prefix hit rate in blocks and in tokens; then a
global pool shared by N prefill instances is compared with N private caches of the same
per-instance capacity under each routing policy. Writes ``cache_hit.csv``, ``global_local.csv``,
per-request hits in ``requests.parquet`` and the figures.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from harness.config import Config
from harness.jobs import JobResult
from harness.results import RunFolder
from systems.kvcache import (
    EvictionPolicy,
    ReplayRouting,
    flatten_blocks,
    hit_rates,
    replay_global_vs_local,
    replay_prefix_hits,
)
from vocab.errors import ConfigError
from vocab.result_files import CACHE_HIT_FILE, GLOBAL_LOCAL_FILE, REQUESTS_FILE
from workloads.config import MooncakeTraceConfig
from workloads.registry import build_workload

log = logging.getLogger(__name__)



def capacity_label(capacity: int | None) -> str:
    """Human label of a capacity in blocks: 1k, 10k, ..., inf."""
    if capacity is None:
        return "inf"
    return f"{capacity // 1000}k" if capacity % 1000 == 0 else str(capacity)


def _parse_enum(enum_type: type, values: list[str], key: str) -> list[Any]:
    known = [e.value for e in enum_type]
    bad = [v for v in values if v not in known]
    if bad:
        raise ConfigError(f"{key}: unknown value(s) {bad}; expected any of {known}")
    return [enum_type(v) for v in values]


def run_cache_study(cfg: Config, folder: RunFolder) -> JobResult:
    study = cfg.cache_study
    if not study.traces:
        raise ConfigError("cache_study.traces: no traces given (label: file under the data directory)")
    policies = _parse_enum(EvictionPolicy, list(study.policies), "cache_study.policies")
    routings = _parse_enum(ReplayRouting, list(study.global_local.routings), "cache_study.global_local.routings")
    gl_policy = _parse_enum(EvictionPolicy, [study.global_local.policy], "cache_study.global_local.policy")[0]

    curve_rows: list[dict[str, Any]] = []
    gl_rows: list[dict[str, Any]] = []
    per_request: list[pd.DataFrame] = []
    workload_stats: dict[str, Any] = {}
    replay_s = 0.0
    n_points = len(study.traces) * (len(policies) * len(study.cache_sizes)
                                   + len(routings) * len(study.global_local.cache_sizes_per_instance))
    loaded = {}
    for label, file in study.traces.items():  # load and validate every trace before computing anything
        wcfg = MooncakeTraceConfig(name=label, kind="mooncake_trace", file=file,
                                   block_size=study.block_size, strict=study.strict)
        loaded[label] = build_workload(wcfg, data_dir=cfg.data_dir).requests()
        workload_stats[label] = dict(loaded[label].stats)
    progress = tqdm(total=n_points, desc="cache study", unit="point")
    for label, requests in loaded.items():
        specs = requests.specs
        dense_ids, offsets = flatten_blocks([s.hash_ids for s in specs])
        n_blocks = np.diff(offsets)
        input_lengths = np.fromiter((s.input_length for s in specs), dtype=np.int64, count=len(specs))
        request_ids = np.fromiter((s.request_id for s in specs), dtype=np.int64, count=len(specs))

        for policy in policies:
            for capacity in study.cache_sizes:
                start = time.perf_counter()
                hits = replay_prefix_hits(dense_ids, offsets, capacity, policy)
                replay_s += time.perf_counter() - start
                block_rate, token_rate = hit_rates(hits, n_blocks, input_lengths, study.block_size)
                curve_rows.append({
                    "trace": label, "policy": policy.value, "capacity_blocks": capacity,
                    "capacity": capacity_label(capacity), "hit_rate_blocks": block_rate,
                    "hit_rate_tokens": token_rate, "n_requests": len(specs), "n_block_refs": int(n_blocks.sum()),
                })
                per_request.append(pd.DataFrame({
                    "trace": label, "request_id": request_ids, "policy": policy.value,
                    "capacity": capacity_label(capacity), "n_blocks": n_blocks, "input_length": input_lengths,
                    "hit_blocks": hits,
                    "hit_tokens": np.minimum(hits * study.block_size, input_lengths),
                }))
                progress.update()

        for capacity in study.global_local.cache_sizes_per_instance:
            for routing in routings:
                start = time.perf_counter()
                result = replay_global_vs_local(dense_ids, offsets, study.global_local.n_instances, capacity,
                                                gl_policy, routing, seed=cfg.seed)
                replay_s += time.perf_counter() - start
                local_b, local_t = hit_rates(result.local_hits, n_blocks, input_lengths, study.block_size)
                global_b, global_t = hit_rates(result.global_hits, n_blocks, input_lengths, study.block_size)
                gl_rows.append({
                    "trace": label, "routing": routing.value, "policy": gl_policy.value,
                    "n_instances": study.global_local.n_instances, "capacity_per_instance": capacity,
                    "local_hit_rate_blocks": local_b, "global_hit_rate_blocks": global_b,
                    "local_hit_rate_tokens": local_t, "global_hit_rate_tokens": global_t,
                    "global_over_local_blocks": global_b / local_b if local_b > 0 else float("inf"),
                    "global_over_local_tokens": global_t / local_t if local_t > 0 else float("inf"),
                })
                progress.update()
    progress.close()

    curve = pd.DataFrame(curve_rows)
    global_local = pd.DataFrame(gl_rows)
    folder.write_table(CACHE_HIT_FILE, curve)
    folder.write_table(GLOBAL_LOCAL_FILE, global_local)
    request_table = pd.concat(per_request, ignore_index=True)
    folder.write_table(REQUESTS_FILE, request_table)
    log.info("cache study: %d curve points and %d global/local points replayed in %.2f s",
             len(curve), len(global_local), replay_s)
    for row in curve.itertuples():
        log.info("  %-12s %-12s %5s  hit rate %.4f (blocks) %.4f (tokens)", row.trace, row.policy,
                 row.capacity, row.hit_rate_blocks, row.hit_rate_tokens)
    for row in global_local.itertuples():
        log.info("  %-12s %-12s %6d blocks/instance  local %.4f  global %.4f  global/local %.3f",
                 row.trace, row.routing, row.capacity_per_instance, row.local_hit_rate_blocks,
                 row.global_hit_rate_blocks, row.global_over_local_blocks)

    metrics: dict[str, Any] = {"replay_seconds": replay_s, "hit_rate_blocks": {}, "hit_rate_tokens": {},
                               "global_over_local_blocks": {}}
    for row in curve.itertuples():
        metrics["hit_rate_blocks"].setdefault(row.trace, {}).setdefault(row.policy, {})[row.capacity] = row.hit_rate_blocks
        metrics["hit_rate_tokens"].setdefault(row.trace, {}).setdefault(row.policy, {})[row.capacity] = row.hit_rate_tokens
    for row in global_local.itertuples():
        metrics["global_over_local_blocks"].setdefault(row.trace, {}).setdefault(row.routing, {})[
            capacity_label(row.capacity_per_instance)] = row.global_over_local_blocks
    return JobResult(
        metrics=metrics,
        workload=workload_stats,
        files={"cache_hit": CACHE_HIT_FILE, "global_local": GLOBAL_LOCAL_FILE, "requests": REQUESTS_FILE},
        tables={"cache_hit": curve, "global_local": global_local},
    )
