"""Making a server's nice value count on kernels that schedule by session (``kernel.sched_autogroup_enabled``).

With autogrouping on (the default of most desktop and many cloud kernels), the scheduler first shares a CPU
fairly between *sessions*, and a process's nice value only orders the threads inside its own session. The
suite starts every server in a session of its own (its own process group, so that it can be killed as one),
so ``nice -n 10`` on a vLLM server does nothing against the load generator in the harness's session: each
server session gets as much CPU as the harness's. Writing the nice value to ``/proc/<pid>/autogroup``
gives the whole session that weight (``sched(7)``, "The autogroup feature"). Raising a nice value needs no
privilege. Without autogrouping, or without the file, nothing is changed.

:func:`renice_threads` gives every thread of a server the nice value as well, which is what counts on kernels
without autogrouping. Both are applied once a server is ready, not at its start: a start-up at nice 10
competing with any other work at nice 0 gets a tenth of a core, and nothing the harness does while it waits
for its servers needs protecting.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from systems.launch.procfs import thread_ids

log = logging.getLogger(__name__)

AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")


def autogroup_enabled(switch: Path = AUTOGROUP_SWITCH) -> bool:
    """Whether the kernel groups CPU time by session."""
    try:
        return switch.read_text().strip() == "1"
    except OSError:
        return False


def autogroup_nice(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The nice value of ``pid``'s session group (None when the kernel has none or the process is gone)."""
    try:
        text = (proc / str(pid) / "autogroup").read_text()  # "/autogroup-1899 nice 10"
        return int(text.split("nice", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def set_autogroup_nice(pid: int, nice: int, switch: Path = AUTOGROUP_SWITCH, proc: Path = Path("/proc")) -> bool:
    """Give ``pid``'s whole session the nice value ``nice``; True when the kernel took it."""
    if not autogroup_enabled(switch):
        return False
    try:
        (proc / str(pid) / "autogroup").write_text(str(int(nice)))
    except OSError as exc:
        log.warning("cannot set the session nice value of pid %d to %d: %s", pid, nice, exc)
        return False
    return autogroup_nice(pid, proc) == int(nice)


def renice_threads(pids: Iterable[int], nice: int, proc: Path = Path("/proc")) -> int:
    """Give every thread of every process in ``pids`` the nice value ``nice``; returns how many threads took it
    (threads that exit meanwhile are skipped). Threads and processes started later inherit it."""
    reniced = 0
    for pid, tid in thread_ids(pids, proc):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, int(nice))  # on Linux a thread id names one thread
            reniced += 1
        except OSError as exc:  # gone, or lowering a nice value without the privilege
            log.debug("cannot set the nice value of thread %d of %d to %d: %s", tid, pid, nice, exc)
    return reniced
