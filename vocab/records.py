"""The suite's record types: what a run asks for, what it observed, and what it concluded.

Every engine (simulator or real deployment) consumes ``RequestSpec``s and emits ``RequestRecord``s;
``RunSummary`` is what a job writes to ``summary.json``. Times are seconds relative to the run's
time origin (the first scheduled arrival is at or after 0). Missing times are ``float('nan')``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

SUMMARY_SCHEMA_VERSION = 1


class RequestStatus(StrEnum):
    """Outcome of one issued request. Anything but ``OK`` violates every SLO."""

    OK = "ok"  # HTTP 200 (or simulated equivalent), >= 1 token and a finish reason
    FAILED = "failed"  # transport/server error, malformed stream, no finish reason
    REJECTED = "rejected"  # refused by admission control (HTTP 429 / early rejection)
    UNFINISHED = "unfinished"  # still running when the run ended (deadline / outstanding cap)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of a workload, fixed before the run starts.

    ``hash_ids`` names the prompt's blocks of ``block_size`` tokens (the last block may be partial):
    two requests that start with the same ids share that prefix token for token.
    """

    request_id: int
    arrival_s: float  # scheduled arrival (open loop); 0.0 for closed-loop workloads
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()
    block_size: int = 512
    prefix_group: int = -1  # shared-prefix group (synthetic workloads); -1 when unknown
    shared_prefix_len: int = 0  # tokens shared with the group's prefix; 0 when unknown
    session_id: int = -1  # multi-turn session; -1 when not part of a session
    turn: int = 0  # 0-based turn within the session
    tenant: str = ""  # tenant label; prefix hashes are salted per tenant where supported

    @property
    def n_blocks(self) -> int:
        return math.ceil(self.input_length / self.block_size) if self.block_size > 0 else 0


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What happened to one issued request.

    ``arrival_s`` is the scheduled arrival (the clock TTFT and E2E are measured from); ``sent_s`` is
    when the request actually left the client, kept as a diagnostic (issue lag = sent - scheduled).
    ``chunk_times_s`` holds the arrival time of every streamed chunk that carried at least one token
    (the simulator emits one chunk per token); ``chunk_times_s[0] == first_token_s``.
    """

    request_id: int
    status: RequestStatus
    arrival_s: float
    sent_s: float
    first_token_s: float
    finish_s: float
    input_length: int
    output_length: int  # requested output tokens (max_tokens)
    n_out: int  # output tokens actually produced
    chunk_times_s: tuple[float, ...] = ()
    cached_tokens: int = -1  # prompt tokens served from a prefix cache; -1 when not reported
    instance: str = ""  # instance (or instance pair "P->D") that served the request
    error: str = ""
    prefix_group: int = -1
    shared_prefix_len: int = 0
    session_id: int = -1
    turn: int = 0
    extra: dict[str, float] = field(default_factory=dict)  # engine-specific numbers, e.g. kv_transfer_s


# the fields of RequestRecord a RecordFieldColumns holds as arrays (all but chunk_times_s and extra)
RECORD_FIELD_COLUMNS = ("request_id", "status", "arrival_s", "sent_s", "first_token_s", "finish_s", "n_out",
                        "output_length", "input_length", "cached_tokens", "instance", "prefix_group",
                        "shared_prefix_len", "session_id", "turn", "error")


@dataclass(frozen=True)
class RecordFieldColumns:
    """Records held as columns by the engine that made them (the simulator), field by field: ``fields``
    maps each of :data:`RECORD_FIELD_COLUMNS` to a numpy array over the records (``status`` as its string
    value, ``status``, ``instance`` and ``error`` as object arrays, the rest float64 or int64),
    ``chunk_times_s`` holds every record's chunk times end to end and ``n_chunks`` their count per record
    (int64 arrays), ``extra`` each ``extra`` key's values over the records, in the records' key order."""

    fields: Mapping[str, Any]
    chunk_times_s: Any
    n_chunks: Any
    extra: dict[str, list[Any]]

    def __len__(self) -> int:
        return len(self.n_chunks)


@dataclass(frozen=True)
class RunSummary:
    """Content of ``summary.json``: identity, provenance, outcome, metrics and validity of one job."""

    status: str  # "running" | "ok" | "failed"
    experiment: str
    job: str
    kind: str  # "serve" | "cache_study" | ...
    reason: str = ""  # why a run failed (empty when ok)
    started_at: str = ""
    finished_at: str = ""
    git_sha: str = ""
    git_dirty: bool = False
    python: str = ""
    package_versions: dict[str, str] = field(default_factory=dict)
    seeds: dict[str, int] = field(default_factory=dict)
    choices: dict[str, str] = field(default_factory=dict)  # Hydra group choices
    overrides: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    validity: dict[str, Any] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # logical name -> path relative to the job folder
    config_hash: str = ""  # harness.sweep.config_hash of the resolved config: a rerun sweep skips ok jobs with the same
    schema_version: int = SUMMARY_SCHEMA_VERSION


def block_reasons(block: Mapping[str, Any]) -> list[str]:
    """Every reason of a validity block, including those of its points (``{"points": [...]}``) or parts."""
    reasons = [str(r) for r in block.get("reasons", [])]
    if reasons:
        return reasons
    points = block.get("points")
    if isinstance(points, list):
        for i, point in enumerate(points):
            reasons += [f"point {i}: {r}" for r in block_reasons(point)]
    if not reasons and block.get("valid") is False:
        reasons.append("marked invalid (no reason recorded)")
    return reasons
