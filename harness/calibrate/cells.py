"""The measurement cells of a calibration and how their records become fitting samples.

A *prefill cell* sends ``batch`` unshared prompts of ``prompt_tokens`` tokens at the same instant with one
output token each. The engine may start the first arrival alone and batch the rest in its next iteration,
so the first tokens are grouped by the iteration that produced them (:func:`iterations`) and each
iteration is one sample: the first measured from the send (the overhead every TTFT pays is in it), the
later ones from the previous iteration's first tokens. A *decode cell* sends ``batch`` prompts of ``context_tokens`` tokens at once with
``decode_tokens`` output tokens each: once the last of them has its first token they decode in lock step,
and the mean gap between a request's streamed tokens after that moment is one decode step of ``batch``
sequences.
Prompts never share a block with any other prompt of the calibration (fresh hash ids), so no prefix
cache hit shortens a measurement.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vocab.records import RequestRecord, RequestSpec, RequestStatus
from workloads.arrivals import ArrivalSchedule
from workloads.base import WorkloadRequests

BLOCK = 16  # hash-id block of the calibration prompts (any size works: every block id is fresh)


@dataclass(frozen=True)
class Cell:
    """One measurement: ``phase`` is ``prefill``, ``decode`` or ``kv_transfer``."""

    phase: str
    batch: int
    tokens: int  # prompt tokens (prefill, kv_transfer) or context tokens (decode) per request
    output_tokens: int = 1


class FreshIds:
    """Hash ids never used before in this calibration (so no prompt shares a block with another)."""

    def __init__(self, start: int = 1_000_000) -> None:
        self._next = itertools.count(start)

    def take(self, n: int) -> tuple[int, ...]:
        return tuple(next(self._next) for _ in range(n))


def prefill_cells(prompt_lengths: Sequence[int], batches: Sequence[int], token_budget: int) -> list[Cell]:
    """Every (length, batch) whose prompts fit one iteration of ``token_budget`` tokens."""
    return [Cell("prefill", b, n) for n in sorted(prompt_lengths) for b in sorted(batches) if b * n <= token_budget]


def decode_cells(contexts: Sequence[int], batches: Sequence[int], decode_tokens: int) -> list[Cell]:
    return [Cell("decode", b, c, decode_tokens) for c in sorted(contexts) for b in sorted(batches)]


def cell_requests(cell: Cell, ids: FreshIds, closed_loop: bool = False) -> WorkloadRequests:
    """The requests of ``cell``: ``batch`` unshared prompts sent together (or one at a time, ``closed_loop``)."""
    specs = tuple(RequestSpec(request_id=i, arrival_s=0.0, input_length=cell.tokens, output_length=cell.output_tokens,
                              hash_ids=ids.take(math.ceil(cell.tokens / BLOCK)), block_size=BLOCK)
                  for i in range(cell.batch))
    if closed_loop:
        schedule = ArrivalSchedule(mode="closed", concurrency=1, offered_rate_rps=math.nan, duration_s=0.0)
    else:
        schedule = ArrivalSchedule(mode="open", concurrency=None, offered_rate_rps=math.nan, duration_s=0.0)
    return WorkloadRequests(specs=specs, schedule=schedule, stats={"cell": cell.phase})


class CellFailed(RuntimeError):
    """A calibration request failed: the measurement of its cell means nothing."""


def _ok(records: Sequence[RequestRecord], cell: Cell) -> Sequence[RequestRecord]:
    bad = [r for r in records if r.status != RequestStatus.OK]
    if bad or len(records) != cell.batch:
        reason = bad[0].error if bad else f"{len(records)} records for {cell.batch} requests"
        raise CellFailed(f"{cell.phase} cell (batch {cell.batch}, {cell.tokens} tokens): {reason}")
    return records


def iterations(records: Sequence[RequestRecord]) -> list[list[RequestRecord]]:
    """The batch's requests grouped by the engine iteration that produced their first token: first tokens
    that arrive together (within a fifth of the first request's TTFT, at least 1 ms) came from one iteration.
    The engine often starts the first request that arrives on its own, then batches the others."""
    ordered = sorted(records, key=lambda r: r.first_token_s)
    tolerance = max(1e-3, 0.2 * (ordered[0].first_token_s - min(r.sent_s for r in records)))
    groups: list[list[RequestRecord]] = [[ordered[0]]]
    for r in ordered[1:]:
        if r.first_token_s - groups[-1][-1].first_token_s > tolerance:
            groups.append([])
        groups[-1].append(r)
    return groups


def prefill_samples(records: Sequence[RequestRecord], cell: Cell) -> list[dict[str, float]]:
    """One sample per prefill iteration of the cell: the first from the first send to its first tokens
    (``span`` = ``send``: the client's and router's overhead included, as every TTFT pays it), each later
    one from the previous iteration's first tokens to its own (``span`` = ``iteration``)."""
    records = _ok(records, cell)
    out = []
    previous = min(r.sent_s for r in records)
    for k, group in enumerate(iterations(records)):
        done = max(r.first_token_s for r in group)
        n = len(group)
        out.append({"phase": "prefill", "batch_size": float(n), "prompt_tokens": float(cell.tokens),
                    "sum_tokens": float(n * cell.tokens), "sum_sq_tokens": float(n * cell.tokens ** 2),
                    "n_seqs": float(n), "time_ms": (done - previous) * 1e3, "span": "send" if k == 0 else "iteration",
                    "cell_batch": float(cell.batch)})
        previous = done
    return out


def decode_step_means(records: Sequence[RequestRecord]) -> list[float]:
    """Per request, the mean gap between its streamed tokens after the last request of the batch got its
    first token (seconds): span over count, so a client that reads several tokens at once (and stamps
    them alike) only blurs the two ends of the span, not the mean."""
    start = max(r.first_token_s for r in records)
    out = []
    for r in records:
        times = np.asarray(r.chunk_times_s, dtype=float)
        times = times[times >= start]
        if len(times) >= 2 and times[-1] > times[0]:
            out.append(float(times[-1] - times[0]) / (len(times) - 1))
    return out


def decode_sample(records: Sequence[RequestRecord], cell: Cell) -> dict[str, float]:
    """One decode step at ``cell.batch`` sequences: the median over requests of their lock-step token gap."""
    records = _ok(records, cell)
    means = decode_step_means(records)
    if len(means) < max(1, cell.batch // 2):
        raise CellFailed(f"decode cell (batch {cell.batch}, {cell.tokens} tokens): only {len(means)} of {cell.batch} "
                         "requests streamed two or more tokens after the batch formed; the engine must stream "
                         "one chunk per token")
    mid_context = cell.tokens + cell.output_tokens / 2
    return {"phase": "decode", "batch_size": float(cell.batch), "context_tokens": float(cell.tokens),
            "sum_context": float(cell.batch * mid_context), "time_ms": statistics.median(means) * 1e3}


def transfer_samples(records: Sequence[RequestRecord]) -> list[dict[str, float]]:
    """One sample per request whose P->D KV transfer the engines reported (``kv_transfer_s``, bytes), with
    the request's TTFT through the P/D router."""
    out = []
    for r in records:
        seconds, n_bytes = r.extra.get("kv_transfer_s"), r.extra.get("kv_transfer_bytes")
        if r.status == RequestStatus.OK and seconds is not None and n_bytes and seconds > 0:
            out.append({"phase": "kv_transfer", "prompt_tokens": float(r.input_length), "bytes": float(n_bytes),
                        "time_s": float(seconds), "ttft_ms": (r.first_token_s - r.sent_s) * 1e3})
    return out


CELL_KEYS = ("phase", "route", "span", "cell_batch", "batch_size", "prompt_tokens", "context_tokens")


def cell_medians(samples: Sequence[dict[str, float]], target: str) -> list[dict[str, float]]:
    """One sample per distinct cell (same ``CELL_KEYS``), its ``target`` the median over the repeats: a
    repeat disturbed by the host does not pull the fit."""
    groups: dict[tuple, list[dict[str, float]]] = {}
    for s in samples:
        groups.setdefault(tuple(s.get(k) for k in CELL_KEYS), []).append(s)
    return [{**group[0], target: statistics.median(g[target] for g in group), "repeats": float(len(group))}
            for group in groups.values()]
