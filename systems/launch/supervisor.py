"""The launch supervisor: the small leader of every server's process group, so the group dies with the harness.

``ManagedProcess.start`` runs ``python -I supervisor.py --parent <harness pid> ... -- <server command>`` in
a new session. The supervisor asks the kernel for a signal when its parent dies (``PR_SET_PDEATHSIG``
via ``prctl``), then checks ``getppid()`` is still the harness (the harness may have died before the
``prctl``: then it exits without starting anything), starts the server in its own (the supervisor's)
process group, waits for it and exits as it did (same exit code, or killed by the same signal), so the
harness sees the server's status. It is also a child subreaper (``PR_SET_CHILD_SUBREAPER``): a process
of the tree whose parent dies first (vLLM's workers when the engine core goes) becomes its child rather
than PID 1's, and once the server has exited the supervisor stops what is left of the group and reaps
every such child before it exits, so no zombie outlives the tree. The server itself gets ``PDEATHSIG=SIGKILL`` toward the supervisor.

When the harness dies (the death signal; a once-a-second ``getppid()`` check backs it up), the
supervisor stops the whole group: SIGTERM, the grace period, SIGKILL for what is left; this reaches
every grandchild (vLLM's engine core and workers), which ``PDEATHSIG`` alone never would. It then
removes the shared-memory files recorded in the server's pid file that no live process uses, and the
pid file. The kernel also sends the death signal when only the harness *thread* that started the
supervisor ends; then ``getppid()`` is still the harness, so the signal is ignored (it comes again when
the harness dies). A SIGTERM sent to the group (the normal stop) is ignored by the supervisor itself: it
waits for the server to exit and mirrors that.

Run as a script by file path with ``python -I`` (the server's ``PYTHONPATH`` does not reach it); it
imports only the standard library and the suite's ``procfs``/``pidfile``/``shm``/``groups`` modules.
The harness imports it only for :func:`supervisor_command`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Optional

if __package__ in (None, ""):  # run as a script: make the suite importable without PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from systems.launch import groups, pidfile, shm  # noqa: E402

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
DEATH_SIGNAL = signal.SIGUSR1
CHECK_INTERVAL_S = 1.0
SCRIPT = Path(__file__).resolve()


class ParentGone(Exception):
    """The harness that started the supervisor is no longer its parent."""


class ParentWatch:
    """The signal handler (death signal, periodic alarm) that raises :class:`ParentGone` once the harness is
    no longer the parent: once only, so a second signal landing while the tear-down begins cannot
    interrupt it (that left a server tree running with no supervisor)."""

    def __init__(self, parent_pid: int) -> None:
        self.parent_pid = parent_pid
        self.gone = False

    def __call__(self, signum: int = 0, frame: Optional[FrameType] = None) -> None:
        if self.gone:
            return
        if os.getppid() != self.parent_pid:
            self.gone = True
            raise ParentGone
        if signum == DEATH_SIGNAL:  # only the harness thread that started this ended
            _log(f"the thread that started this ended; harness pid {self.parent_pid} still runs, watching it")


def set_parent_death_signal(sig: int) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent (thread) dies; False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_child_subreaper() -> bool:
    """Make orphaned descendants (vLLM's workers when their engine core dies first) this process's children,
    so it reaps them instead of leaving zombies for PID 1; False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _reap_descendants(grace_s: float) -> None:
    """Once the server has exited: SIGTERM what is left of the group, SIGKILL it after ``grace_s``, and reap
    every child (orphans this subreaper adopted) until none is left or a bounded wait ends."""
    me = os.getpid()
    deadline = time.monotonic() + grace_s
    terminated = killed = False
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return  # no child left
        left = set(groups.group_members(os.getpgrp())) - {me}
        if left and not terminated:
            groups.signal_group(os.getpgrp(), signal.SIGTERM)  # this process ignores it
            terminated = True
        elif left and not killed and time.monotonic() >= deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            killed = True
        elif time.monotonic() >= deadline + 10.0:
            _log(f"children still running {grace_s + 10:g} s after the server exited; leaving them")
            return
        time.sleep(0.05)


def supervisor_command(cmd: list[str], parent_pid: int, grace_s: float, pid_file: Optional[Path],
                       shm_dir: Path = shm.SHM_DIR) -> list[str]:
    """The command line that runs ``cmd`` under a supervisor bound to ``parent_pid``."""
    head = [sys.executable, "-I", str(SCRIPT), "--parent", str(parent_pid), "--grace", f"{grace_s:g}",
            "--shm-dir", str(shm_dir)]
    if pid_file is not None:
        head += ["--pid-file", str(pid_file)]
    return [*head, "--", *cmd]


def _log(message: str) -> None:
    sys.stderr.write(f"# supervisor {os.getpid()}: {message}\n")
    sys.stderr.flush()


def _child_preexec() -> None:
    set_parent_death_signal(signal.SIGKILL)


def _exit_like(code: int) -> None:
    """Exit the way a child with return code ``code`` did (negative: killed by that signal)."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {-code})
        os.kill(os.getpid(), -code)
        time.sleep(1.0)
        os._exit(128 - code)
    os._exit(code)


def _tear_down(pgid: int, child: subprocess.Popen[bytes], grace_s: float, pid_file: Optional[Path],
               shm_dir: Path) -> None:
    """Stop every other process of the group, then clean what its pid file records."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    me = frozenset({os.getpid()})
    reap = child.poll
    groups.signal_group(pgid, signal.SIGTERM)
    if not groups.wait_group_gone(pgid, time.monotonic() + grace_s, reap, exclude=me):
        _log(f"group still running {grace_s:g} s after SIGTERM; sending SIGKILL")
        for pid in set(groups.group_members(pgid)) - me:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        groups.wait_group_gone(pgid, time.monotonic() + 10.0, reap, exclude=me)
    if pid_file is not None:
        try:
            record = pidfile.read_record(pid_file)
        except (OSError, ValueError):
            record = None
        if record is not None:
            shm.remove_recorded({Path(f.path): f.inode for f in record.shm_files}, shm_dir)
        pidfile.remove_record(pid_file)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, required=True, help="pid of the harness that started this")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--pid-file", type=Path, default=None)
    parser.add_argument("--shm-dir", type=Path, default=shm.SHM_DIR)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        parser.error("no command given after --")

    check_parent = ParentWatch(args.parent)
    signal.signal(DEATH_SIGNAL, check_parent)
    set_parent_death_signal(DEATH_SIGNAL)
    set_child_subreaper()
    if os.getppid() != args.parent:  # the harness died before the prctl took effect
        _log(f"harness pid {args.parent} is gone before the start; not starting {cmd[0]}")
        sys.exit(1)
    signal.signal(signal.SIGTERM, lambda *_: None)  # the group's stop: wait for the server and mirror it
    signal.signal(signal.SIGHUP, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    child = subprocess.Popen(cmd, preexec_fn=_child_preexec)
    signal.signal(signal.SIGALRM, check_parent)
    signal.setitimer(signal.ITIMER_REAL, CHECK_INTERVAL_S, CHECK_INTERVAL_S)
    try:
        check_parent()
        code = child.wait()  # a handler raising ParentGone interrupts it
    except ParentGone:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(DEATH_SIGNAL, signal.SIG_IGN)
        _log(f"harness pid {args.parent} is gone; stopping process group {os.getpgrp()}")
        _tear_down(os.getpgrp(), child, args.grace, args.pid_file, args.shm_dir)
        os._exit(1)
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    _reap_descendants(args.grace)
    _exit_like(code)


if __name__ == "__main__":
    main()
