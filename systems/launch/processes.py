"""Child processes that can always be torn down: one process group each, logs to a file.

``ManagedProcess`` starts a command in its own session (so its process group holds it and every
helper it forks) and stops it by signalling the whole group: SIGTERM, a grace period, then SIGKILL.
The group's leader is a small supervisor (:mod:`systems.launch.supervisor`) that runs the command and
exits as it does, and stops the whole group when the harness dies, even by SIGKILL. Each start writes a
pid file (:mod:`systems.launch.pidfile`), removed at ``stop``; before each start, servers a dead harness
left running are stopped (:mod:`systems.launch.leftovers`, also ``python -m systems.launch.leftovers``).
The child gets an allow-listed environment (:func:`systems.launch.child_env.child_environment`).
``wait_http_ready`` polls a readiness URL and fails fast, with the log tail, when the process dies.
``ProcessGroup`` owns several processes and stops them in reverse start order; ``sigterm_as_exception``
turns SIGTERM into an exception so ``finally`` blocks (and so the teardown) run on ``kill`` as on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Optional

from systems.launch import affinity, autogroup, groups, leftovers, pidfile, ports, procfs, shm
from systems.launch.child_env import child_environment, split_inherited
from systems.launch.supervisor import supervisor_command
from vocab.errors import UserError

if TYPE_CHECKING:  # asyncio and urllib are imported where used: a simulator run imports this module, not them
    import asyncio

logger = logging.getLogger(__name__)

LOG_TAIL_LINES = 50
SURVIVOR_WAIT_S = 60.0  # after SIGKILL and its 10 s: how much longer a stop waits before judging shared memory


class ServerStartError(UserError, RuntimeError):
    """A server exited before it was ready, or did not become ready in time."""


class Terminated(BaseException):
    """Raised in the main thread when the harness receives SIGTERM (see ``sigterm_as_exception``).

    A ``BaseException`` like ``KeyboardInterrupt``, so ``except Exception`` does not swallow it.
    """


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, read from /proc."""
    return procfs.group_members(pgid)


