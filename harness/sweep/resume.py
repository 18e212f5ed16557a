"""What a sweep job does with the folder an earlier run of the same sweep left in its place.

A sweep's job folders are named by their overrides (:mod:`harness.sweep.naming`), so running a sweep
again finds each job's earlier folder. Its ``summary.json`` decides:

=================================  ==========  ===============================================
earlier summary                    state       the job
=================================  ==========  ===============================================
none (or unreadable)               missing     runs
``ok``, same ``config_hash``       done        is skipped: its results are kept as they are
``failed``                         failed      runs again (the old results are removed first)
``running`` (a killed job)         killed      runs again (the old results are removed first)
``ok``, another ``config_hash``    conflict    fails (exit status counts it) unless ``overwrite=true``
=================================  ==========  ===============================================

With ``overwrite=true`` every job runs and replaces what its folder held.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Optional

from vocab.result_files import SUMMARY_FILE


class JobState(StrEnum):
    """An earlier run's outcome as found in a job folder."""

    MISSING = "missing"
    DONE = "done"
    FAILED = "failed"
    KILLED = "killed"
    CONFLICT = "conflict"


RERUN_STATES = frozenset({JobState.FAILED, JobState.KILLED})


@dataclass(frozen=True)
class FolderState:
    """A job folder's state, the summary it was read from and, for a conflict, the hash it holds."""

    state: JobState
    summary: Optional[dict[str, Any]] = None
    held_hash: str = ""

    @property
    def skip(self) -> bool:
        """Whether the job is skipped (its ``ok`` results are for the same config)."""
        return self.state is JobState.DONE


def read_summary(folder: Path) -> Optional[dict[str, Any]]:
    """The folder's ``summary.json`` as a mapping (None: no file, or not a JSON object)."""
    try:
        data = json.loads((Path(folder) / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def folder_state(folder: Path, config_hash: str) -> FolderState:
    """What an earlier run left in ``folder`` for a job whose config hashes to ``config_hash``."""
    summary = read_summary(folder)
    if summary is None:
        return FolderState(JobState.MISSING)
    status = summary.get("status")
    if status == "ok":
        held = str(summary.get("config_hash") or "")
        if held == config_hash:
            return FolderState(JobState.DONE, summary, held)
        return FolderState(JobState.CONFLICT, summary, held)
    if status == "running":
        return FolderState(JobState.KILLED, summary)
    return FolderState(JobState.FAILED, summary)


def conflict_message(folder: Path, state: FolderState, config_hash: str) -> str:
    """The one line for a folder whose ``ok`` results are for another config."""
    held = state.held_hash or "no config_hash (written before hashes were kept)"
    return (f"{folder} holds the ok results of another config ({held}; this job's is {config_hash}); refusing to "
            "overwrite them: choose another experiment_name or results_dir, or add overwrite=true to replace them")
