"""Making a server's nice value count on kernels that schedule by session (``kernel.sched_autogroup_enabled``).

With autogrouping on (the default of most desktop and many cloud kernels), the scheduler first shares a CPU
fairly between *sessions*, and a process's nice value only orders the threads inside its own session. The
suite starts every server in a session of its own (its own process group, so that it can be killed as one),
so ``nice -n 10`` on a vLLM server does nothing against the load generator in the harness's session: each
server session gets as much CPU as the harness's. Writing the nice value to ``/proc/<pid>/autogroup``
gives the whole session that weight (``sched(7)``, "The autogroup feature"). Raising a nice value needs no
privilege. Without autogrouping, or without the file, nothing is changed.
"""

from __future__ import annotations

import logging
from pathlib import Path

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
