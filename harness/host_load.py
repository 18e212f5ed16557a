"""Host interference during one measured point: CPU taken by processes outside the job, and steal time.

On a 2-core host a point's latencies are the system's only when nothing else ran beside it. The monitor
reads ``/proc`` at the start and the end of the point:

- every process's CPU time (``utime + stime`` of ``/proc/<pid>/stat``, plus the ``cutime + cstime`` its
  reaped children added in between, so short-lived processes such as a compiler under ``make`` count too).
  A process belongs to the *job* when, in either snapshot, its parent chain (field 4 of ``stat``) leads to
  the harness process: the deployment's servers, routers, pool nodes and load generators are all started
  by the harness, whatever process group or session they put themselves in. Every other process on the
  host is *outside* the job. A process that appeared between the snapshots counts with all of its CPU time
  (it started in the interval); one that vanished counts with nothing past the first snapshot, and what
  its parent reaped from it is counted only beyond the part already spent at the first snapshot. A process
  the job double-forks away from its own tree *during* the point is seen outside (its parent chain no
  longer reaches the harness at either snapshot);
- the host's steal time (the ``steal`` column of the ``cpu`` line of ``/proc/stat``): time a hypervisor
  gave this VM's virtual CPUs to someone else.

``result()`` is a JSON-able block; the thresholds and reasons are in :mod:`harness.validity`
(``host_interference_reasons``). On a host without a readable ``/proc`` every number is NaN; it never raises.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Optional

log = logging.getLogger(__name__)

NAN = float("nan")
TOP_OUTSIDE = 5  # processes named in ``top_outside``


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One process as read from ``/proc/<pid>/stat`` (CPU times in clock ticks)."""

    pid: int
    ppid: int
    comm: str
    start_ticks: int  # start time after boot: with the pid, identifies a process across pid reuse
    own_ticks: int  # utime + stime
    reaped_ticks: int  # cutime + cstime: what its waited-for children used

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_ticks)


@dataclass(frozen=True)
class Snapshot:
    """Every readable process, the job's processes among them, and the host's CPU tick counters."""

    at: float  # time.monotonic()
    procs: dict[tuple[int, int], ProcSample] = field(default_factory=dict)
    job: frozenset[tuple[int, int]] = frozenset()
    cpu_total_ticks: Optional[int] = None  # all ticks of the aggregate cpu line (user..steal)
    cpu_steal_ticks: Optional[int] = None


def _clock_ticks() -> Optional[int]:
    try:
        ticks = os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return None
    return ticks if ticks > 0 else None


def parse_stat(text: str) -> Optional[ProcSample]:
    """A ``/proc/<pid>/stat`` line, or None when it is not one (the command name may hold spaces and
    parentheses: it runs from the first "(" to the last ")")."""
    lpar, rpar = text.find("("), text.rfind(")")
    if lpar < 0 or rpar < lpar:
        return None
    rest = text[rpar + 2:].split()  # field 3 (state) onwards
    try:
        return ProcSample(pid=int(text[:lpar]), ppid=int(rest[1]), comm=text[lpar + 1:rpar],
                          start_ticks=int(rest[19]), own_ticks=int(rest[11]) + int(rest[12]),
                          reaped_ticks=int(rest[13]) + int(rest[14]))
    except (IndexError, ValueError):
        return None


