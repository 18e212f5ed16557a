"""What the load generator is pointed at, how it runs, and what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from vocab.records import RequestRecord


@dataclass(frozen=True)
class TargetConfig:
    """An OpenAI-compatible server: ``POST {base_url}/v1/completions`` with ``model``."""

    base_url: str
    model: str
    api_key: Optional[str] = None
    request_timeout_s: float = 600.0  # from send to the end of the response; then the request fails


@dataclass(frozen=True)
class LoadGenOptions:
    """How to run a schedule.

    ``max_outstanding``: when this many requests are in flight as the next one is due, issuing stops and
    the run is marked invalid. ``drain_timeout_s``: how long in-flight requests may still run once issuing
    has ended; those still running then are cut (``unfinished``). ``n_processes > 1`` splits the schedule
    (request i to process i % n); the cap and a closed loop's concurrency are split with it.
    """

    max_outstanding: int = 1024
    progress: bool = True
    n_processes: int = 1
    extra_body: dict[str, Any] = field(default_factory=dict)
    drain_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.max_outstanding < 1:
            raise ValueError(f"max_outstanding must be >= 1, got {self.max_outstanding}")
        if self.n_processes < 1:
            raise ValueError(f"n_processes must be >= 1, got {self.n_processes}")
        if self.drain_timeout_s < 0:
            raise ValueError(f"drain_timeout_s must be >= 0, got {self.drain_timeout_s}")


@dataclass(frozen=True)
class LoadResult:
    """One record per spec (in ``request_id`` order), reasons that make the run invalid, the wall-clock
    time of the run's origin t0 (``time.time()`` scale), and diagnostics (client, loop, issue lag...)."""

    records: tuple[RequestRecord, ...]
    invalid_reasons: tuple[str, ...]
    t0_wall: float
    info: dict[str, Any]
