"""What Linux's /proc says about a process: its state, parent, process group, session, start time and threads.

The start time (field 22 of ``/proc/<pid>/stat``, clock ticks since boot) tells a process apart from a
later one that reused its pid: a record that names a pid also keeps its start time, and is only acted
on while both still match. Standard library only: the launch supervisor imports this module.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` this suite uses."""

    pid: int
    state: str  # R, S, D, Z, T, ...
    ppid: int
    pgid: int
    sid: int
    start_time: int  # clock ticks after boot

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")


def parse_stat(pid: int, text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line (the command name is in parentheses and may hold spaces)."""
    fields = text[text.rfind(")") + 2:].split()
    # fields[0] is field 3 (state); field 22 (starttime) is fields[19]
    return ProcStat(pid=pid, state=fields[0], ppid=int(fields[1]), pgid=int(fields[2]), sid=int(fields[3]),
                    start_time=int(fields[19]))


def proc_stat(pid: int) -> Optional[ProcStat]:
    """The process ``pid`` as /proc shows it now; None when there is no such process."""
    try:
        return parse_stat(pid, (PROC / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def start_time(pid: int) -> Optional[int]:
    """Start time of ``pid`` in clock ticks after boot; None when there is no such process."""
    stat = proc_stat(pid)
    return None if stat is None else stat.start_time


def is_running(pid: int, started: Optional[int] = None) -> bool:
    """``pid`` exists and is not a zombie (and, when ``started`` is given, has that start time)."""
    stat = proc_stat(pid)
    return stat is not None and not stat.zombie and (started is None or stat.start_time == started)


def all_stats() -> list[ProcStat]:
    """Every process on this host (in this pid namespace)."""
    stats: list[ProcStat] = []
    try:
        names = os.listdir(PROC)
    except OSError:
        return stats
    for name in names:
        if name.isdigit() and (stat := proc_stat(int(name))) is not None:
            stats.append(stat)
    return stats


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    return [s.pid for s in all_stats() if s.pgid == pgid and not s.zombie]


def thread_ids(pids: Iterable[int], proc: Path = PROC) -> Iterator[tuple[int, int]]:
    """``(pid, tid)`` for every thread of every process in ``pids`` now; processes that are gone are skipped."""
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(proc / str(pid) / "task")]
        except OSError:
            continue
        for tid in tids:
            yield pid, tid


def boot_id() -> str:
    """This boot's id: pids and start times from another boot mean nothing."""
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """The pid namespace of this process (e.g. ``pid:[4026531836]``): pids from another one mean nothing."""
    try:
        return os.readlink(PROC / "self/ns/pid")
    except OSError:
        return ""