def read_processes(proc: Path) -> dict[tuple[int, int], ProcSample]:
    """Every process of ``proc`` whose ``stat`` could be read (one that exits while being read is skipped)."""
    out: dict[tuple[int, int], ProcSample] = {}
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return out
    for entry in entries:
        try:
            text = (proc / entry / "stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        sample = parse_stat(text)
        if sample is not None:
            out[sample.key] = sample
    return out


def read_cpu_ticks(proc: Path) -> tuple[Optional[int], Optional[int]]:
    """(all ticks, steal ticks) of the aggregate ``cpu`` line of ``proc/stat``; None where unreadable (steal
    is None on a kernel whose line has fewer than 8 columns)."""
    try:
        with open(proc / "stat", encoding="utf-8") as f:
            line = f.readline()
    except OSError:
        return None, None
    parts = line.split()
    if not parts or parts[0] != "cpu":
        return None, None
    try:
        values = [int(v) for v in parts[1:9]]  # user nice system idle iowait irq softirq steal (guest is in user)
    except ValueError:
        return None, None
    return (sum(values) if values else None), (values[7] if len(values) >= 8 else None)


def job_processes(procs: dict[tuple[int, int], ProcSample], root_pid: int) -> frozenset[tuple[int, int]]:
    """Keys of ``root_pid`` and of every process whose parent chain leads to it."""
    children: dict[int, list[ProcSample]] = defaultdict(list)
    roots = []
    for sample in procs.values():
        if sample.pid == root_pid:
            roots.append(sample)
        elif sample.ppid != sample.pid:
            children[sample.ppid].append(sample)
    job: set[tuple[int, int]] = set()
    stack = roots
    while stack:
        sample = stack.pop()
        if sample.key in job:
            continue
        job.add(sample.key)
        stack.extend(children.get(sample.pid, ()))
    return frozenset(job)


def take_snapshot(proc: Path, root_pid: int) -> Snapshot:
    """Read the host's processes and CPU counters now."""
    procs = read_processes(proc)
    total, steal = read_cpu_ticks(proc)
    return Snapshot(at=time.monotonic(), procs=procs, job=job_processes(procs, root_pid), cpu_total_ticks=total,
                    cpu_steal_ticks=steal)


def _nan_block(wall_s: float) -> dict[str, Any]:
    return {"wall_s": wall_s, "outside_cpu_s": NAN, "outside_cpu_share": NAN, "steal_share": NAN,
            "job_cpu_s": NAN, "top_outside": []}


def compare_snapshots(first: Snapshot, last: Snapshot, clock_ticks: Optional[int] = None,
                      top: int = TOP_OUTSIDE) -> dict[str, Any]:
    """The host-load block over the interval between two snapshots (see :class:`HostLoadMonitor`)."""
    wall_s = max(last.at - first.at, 0.0)
    block = _nan_block(wall_s)
    if first.cpu_total_ticks is not None and first.cpu_steal_ticks is not None \
            and last.cpu_total_ticks is not None and last.cpu_steal_ticks is not None:
        ticks = last.cpu_total_ticks - first.cpu_total_ticks
        if ticks > 0:
            block["steal_share"] = min(max((last.cpu_steal_ticks - first.cpu_steal_ticks) / ticks, 0.0), 1.0)
    hz = clock_ticks or _clock_ticks()
    if not hz or not first.procs or not last.procs:
        return block
    # what a vanished process had used by the first snapshot is already in its total: its parent's reaped
    # counter grows by the process's whole total, of which only the part past the first snapshot is new
    vanished_by_parent: dict[tuple[int, int], int] = defaultdict(int)
    by_pid = {s.pid: s for s in first.procs.values()}
    for key, sample in first.procs.items():
        if key not in last.procs and sample.ppid in by_pid:
            vanished_by_parent[by_pid[sample.ppid].key] += sample.own_ticks + sample.reaped_ticks
    outside: list[tuple[str, int, float]] = []
    outside_ticks = job_ticks = 0
    for key in first.procs.keys() | last.procs.keys():
        before, after = first.procs.get(key), last.procs.get(key)
        if after is None:  # vanished: nothing readable past the first snapshot
            continue
        if before is None:  # appeared: all of its time is in the interval
            used = after.own_ticks + after.reaped_ticks
        else:
            used = max(after.own_ticks - before.own_ticks, 0) + max(
                after.reaped_ticks - before.reaped_ticks - vanished_by_parent.get(key, 0), 0)
        if used <= 0:
            continue
        if key in first.job or key in last.job:
            job_ticks += used
        else:
            outside_ticks += used
            outside.append((after.comm, after.pid, used / hz))
    outside.sort(key=lambda item: item[2], reverse=True)
    block["outside_cpu_s"] = outside_ticks / hz
    block["job_cpu_s"] = job_ticks / hz
    block["outside_cpu_share"] = outside_ticks / hz / wall_s if wall_s > 0 else NAN
    block["top_outside"] = [[comm, pid, round(cpu_s, 3)] for comm, pid, cpu_s in outside[:top]]
    return block


class HostLoadMonitor:
    """CPU used outside the job and the host's steal time over a ``with`` block.

    ``with HostLoadMonitor() as mon: ...`` then ``mon.result()``: ``{"wall_s", "outside_cpu_s",
    "outside_cpu_share"`` (outside CPU seconds per wall second, i.e. cores), ``"steal_share"`` (steal ticks
    over all ticks, 0..1), ``"job_cpu_s", "top_outside": [[comm, pid, cpu_s], ...]}`` (at most five, the
    largest first). ``root_pid`` is the job's root (this process by default); ``proc`` the procfs mount.
    Never raises for an unreadable ``/proc``: the numbers are then NaN.
    """

    def __init__(self, root_pid: Optional[int] = None, proc: Path | str = "/proc") -> None:
        self.root_pid = os.getpid() if root_pid is None else int(root_pid)
        self.proc = Path(proc)
        self._first: Optional[Snapshot] = None
        self._last: Optional[Snapshot] = None

    def _snapshot(self) -> Optional[Snapshot]:
        try:
            return take_snapshot(self.proc, self.root_pid)
        except Exception:  # a monitor must never break the measurement it watches
            log.warning("host load: cannot read %s", self.proc, exc_info=True)
            return None

    def start(self) -> HostLoadMonitor:
        """Take the first snapshot (``__enter__`` does this)."""
        self._first, self._last = self._snapshot(), None
        return self

    def stop(self) -> None:
        """Take the last snapshot (``__exit__`` does this)."""
        self._last = self._snapshot()

    def __enter__(self) -> HostLoadMonitor:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def result(self) -> dict[str, Any]:
        """The block over start to stop (to now, when not stopped yet)."""
        last = self._last if self._last is not None else self._snapshot()
        first = self._first
        if first is None or last is None:
            return _nan_block(NAN)
        try:
            return compare_snapshots(first, last)
        except Exception:  # see _snapshot
            log.warning("host load: cannot compare snapshots", exc_info=True)
            return _nan_block(max(last.at - first.at, 0.0))


def is_measured(value: object) -> bool:
    """A finite number (a NaN share means: not measured on this host)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
