"""Shared test fixtures: paths to the repository, its config tree and the shipped public traces."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf"
SHARED_TRACES = REPO.parent / "shared" / "traces"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not (SHARED_TRACES / "mooncake_fast25" / "conversation_trace.jsonl").is_file():
        pytest.skip(f"shipped traces not found under {SHARED_TRACES}")
    return SHARED_TRACES
