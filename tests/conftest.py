"""Shared test fixtures: the directory holding the public traces (found like the suite finds them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.datadir import resolve_trace_path
from workloads.errors import TraceNotFoundError


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """Root of the trace directory; fails (never skips) when the traces cannot be found."""
    try:
        path = resolve_trace_path("mooncake_fast25/conversation_trace.jsonl")
    except TraceNotFoundError as exc:
        pytest.fail(f"the tests need the public traces: {exc}")
    return path.parent.parent
