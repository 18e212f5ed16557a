"""Locating trace files: the data-directory search and where each known trace is published upstream.

An explicit data directory (``data_dir`` in the config, not null) is the only place searched: a file
missing there is an error, never silently taken from another directory. Without one, the default search
is ``$DATA_DIR``, ``./data``, ``../shared/traces`` (from the current directory) and the ``shared/traces``
folder beside the repository. An absolute ``file`` is used as it is.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Optional

from workloads.errors import TraceNotFoundError

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "DATA_DIR"
_REPO_ROOT = Path(__file__).resolve().parent.parent  # the parent of the ``workloads`` package


@dataclass(frozen=True)
class UpstreamSource:
    """Where a trace file is published."""

    repo_url: str
    path: str  # path of the file inside the repository

    def describe(self) -> str:
        return f"{self.repo_url}, path {self.path}"


_MOONCAKE = "https://github.com/kvcache-ai/Mooncake"
_AZURE = "https://github.com/Azure/AzurePublicDataset"
_SARATHI = "https://github.com/microsoft/sarathi-serve"

UPSTREAM_SOURCES: MappingProxyType[str, UpstreamSource] = MappingProxyType(
    {
        "conversation_trace.jsonl": UpstreamSource(
            _MOONCAKE, "FAST25-release/traces/conversation_trace.jsonl"
        ),
        "synthetic_trace.jsonl": UpstreamSource(_MOONCAKE, "FAST25-release/traces/synthetic_trace.jsonl"),
        "toolagent_trace.jsonl": UpstreamSource(_MOONCAKE, "FAST25-release/traces/toolagent_trace.jsonl"),
        "mooncake_trace.jsonl": UpstreamSource(_MOONCAKE, "FAST25-release/arxiv-trace/mooncake_trace.jsonl"),
        "AzureLLMInferenceTrace_code.csv": UpstreamSource(_AZURE, "data/AzureLLMInferenceTrace_code.csv"),
        "AzureLLMInferenceTrace_conv.csv": UpstreamSource(_AZURE, "data/AzureLLMInferenceTrace_conv.csv"),
        "sharegpt_8k_filtered_stats_llama2_tokenizer.csv": UpstreamSource(
            _SARATHI, "data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
        ),
    }
)


def search_dirs(data_dir: Optional[str] = None) -> list[Path]:
    """Directories searched for a relative trace path, in order, without duplicates.

    ``data_dir`` given (not None or empty): that directory alone. Otherwise ``$DATA_DIR``, ``./data``,
    ``./../shared/traces`` (relative to the current directory), then ``<repo root>/../shared/traces``.
    """
    if data_dir:
        return [Path(data_dir).expanduser()]
    candidates: list[Path] = []
    env = os.environ.get(DATA_DIR_ENV, "")
    if env:
        candidates.append(Path(env).expanduser())
    cwd = Path.cwd()
    candidates += [cwd / "data", cwd.parent / "shared" / "traces", _REPO_ROOT.parent / "shared" / "traces"]
    return dedupe_paths(candidates)


def first_file(dirs: list[Path], relpath: str | Path, allow_dir: bool = False) -> Optional[Path]:
    """``dir / relpath`` for the first of ``dirs`` where that is a file (or a folder, with ``allow_dir``), else None."""
    for directory in dirs:
        candidate = directory / relpath
        if candidate.is_file() or (allow_dir and candidate.is_dir()):
            return candidate
    return None


def dedupe_paths(candidates: list[Path]) -> list[Path]:
    """``candidates`` in order, each directory once (compared after resolving links and ``..``)."""
    unique: list[Path] = []
    seen: set[Path] = set()
    for cand in candidates:
        key = cand.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(cand)
    return unique


def upstream_hint(file: str) -> str:
    """One sentence saying where ``file`` is published (or that no source is known)."""
    source = UPSTREAM_SOURCES.get(Path(file).name)
    if source is None:
        return "no upstream source is known for this file name"
    return f"it is published upstream at {source.describe()}"


def resolve_trace_path(file: str, data_dir: Optional[str] = None, allow_dir: bool = False) -> Path:
    """The path of trace ``file``: as-is when absolute, else under ``data_dir`` when one is given (only
    there), else the first directory of the default search that holds it. With ``allow_dir`` a folder of that
    name counts too (workloads that pool a folder's files).

    Raises :class:`TraceNotFoundError` naming the file, every directory searched and the upstream source.
    """
    path = Path(file).expanduser()
    if path.is_absolute():
        if path.is_file() or (allow_dir and path.is_dir()):
            return path
        raise TraceNotFoundError(
            f"trace file {str(path)!r} not found (absolute path, no search); {upstream_hint(file)}",
            file=file,
            searched=[],
        )
    dirs = search_dirs(data_dir)
    found = first_file(dirs, path, allow_dir)
    if found is not None:
        logger.debug("trace %s resolved to %s", file, found)
        return found
    if data_dir:
        where = dirs[0]
        missing_dir = "" if where.is_dir() else " (that directory does not exist)"
        raise TraceNotFoundError(
            f"trace file {file!r} not found in data_dir={str(where)!r}{missing_dir}: an explicit data_dir is the "
            f"only directory searched (${DATA_DIR_ENV}, ./data and ../shared/traces are not); {upstream_hint(file)}. "
            f"Put it at {str(where / path)!r}, or set data_dir=null for the default search.",
            file=file,
            searched=[str(where)],
        )
    listing = "; ".join(str(d) for d in dirs)
    raise TraceNotFoundError(
        f"trace file {file!r} not found in any data directory (searched, in order: {listing}); "
        f"{upstream_hint(file)}. Put it under one of these directories, set data_dir, or set ${DATA_DIR_ENV}.",
        file=file,
        searched=[str(d) for d in dirs],
    )
