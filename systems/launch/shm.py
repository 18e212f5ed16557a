"""Shared-memory files a process tree left in /dev/shm, found safely.

A SIGKILLed vLLM leaves its shared-memory segments behind. A file is only ever attributed to a
process tree when both hold: it did not exist when the tree was started (``snapshot`` taken before
``start``), and one of the tree's processes had it open or mapped (when it became ready, or just before
it was stopped); and it is removed only when no live process has it open or mapped. Files
that any other process may have created are never touched.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")


def snapshot(shm_dir: Path = SHM_DIR) -> frozenset[str]:
    """Names of the files in ``shm_dir`` now (empty when it does not exist)."""
    try:
        return frozenset(entry.name for entry in os.scandir(shm_dir))
    except OSError:
        return frozenset()


def files_used_by(pids: Iterable[int], shm_dir: Path = SHM_DIR) -> set[Path]:
    """Files under ``shm_dir`` that the processes ``pids`` have open or memory-mapped (Linux /proc)."""
    prefix = str(shm_dir).rstrip("/") + "/"
    found: set[Path] = set()
    for pid in pids:
        proc = Path(f"/proc/{pid}")
        try:
            for line in (proc / "maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith(prefix) and not parts[5].endswith(" (deleted)"):
                    found.add(Path(parts[5]))
        except OSError:
            pass
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith(prefix) and not target.endswith(" (deleted)"):
                    found.add(Path(target))
        except OSError:
            pass
    return found


def live_pids() -> list[int]:
    """Every process id on this host (from /proc)."""
    return [int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()]


def remove_leftovers(candidates: Iterable[Path], existed_before: frozenset[str]) -> list[Path]:
    """Unlink the candidates that still exist and were not there before; returns what was removed."""
    removed: list[Path] = []
    for path in sorted(set(candidates)):
        if path.name in existed_before or not path.exists():
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError as exc:
            logger.warning("could not remove leftover shared-memory file %s: %s", path, exc)
    if removed:
        logger.info("removed %d leftover shared-memory file(s): %s", len(removed),
                    ", ".join(p.name for p in removed))
    return removed
