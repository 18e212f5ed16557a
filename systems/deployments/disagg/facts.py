"""What a disaggregated deployment learns about each point from its own files and counters, joined onto
the load generator's records.

* the router's per-request log (``router_requests.jsonl``): prefill and decode seconds, prefix tokens
  found locally and in the pool, the router's estimates;
* the prefill instances' KV transfer log (``kv_transfers.jsonl``, written by
  :mod:`systems.launch.kv_connectors`): seconds and bytes per transfer id;
* the prefill instances' logs: requests recomputed after a failed pool read (``Recovered from KV load
  failure``) and blocks the pool refused (``save_put_failed_keys``);
* their ``/metrics``: prompt tokens computed, found in their own cache or loaded from the pool, and
  refused pool puts.

Every reader takes a byte offset, so a point reads only what was written during it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from systems.launch.processes import http_get
from systems.launch.prometheus import parse_metrics
from vocab.records import RequestRecord

RECOVERED = re.compile(r"Recovered from KV load failure: (\d+) request")
FAILED_PUT = re.compile(r"'save_put_failed_keys': (\d+)")  # vLLM's periodic "KV Transfer metrics" line
ROUTER_FACTS = ("prefill_s", "decode_s", "pool_prefix_tokens", "local_prefix_tokens", "prefill_cached_tokens",
                "est_ttft_s", "reuse_tokens", "fetch_tokens")


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_jsonl(path: Path, offset: int) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as fh:
        fh.seek(offset)
        return [json.loads(line) for line in fh if line.strip()]


def count_in_log(path: Path, offset: int, pattern: re.Pattern[str]) -> int:
    """Sum of the first group of ``pattern`` over the log lines after ``offset``: with ``RECOVERED``, the
    requests a prefill recomputed after a failed KV load; with ``FAILED_PUT``, the blocks the pool refused."""
    if not path.exists():
        return 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.seek(offset)
        return sum(int(m.group(1)) for line in fh if (m := pattern.search(line)))


def count_recovered(path: Path, offset: int) -> int:
    """Requests a prefill instance recomputed after a failed KV load (vLLM's 'Recovered from KV load failure')."""
    return count_in_log(path, offset, RECOVERED)


def count_failed_puts(path: Path, offset: int) -> int:
    """Blocks the pool refused to store (e.g. when it is full), from the ``save_put_failed_keys`` of vLLM's
    periodic (every 10 s) "KV Transfer metrics" log lines; :func:`store_failed_puts` reads the same counter
    from ``/metrics`` without waiting for the next line."""
    return count_in_log(path, offset, FAILED_PUT)


def transfer_by_id(transfers: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """``transfer_id -> (seconds, bytes)``; a batch carrying several requests is split by their blocks."""
    out: dict[str, tuple[float, float]] = {}
    for t in transfers:
        if not t.get("ok", True):
            continue
        ids, blocks = t.get("transfer_ids", []), t.get("blocks", [])
        weights = blocks if len(blocks) == len(ids) and sum(blocks) else [1] * len(ids)
        total = sum(weights) or 1
        for k, tid in enumerate(ids):
            share = weights[k] / total
            s, b = out.get(tid, (0.0, 0.0))
            out[tid] = (s + float(t["duration_s"]), b + float(t["bytes"]) * share)
    return out


def attach_router_facts(records: tuple[RequestRecord, ...], routed: list[dict[str, Any]],
                        transfers: list[dict[str, Any]]) -> tuple[RequestRecord, ...]:
    """Add the router's and the engines' per-request numbers to ``extra``: ``prefill_s``, ``decode_s``,
    ``kv_transfer_s``, ``kv_transfer_bytes``, ``pool_prefix_tokens``, ``local_prefix_tokens``, ``prefill_cached_tokens``."""
    by_request = {str(e.get("request_id")): e for e in routed}
    moved = transfer_by_id(transfers)
    out = []
    for rec in records:
        entry = by_request.get(str(rec.request_id))
        if entry is None:
            out.append(rec)
            continue
        extra = dict(rec.extra)
        for key in ROUTER_FACTS:
            value = entry.get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                extra[key] = float(value)
        if entry.get("transfer_id") in moved:
            extra["kv_transfer_s"], extra["kv_transfer_bytes"] = moved[entry["transfer_id"]]
        out.append(dataclasses.replace(rec, extra=extra))
    return tuple(out)


def store_failed_puts(metrics_urls: Mapping[str, str]) -> float:
    """Blocks the prefill instances failed to put into the pool, summed from vLLM's
    ``vllm:mooncake_store_operation_failed_keys_total`` (put operations); NaN when an instance does not answer."""
    total = 0.0
    for url in metrics_urls.values():
        try:
            status, body = http_get(url, timeout_s=10.0)
        except OSError:
            return math.nan
        if status != 200:
            return math.nan
        total += sum(sample.value for sample in parse_metrics(body.decode("utf-8", "replace"))
                     if sample.name == "vllm:mooncake_store_operation_failed_keys_total"
                     and "put" in sample.labels.get("operation", ""))
    return total


def prefill_source_info(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Prompt tokens the prefill instances computed, found in their own cache, or loaded from the pool."""
    totals = {"local_compute": 0.0, "local_cache_hit": 0.0, "external_kv_transfer": 0.0}
    for name, b in before.items():
        a = after.get(name)
        if a is None or b is None:
            return {}
        for key in totals:
            totals[key] += a.prompt_tokens_by_source.get(key, 0.0) - b.prompt_tokens_by_source.get(key, 0.0)
    prompt = sum(totals.values())
    if prompt <= 0:
        return {}
    return {"prefill_prompt_tokens": prompt, "prefill_computed_tokens": totals["local_compute"],
            "local_hit_rate": totals["local_cache_hit"] / prompt, "pool_hit_rate": totals["external_kv_transfer"] / prompt,
            "prefill_compute_saved": 1.0 - totals["local_compute"] / prompt}


def router_info(routed: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-point counts and means from the router's log: requests, sent to the mixed pool, rejected."""
    if not routed:
        return {}
    frame = pd.DataFrame(routed)
    info: dict[str, Any] = {"router_requests": len(frame)}
    if "mode" in frame:
        info["router_to_mixed"] = int((frame["mode"] == "mixed").sum())
    if "status" in frame:
        info["router_rejected"] = int((frame["status"] == "rejected").sum())
    for col in ("prefill_s", "decode_s", "pool_prefix_tokens", "local_prefix_tokens"):
        if col in frame:
            info[f"router_mean_{col}"] = float(pd.to_numeric(frame[col], errors="coerce").mean())
    return info
