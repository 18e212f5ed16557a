"""Shared-memory files a process tree left in /dev/shm, found safely.

A SIGKILLed vLLM leaves its shared-memory segments behind. A file is only ever attributed to a
process tree when both hold: it did not exist when the tree was started (``snapshot`` taken before
``start``), and one of the tree's processes had it open or mapped (when it became ready, or just before
it was stopped); and it is removed only when no live process has it open or mapped. Files
that any other process may have created are never touched, with one exception: a Python
``multiprocessing`` semaphore (``sem.mp-*``) that appeared while the tree ran and that no live process
uses is garbage whoever made it (:func:`new_python_semaphores`), and is removed when the tree stops.
"Uses" is judged by inode, not by name (:func:`inodes_in_use`): glibc's ``sem_open`` maps a semaphore under a
temporary name, links it to its final name and unlinks the temporary one, so its creator's mapping never
shows the final name. Judged by name, a semaphore that a process starting at the same time (another
deployment's vLLM spawning its worker) had just created looked unused, and was removed before the worker
could open it.

A tree killed from outside (its harness SIGKILLed, say) is cleaned up later from its pid file
(:mod:`systems.launch.pidfile`): the files attributed to it by that rule when it became ready are
recorded there with their inode, and :func:`remove_recorded` removes exactly those, once no live
process has them open or mapped and only while they are still the same file (same inode).
Functions that look into the directory take ``shm_dir`` (default ``/dev/shm``), so tests can use a temporary one.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")


def snapshot(shm_dir: Path = SHM_DIR) -> frozenset[str]:
    """Names of the files in ``shm_dir`` now (empty when it does not exist)."""
    try:
        return frozenset(entry.name for entry in os.scandir(shm_dir))
    except OSError:
        return frozenset()


def _mapped_or_open(pids: Iterable[int], prefix: str) -> Iterator[tuple[str, int]]:
    """(name, inode) of each file under ``prefix`` that one of ``pids`` maps or has open, as /proc shows it
    (a name since unlinked ends in `` (deleted)``); a process that is gone or not readable is passed over."""
    for pid in pids:
        proc = Path(f"/proc/{pid}")
        try:
            for line in (proc / "maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith(prefix) and parts[4].isdigit():
                    yield parts[5], int(parts[4])
        except OSError:
            pass
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    target = os.readlink(fd)
                    if target.startswith(prefix):
                        yield target, os.stat(fd).st_ino
                except OSError:
                    continue
        except OSError:
            pass


def files_used_by(pids: Iterable[int], shm_dir: Path = SHM_DIR) -> set[Path]:
    """Files under ``shm_dir`` that the processes ``pids`` have open or memory-mapped (Linux /proc)."""
    prefix = str(shm_dir).rstrip("/") + "/"
    return {Path(name) for name, _ in _mapped_or_open(pids, prefix) if not name.endswith(" (deleted)")}


def inodes_in_use(pids: Iterable[int], shm_dir: Path = SHM_DIR) -> set[int]:
    """Inodes of the files under ``shm_dir`` that the processes ``pids`` have memory-mapped or open, under
    whatever name they were mapped or opened, including names since unlinked (Linux /proc)."""
    prefix = str(shm_dir).rstrip("/") + "/"
    return {inode for _, inode in _mapped_or_open(pids, prefix)}


def unused(candidates: Iterable[Path], shm_dir: Path = SHM_DIR) -> set[Path]:
    """The candidates that no live process has mapped or open, by name or by inode."""
    pids = live_pids()
    taken = inodes_in_use(pids, shm_dir)
    return {path for path, inode in inodes(set(candidates) - files_used_by(pids, shm_dir)).items()
            if inode not in taken}


def live_pids() -> list[int]:
    """Every process id on this host (from /proc)."""
    return [int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()]


PYTHON_SEMAPHORE_PREFIX = "sem.mp-"  # multiprocessing's named semaphores (SemLock, spawn/forkserver)


def new_python_semaphores(existed_before: frozenset[str], shm_dir: Path = SHM_DIR) -> set[Path]:
    """Python ``multiprocessing`` semaphores in ``shm_dir`` that were not there at ``existed_before``.

    Such a file is only ever created by a process that keeps it open until its finalizer unlinks it (or,
    when that process is killed, until its resource tracker does). One that no live process uses is
    therefore garbage: a tree whose resource tracker was killed with it (SIGKILL from outside, or after
    the stop's grace period) leaves these behind without ever having them mapped when we looked. The
    caller removes only those that no live process has open or mapped."""
    return {shm_dir / name for name in snapshot(shm_dir) - existed_before
            if name.startswith(PYTHON_SEMAPHORE_PREFIX)}


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


def inodes(paths: Iterable[Path]) -> dict[Path, int]:
    """The inode of each of ``paths`` that exists as a regular file (not followed through links)."""
    found: dict[Path, int] = {}
    for path in paths:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found[Path(path)] = info.st_ino
    return found


def remove_recorded(recorded: Mapping[Path, int], shm_dir: Path = SHM_DIR) -> list[Path]:
    """Unlink the recorded files (path -> inode) that lie directly in ``shm_dir``, are still the same file
    (same inode) and that no live process has open or mapped; returns what was removed."""
    shm_dir = Path(shm_dir)
    current = inodes(p for p in map(Path, recorded) if p.parent == shm_dir)
    same = {p for p, ino in current.items() if recorded.get(p) == ino}
    if not same:
        return []
    in_use = files_used_by(live_pids(), shm_dir)
    removed: list[Path] = []
    for path in sorted(same - in_use):
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("could not remove leftover shared-memory file %s: %s", path, exc)
    if removed:
        logger.info("removed %d shared-memory file(s) a stopped process tree left: %s", len(removed),
                    ", ".join(p.name for p in removed))
    kept = sorted(same & in_use)
    if kept:
        logger.info("kept %d recorded shared-memory file(s) still in use: %s", len(kept),
                    ", ".join(p.name for p in kept))
    return removed
