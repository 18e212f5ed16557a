"""Child processes that can always be torn down: one process group each, logs to a file.

``ManagedProcess`` starts a command in its own session (so its process group holds it and every
helper it forks) and stops it by signalling the whole group: SIGTERM, a grace period, then SIGKILL.
``wait_http_ready`` polls a readiness URL and fails fast, with the log tail, when the process dies.
``ProcessGroup`` owns several processes and stops them in reverse start order; ``sigterm_as_exception``
turns SIGTERM into an exception so ``finally`` blocks (and so the teardown) run on ``kill`` as on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Optional

from harness.errors import UserError
from systems.launch import shm

logger = logging.getLogger(__name__)

LOG_TAIL_LINES = 50


class ServerStartError(UserError, RuntimeError):
    """A server exited before it was ready, or did not become ready in time."""


class Terminated(BaseException):
    """Raised in the main thread when the harness receives SIGTERM (see ``sigterm_as_exception``).

    A ``BaseException`` like ``KeyboardInterrupt``, so ``except Exception`` does not swallow it.
    """


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, read from /proc."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for name in entries:
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        # Fields after the command name, which is in parentheses and may itself hold spaces.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(name))
    return members


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ManagedProcess:
    """One command run in its own process group, with stdout and stderr appended to a log file."""

    def __init__(self, name: str, clean_shm: bool = True) -> None:
        self.name = name
        self.clean_shm = clean_shm
        self.log_path: Optional[Path] = None
        self._popen: Optional[subprocess.Popen[bytes]] = None
        self._shm_before: frozenset[str] = frozenset()
        self._shm_seen: set[Path] = set()  # shared-memory files the group was seen using

    def start(self, cmd: Sequence[str], env: Optional[Mapping[str, str]] = None,
              log_path: Optional[Path] = None, cwd: Optional[Path] = None) -> ManagedProcess:
        """Start ``cmd`` (``env`` replaces the environment when given) in a new session."""
        if self._popen is not None:
            raise RuntimeError(f"{self.name}: already started (pid {self._popen.pid})")
        self.log_path = Path(log_path) if log_path is not None else Path(f"{self.name}.log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.clean_shm:
            self._shm_before = shm.snapshot()
        with open(self.log_path, "ab") as log:
            log.write(f"# {self.name}: {' '.join(map(str, cmd))}\n".encode())
            log.flush()
            self._popen = subprocess.Popen(
                list(map(str, cmd)), env=dict(env) if env is not None else None, cwd=cwd,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        logger.info("%s: started pid %d, log %s", self.name, self._popen.pid, self.log_path)
        return self

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._popen.pid

    @property
    def pgid(self) -> int:
        """The process group id (equal to the pid: the child leads its own session)."""
        return self.pid

    @property
    def returncode(self) -> Optional[int]:
        """Exit status of the group leader (negative: killed by that signal); None while running."""
        return None if self._popen is None else self._popen.poll()

    def alive(self) -> bool:
        """Whether the group leader is still running."""
        return self._popen is not None and self._popen.poll() is None

    def group_pids(self) -> list[int]:
        """Live processes still in this process's group (the leader and whatever it forked)."""
        return [] if self._popen is None else _group_members(self.pgid)

    def note_shm_files(self) -> None:
        """Remember the shared-memory files the group uses now (called once it is ready), so they can be
        removed at ``stop`` even if the group was killed from outside in between."""
        if self.clean_shm and self._popen is not None:
            self._shm_seen |= shm.files_used_by(self.group_pids())

    def _wait_group_gone(self, deadline: float) -> bool:
        while True:
            self._popen.poll()  # type: ignore[union-attr]  # reap the leader as soon as it exits
            if not _group_members(self.pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def stop(self, grace_s: float = 10.0) -> Optional[int]:
        """SIGTERM the group, wait up to ``grace_s``, SIGKILL what is left, reap; returns the exit code.

        Safe to call more than once and on a process that already exited.
        """
        if self._popen is None:
            return None
        pgid = self.pgid
        members = _group_members(pgid)
        shm_files = shm.files_used_by(members) if self.clean_shm and members else set()
        if members:
            logger.info("%s: stopping process group %d (%d process(es))", self.name, pgid, len(members))
            _signal_group(pgid, signal.SIGTERM)
            if not self._wait_group_gone(time.monotonic() + grace_s):
                logger.warning("%s: group %d still running %.0f s after SIGTERM; sending SIGKILL",
                               self.name, pgid, grace_s)
                _signal_group(pgid, signal.SIGKILL)
                if not self._wait_group_gone(time.monotonic() + 10.0):
                    logger.error("%s: processes %s of group %d survived SIGKILL", self.name,
                                 _group_members(pgid), pgid)
        try:
            code = self._popen.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            code = None
        candidates = shm_files | self._shm_seen
        if candidates:
            in_use = shm.files_used_by(shm.live_pids())  # never remove what any live process still uses
            shm.remove_leftovers(candidates - in_use, self._shm_before)
        return code

    def tail_log(self, n: int = LOG_TAIL_LINES) -> str:
        """The last ``n`` lines of the log ('' when there is none)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            chunk = 64 * 1024
            while True:
                start = max(0, size - chunk)
                f.seek(start)
                lines = f.read().decode(errors="replace").splitlines()
                if start == 0 or len(lines) > n:
                    return "\n".join(lines[-n:])
                chunk *= 4

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _describe_failure(proc: ManagedProcess, what: str) -> str:
    tail = proc.tail_log(LOG_TAIL_LINES)
    return f"{proc.name} {what}; last {LOG_TAIL_LINES} lines of {proc.log_path}:\n{tail}"


def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """GET ``url`` bypassing any proxy settings; returns (status, body); HTTP errors are returned too."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_http_ready(proc: ManagedProcess, url: str, timeout_s: float, interval_s: float = 0.5) -> float:
    """Poll ``url`` until it answers 200; returns the seconds waited.

    Raises ``ServerStartError`` with the log tail as soon as the process exits, or at the timeout.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        if not proc.alive():
            raise ServerStartError(_describe_failure(
                proc, f"exited with code {proc.returncode} before {url} was ready"))
        try:
            status, _ = http_get(url, timeout_s=min(5.0, max(0.5, deadline - time.monotonic())))
            if status == 200:
                waited = time.monotonic() - start
                logger.info("%s: ready at %s after %.1f s", proc.name, url, waited)
                proc.note_shm_files()
                return waited
        except (OSError, urllib.error.URLError):
            pass  # not listening yet
        if time.monotonic() >= deadline:
            raise ServerStartError(_describe_failure(proc, f"was not ready at {url} within {timeout_s:.0f} s"))
        time.sleep(interval_s)


class ProcessGroup:
    """Owns started processes and stops every one of them, in reverse start order, on exit.

    Use as a context manager; a failure to stop one process does not keep the others running.
    """

    def __init__(self, grace_s: float = 10.0) -> None:
        self.grace_s = grace_s
        self._procs: list[ManagedProcess] = []

    def start(self, name: str, cmd: Sequence[str], env: Optional[Mapping[str, str]] = None,
              log_path: Optional[Path] = None, cwd: Optional[Path] = None) -> ManagedProcess:
        """Start a new ``ManagedProcess`` owned by this group."""
        proc = ManagedProcess(name)
        self._procs.append(proc)  # owned before it starts, so a half-started one is still stopped
        return proc.start(cmd, env=env, log_path=log_path, cwd=cwd)

    def adopt(self, proc: ManagedProcess) -> ManagedProcess:
        """Take ownership of a process started elsewhere."""
        self._procs.append(proc)
        return proc

    @property
    def processes(self) -> list[ManagedProcess]:
        return list(self._procs)

    def stop_all(self) -> None:
        """Stop all owned processes, newest first; logs (and survives) errors from any one of them."""
        while self._procs:
            proc = self._procs.pop()
            try:
                proc.stop(self.grace_s)
            except Exception:
                logger.exception("%s: error while stopping", proc.name)

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


@contextlib.contextmanager
def sigterm_as_exception() -> Iterator[None]:
    """For its duration, SIGTERM (and SIGHUP) raise ``Terminated`` in the main thread.

    This makes ``kill <harness pid>`` unwind the stack like Ctrl-C does, so every ``finally`` and
    ``with`` that owns a server stops it. Outside the main thread it does nothing.
    """
    def _raise(signum: int, frame: Optional[FrameType]) -> None:
        raise Terminated(f"received {signal.Signals(signum).name}")

    previous: dict[int, object] = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, _raise)
    except ValueError:  # not the main thread
        logger.debug("sigterm_as_exception: not in the main thread; signals left as they are")
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def stop_event_on_signals() -> asyncio.Event:
    """An event SIGTERM or SIGINT sets: a helper server process (router, pool node, bootstrap registry)
    serves until it is set, then cleans up and exits 0. Call it inside the running event loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
