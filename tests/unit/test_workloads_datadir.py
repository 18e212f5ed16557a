"""Data-directory search order, an explicit data_dir as the only place searched, absolute paths, and the
not-found messages."""

from __future__ import annotations

from pathlib import Path

import pytest

import workloads
from workloads.datadir import resolve_trace_path, search_dirs
from workloads.errors import TraceNotFoundError

REL = "mooncake_fast25/conversation_trace.jsonl"
REPO_TRACES = Path(workloads.__file__).resolve().parents[1].parent / "shared" / "traces"


def _put(root: Path, rel: str = REL) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}\n")
    return path


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.delenv("DATA_DIR", raising=False)
    return work


def test_explicit_dir_wins_over_env_and_defaults(empty_cwd, tmp_path, monkeypatch):
    explicit = _put(tmp_path / "explicit")
    env = _put(tmp_path / "env")
    _put(empty_cwd / "data")
    monkeypatch.setenv("DATA_DIR", str(env.parents[1]))
    assert resolve_trace_path(REL, str(tmp_path / "explicit")) == explicit
    assert resolve_trace_path(REL) == env


def test_cwd_data_then_sibling_shared_traces(empty_cwd):
    sibling = _put(empty_cwd.parent / "shared" / "traces")
    assert resolve_trace_path(REL) == sibling
    local = _put(empty_cwd / "data")
    assert resolve_trace_path(REL) == local


def test_repo_root_fallback_finds_the_shipped_traces(empty_cwd):
    assert resolve_trace_path(REL) == REPO_TRACES / REL


def test_search_order(empty_cwd, tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "env"))
    assert search_dirs(str(tmp_path / "explicit")) == [tmp_path / "explicit"]  # an explicit data_dir alone
    assert search_dirs() == [
        tmp_path / "env",
        empty_cwd / "data",
        empty_cwd.parent / "shared" / "traces",
        REPO_TRACES,
    ]


def test_explicit_dir_is_the_only_place_searched(empty_cwd, tmp_path, monkeypatch):
    """A file missing from an explicit data_dir is never taken from $DATA_DIR, ./data or the shipped traces."""
    env = _put(tmp_path / "env")
    _put(empty_cwd / "data")
    monkeypatch.setenv("DATA_DIR", str(env.parents[1]))
    explicit = tmp_path / "explicit"
    explicit.mkdir()
    with pytest.raises(TraceNotFoundError) as info:
        resolve_trace_path(REL, str(explicit))
    msg = str(info.value)
    assert REL in msg and f"data_dir={str(explicit)!r}" in msg and "only directory searched" in msg
    assert "https://github.com/kvcache-ai/Mooncake" in msg and "FAST25-release/traces/conversation_trace.jsonl" in msg
    assert str(env) not in msg and info.value.searched == [str(explicit)]
    with pytest.raises(TraceNotFoundError, match="does not exist"):
        resolve_trace_path(REL, str(tmp_path / "no_such_dir"))


def test_absolute_path_used_as_is(tmp_path):
    path = _put(tmp_path, "x/anything.jsonl")
    assert resolve_trace_path(str(path), data_dir="/nonexistent") == path
    with pytest.raises(TraceNotFoundError, match="absolute path"):
        resolve_trace_path(str(tmp_path / "missing.jsonl"))


def test_missing_file_names_file_dirs_and_upstream(empty_cwd, tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "env"))
    with pytest.raises(TraceNotFoundError) as info:
        resolve_trace_path("mooncake_fast25/toolagent_trace.jsonl")
    msg = str(info.value)
    assert "mooncake_fast25/toolagent_trace.jsonl" in msg
    for directory in search_dirs():
        assert str(directory) in msg
    assert "https://github.com/kvcache-ai/Mooncake" in msg and "FAST25-release/traces/" in msg
    assert info.value.searched and isinstance(info.value, FileNotFoundError)


def test_missing_azure_file_points_to_azure_dataset(empty_cwd):
    with pytest.raises(
        TraceNotFoundError, match=r"Azure/AzurePublicDataset, path data/AzureLLMInferenceTrace_conv\.csv"
    ):
        resolve_trace_path("elsewhere/AzureLLMInferenceTrace_conv.csv")


def test_unknown_file_says_no_upstream_known(empty_cwd):
    with pytest.raises(TraceNotFoundError, match="no upstream source is known"):
        resolve_trace_path("mine/trace.jsonl")
