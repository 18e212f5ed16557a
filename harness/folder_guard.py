"""No silent overwrite: a job refuses a folder that already holds a run's results unless ``overwrite=true``.

A rerun into the same folder (``hydra.run.dir=X`` twice, two runs in the same second) would otherwise
replace ``summary.json`` and ``config.yaml`` and leave the old run's tables and figures beside them, as
if the new run had written them. :func:`guard_folder` refuses such a folder with
:class:`FolderInUse` (a :class:`~vocab.errors.UserError`: one line naming the folder and
``overwrite=true``, exit status 2) before anything is written; with ``overwrite=true`` it removes the old
results first (every file the old ``summary.json`` lists and every known result name,
:mod:`vocab.result_files`), so nothing stale is left beside the new run. Other files are left alone.

It runs twice: from the Hydra callback before Hydra creates the folder (:mod:`harness.hydra_checks`,
where the old ``harness.log`` and ``.hydra/`` count as results too, since Hydra would append to the one and
overwrite the other), and at the start of every job (``harness.app.run_job``; this also covers
multirun jobs, whose folders Hydra creates itself), where they are the current run's own and are kept.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from vocab import result_files as rf
from vocab.errors import UserError

log = logging.getLogger(__name__)

HYDRA_DIR = ".hydra"  # Hydra's copy of the config (hydra.output_subdir)
WANDB_DIR = "wandb"  # logger=wandb's local run files
RESULT_NAMES = (
    rf.SUMMARY_FILE, rf.CONFIG_FILE, rf.REQUESTS_FILE, rf.POINTS_FILE, rf.LOAD_FILE, rf.STUDY_FILE,
    rf.CAPACITY_FILE, rf.SLO_SCALE_FILE, rf.SLO_CROSSING_FILE, rf.PROBES_FILE, rf.SENSITIVITY_FILE,
    rf.PLACEMENT_FILE, rf.CACHE_HIT_FILE, rf.GLOBAL_LOCAL_FILE, rf.WORKLOAD_FILE, rf.FIGURES_DIR, rf.SERVERS_DIR,
    rf.VARIANTS_DIR, WANDB_DIR,
)
RUN_OWN_NAMES = (rf.LOG_FILE, HYDRA_DIR)  # Hydra writes these for the current run before the job starts


class FolderInUse(UserError):
    """The job folder already holds the results of a run and ``overwrite`` is not set."""


def _listed_files(folder: Path) -> list[str]:
    """Paths the folder's ``summary.json`` lists under ``files`` (unreadable summary: none)."""
    try:
        files = json.loads((folder / rf.SUMMARY_FILE).read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError):
        return []
    return [str(p) for p in files.values()] if isinstance(files, dict) else []


def previous_results(folder: Path, include_run_files: bool = True) -> list[Path]:
    """The results of an earlier run in ``folder``, each a file or folder inside it (sorted, existing only,
    none inside another).
    ``include_run_files``: count the log and ``.hydra/`` too (before Hydra has started the new run)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    names = [*RESULT_NAMES, *(RUN_OWN_NAMES if include_run_files else ())]
    protected = set() if include_run_files else {folder / n for n in RUN_OWN_NAMES}
    root = folder.resolve()
    found: set[Path] = set()
    for name in [*names, *_listed_files(folder)]:
        path = folder / name
        try:
            inside = path.resolve().is_relative_to(root) and path.resolve() != root
        except OSError:
            continue
        if inside and (path.exists() or path.is_symlink()) and not any(path.is_relative_to(p) for p in protected):
            found.add(path)
    return sorted(p for p in found if not any(p != q and p.is_relative_to(q) for q in found))


def remove(paths: list[Path]) -> None:
    """Delete files and folders (a symlink is removed, never followed)."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def refusal(folder: Path, found: list[Path]) -> str:
    """The one-line message for a folder that holds results."""
    names = ", ".join(str(p.relative_to(folder)) for p in found[:4]) + (", ..." if len(found) > 4 else "")
    return (f"{folder} already holds the results of a run ({names}); refusing to overwrite them: choose another "
            "folder or add overwrite=true to replace them")


def guard_folder(folder: Path, overwrite: bool, include_run_files: bool = True) -> list[Path]:
    """Refuse ``folder`` when it holds results (``FolderInUse``), or with ``overwrite`` remove them first.
    Returns what was removed."""
    found = previous_results(folder, include_run_files)
    if not found:
        return []
    if not overwrite:
        raise FolderInUse(refusal(Path(folder), found))
    remove(found)
    log.warning("overwrite=true: removed the previous results in %s (%s)", folder,
                ", ".join(str(p.relative_to(folder)) for p in found))
    return found