class ManagedProcess:
    """One command run in its own process group, with stdout and stderr appended to a log file.

    ``grace_s`` is what the supervisor waits between SIGTERM and SIGKILL when the harness dies;
    ``runtime_dir`` (default :func:`pidfile.runtime_dir`) holds the pid files; ``shm_dir`` is where
    shared-memory files are looked for.
    """

    def __init__(self, name: str, clean_shm: bool = True, grace_s: float = 10.0,
                 runtime_dir: Optional[Path] = None, shm_dir: Path = shm.SHM_DIR) -> None:
        self.name = name
        self.clean_shm = clean_shm
        self.grace_s = grace_s
        self.runtime_dir = runtime_dir
        self.shm_dir = Path(shm_dir)
        self.log_path: Optional[Path] = None
        self.pid_file: Optional[Path] = None
        self._record: Optional[pidfile.ProcessRecord] = None
        self._popen: Optional[subprocess.Popen[bytes]] = None
        self._shm_before: frozenset[str] = frozenset()
        self._shm_seen: set[Path] = set()  # shared-memory files the group was seen using

    def start(self, cmd: Sequence[str], env: Optional[Mapping[str, str]] = None,
              log_path: Optional[Path] = None, cwd: Optional[Path] = None,
              extra_env: Optional[Mapping[str, str]] = None) -> ManagedProcess:
        """Start ``cmd`` in a new session, under the supervisor, after stopping a dead harness's leftovers.

        The environment is :func:`child_environment` of ``os.environ``: only allow-listed, non-secret names
        are inherited. Names in ``env`` that are not in ``os.environ`` or differ from it, and all of
        ``extra_env``, are the caller's own settings and are passed as given; names ``env`` merely
        copied from ``os.environ`` go through the allow-list like the rest.
        """
        if self._popen is not None:
            raise RuntimeError(f"{self.name}: already started (pid {self._popen.pid})")
        directory = pidfile.ensure_runtime_dir(self.runtime_dir or pidfile.runtime_dir())
        try:
            leftovers.stop_leftovers(directory, grace_s=self.grace_s, shm_dir=self.shm_dir)
        except Exception:
            logger.exception("%s: error while looking for leftover servers in %s", self.name, directory)
        inherited, explicit = split_inherited(env, os.environ) if env is not None else (dict(os.environ), {})
        child_env = child_environment(inherited, {**explicit, **(extra_env or {})})
        self.log_path = Path(log_path) if log_path is not None else Path(f"{self.name}.log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.clean_shm:
            self._shm_before = shm.snapshot(self.shm_dir)
        cmd = list(map(str, cmd))
        self.pid_file = pidfile.new_path(directory, self.name)
        wrapped = supervisor_command(cmd, os.getpid(), self.grace_s, self.pid_file, self.shm_dir)
        with open(self.log_path, "ab") as log:
            log.write(f"# {self.name}: {' '.join(cmd)}\n".encode())
            log.flush()
            self._popen = subprocess.Popen(
                wrapped, env=child_env, cwd=cwd,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._record = pidfile.new_record(self.name, self._popen.pid, cmd, self.log_path)
            pidfile.write_record(self.pid_file, self._record)
        except (OSError, ProcessLookupError) as exc:  # it exited at once: wait_http_ready reports that
            logger.warning("%s: no pid file written (%s)", self.name, exc)
        logger.info("%s: started pid %d, log %s", self.name, self._popen.pid, self.log_path)
        return self

    @property
    def pid(self) -> int:
        """The group leader's pid: the supervisor, whose exit mirrors the command's."""
        if self._popen is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._popen.pid

    @property
    def pgid(self) -> int:
        """The process group id (equal to the pid: the supervisor leads its own session)."""
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
        removed at ``stop`` even if the group was killed from outside in between; also recorded, with
        their inodes, in the pid file, for a cleanup after the harness itself died."""
        if not self.clean_shm or self._popen is None:
            return
        seen = shm.files_used_by(self.group_pids(), self.shm_dir)
        self._shm_seen |= seen
        ours = shm.inodes(p for p in self._shm_seen if p.name not in self._shm_before)
        if self._record is not None and self.pid_file is not None and ours:
            self._record = pidfile.with_shm_files(
                self._record, [pidfile.ShmFile(str(p), ino) for p, ino in ours.items()])
            try:
                pidfile.write_record(self.pid_file, self._record)
            except OSError as exc:
                logger.warning("%s: could not update pid file %s: %s", self.name, self.pid_file, exc)

    def stop(self, grace_s: float = 10.0) -> Optional[int]:
        """SIGTERM the group, wait up to ``grace_s``, SIGKILL what is left, reap; returns the exit code.

        Then removes the shared-memory files the group created (see :mod:`systems.launch.shm`) and the
        pid file. Safe to call more than once and on a process that already exited.
        """
        if self._popen is None:
            return None
        pgid = self.pgid
        members = _group_members(pgid)
        shm_files = shm.files_used_by(members, self.shm_dir) if self.clean_shm and members else set()
        stopped = not members or groups.stop_group(pgid, grace_s, self.name, reap=self._popen.poll)
        # a process in uninterruptible sleep outlives SIGKILL for a while (seen once: a vLLM prefill instance
        # after its pool node was killed); its shared memory is only judged once it is gone
        if not stopped and groups.wait_group_gone(pgid, time.monotonic() + SURVIVOR_WAIT_S, self._popen.poll):
            logger.info("%s: group %d gone after the extra wait", self.name, pgid)
        try:
            code = self._popen.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            code = None
        candidates = shm_files | self._shm_seen
        if self.clean_shm:  # semaphores of a resource tracker killed with the tree (never seen mapped)
            candidates |= shm.new_python_semaphores(self._shm_before, self.shm_dir)
        if candidates:  # never remove what a live process uses
            shm.remove_leftovers(shm.unused(candidates, self.shm_dir), self._shm_before)
        if self.pid_file is not None and not _group_members(pgid):
            pidfile.remove_record(self.pid_file)
        return code

    def make_dirs(self, paths: Sequence[Path]) -> None:
        """Create the folders the command will use (the server's caches, temporary files, sockets)."""
        for path in paths:
            Path(path).mkdir(parents=True, exist_ok=True)

    def ensure_port_free(self, port: int) -> None:
        """``PortInUseError`` when ``port`` is taken on this host (checked before a server is started)."""
        ports.ensure_port_free(port)

    def pin_threads(self, cores: str) -> int:
        """Bind every thread of the group to ``cores`` (e.g. "0" or "0-1"); returns the threads bound."""
        return affinity.pin_threads(self.group_pids(), affinity.parse_cpu_list(cores))

    def set_nice(self, nice: int) -> bool:
        """Lower the whole group's priority to ``nice``: every thread's nice value and, on kernels that share CPU
        by session, the session's (the group runs in a session of its own). True when any thread took it."""
        reniced = autogroup.renice_threads(self.group_pids(), nice)
        autogroup.set_autogroup_nice(self.pid, nice)
        return reniced > 0

    def tail_log(self, n: int = LOG_TAIL_LINES) -> str:
        """The last ``n`` lines of the log ('' when there is none)."""
        return tail_lines(self.log_path, n)

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def tail_lines(path: Optional[Path], n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` lines of the file at ``path`` ('' when there is none)."""
    if path is None or not Path(path).exists():
        return ""
    with open(path, "rb") as f:
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


def _describe_failure(proc: ManagedProcess, what: str) -> str:
    tail = proc.tail_log(LOG_TAIL_LINES)
    return f"{proc.name} {what}; last {LOG_TAIL_LINES} lines of {proc.log_path}:\n{tail}"


def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """GET ``url`` bypassing any proxy settings; returns (status, body); HTTP errors are returned too."""
    import urllib.error
    import urllib.request

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
        except OSError:  # urllib's URLError is one
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
        proc = ManagedProcess(name, grace_s=self.grace_s)
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


class ReceivedSignals:
    """What :func:`sigterm_as_exception` yields: the first signal it turned into ``Terminated``. Python drops
    an exception raised where it cannot propagate (a signal handler that runs inside a ``__del__`` or a
    callback prints "Exception ignored" and goes on): :meth:`check` raises it again, so a job that got
    SIGTERM never reports success."""

    def __init__(self) -> None:
        self.first: Optional[str] = None

    def check(self) -> None:
        """Raise ``Terminated`` if a signal was received (whether or not its exception got through)."""
        if self.first is not None:
            raise Terminated(f"received {self.first}")


@contextlib.contextmanager
def sigterm_as_exception() -> Iterator[ReceivedSignals]:
    """For its duration, SIGTERM (and SIGHUP) raise ``Terminated`` in the main thread.

    This makes ``kill <harness pid>`` unwind the stack like Ctrl-C does, so every ``finally`` and
    ``with`` that owns a server stops it. Outside the main thread it does nothing. It yields a
    :class:`ReceivedSignals` to :meth:`~ReceivedSignals.check` before reporting success.
    """
    received = ReceivedSignals()

    def _raise(signum: int, frame: Optional[FrameType]) -> None:
        name = signal.Signals(signum).name
        if received.first is None:
            received.first = name
        raise Terminated(f"received {name}")

    previous: dict[int, object] = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, _raise)
    except ValueError:  # not the main thread
        logger.debug("sigterm_as_exception: not in the main thread; signals left as they are")
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def stop_event_on_signals() -> asyncio.Event:
    """An event SIGTERM or SIGINT sets: a helper server process (router, pool node, bootstrap registry)
    serves until it is set, then cleans up and exits 0. Call it inside the running event loop."""
    import asyncio

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
