"""The daemons of a single-node cluster: started in their own process groups, recorded, found, stopped.

:class:`DaemonSet` keeps one JSON record per daemon in ``<cluster dir>/pids/<name>.json``: the leader's pid
(= its process group, as each daemon starts a new session), its start time (``/proc/<pid>/stat`` field
22, so a reused pid is never mistaken for it), this boot's id, the command and its log. A record counts as
running only while all three still match; ``stop`` signals only the recorded group (SIGTERM, a grace
period, SIGKILL) and the members that started after the leader, never processes found by name.

:func:`run_command` runs a client command (``sinfo``, ``scancel``, ``apt-get``) and turns a failure into a
:class:`ClusterError` naming the command, its exit status and the tail of its stderr; :func:`wait_for`
polls for readiness and fails as soon as a daemon it watches has exited, with the tail of its log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from systems.launch import groups, procfs
from vocab.errors import UserError

log = logging.getLogger(__name__)

POLL_S = 0.25
TAIL_LINES = 20


class ClusterError(UserError, RuntimeError):
    """A cluster could not be brought up, inspected or stopped; the message names the command or daemon."""


@dataclass(frozen=True)
class DaemonRecord:
    """One daemon this cluster started: its group leader, when it started, what it runs and where it logs."""

    name: str
    pid: int
    start_time: int
    boot_id: str
    command: tuple[str, ...]
    log: str

    def alive(self) -> bool:
        """The recorded leader still runs (same boot, same pid and start time, not a zombie)."""
        return self.boot_id == procfs.boot_id() and procfs.is_running(self.pid, self.start_time)

    def members(self) -> list[int]:
        """Live processes of the recorded group that started no earlier than its leader (this boot only)."""
        if self.boot_id != procfs.boot_id():
            return []
        return [s.pid for s in procfs.all_stats()
                if s.pgid == self.pid and not s.zombie and s.start_time >= self.start_time]


def tail(path: Path | str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ('' when it cannot be read)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def describe(command: Sequence[str]) -> str:
    return shlex.join(str(c) for c in command)


def run_command(command: Sequence[str], *, env: Optional[Mapping[str, str]] = None, timeout_s: float = 120.0,
                check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a client command to completion; with ``check``, a missing program, a time-out or a non-zero exit
    raises :class:`ClusterError` naming the command and the tail of its stderr."""
    try:
        proc = subprocess.run(list(command), env=None if env is None else dict(env), capture_output=True,
                              text=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise ClusterError(f"`{describe(command)}` failed: {command[0]} not found ({exc.strerror})") from exc
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"`{describe(command)}` did not finish within {timeout_s:.0f} s") from exc
    if check and proc.returncode != 0:
        err = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-TAIL_LINES:])
        raise ClusterError(f"`{describe(command)}` failed with exit status {proc.returncode}"
                           + (f":\n{err}" if err else " (no output)"))
    return proc


def wait_for(check: Callable[[], bool], *, what: str, timeout_s: float,
             watch: Sequence[DaemonRecord] = ()) -> None:
    """Poll ``check`` until it is true; :class:`ClusterError` when ``timeout_s`` passes or as soon as a
    watched daemon has exited (with the tail of its log)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return
        for record in watch:
            if not record.alive():
                raise ClusterError(f"{record.name} exited while waiting for {what} ({describe(record.command)}); "
                                   f"last lines of {record.log}:\n{tail(record.log)}")
        if time.monotonic() >= deadline:
            logs = "".join(f"\nlast lines of {r.log}:\n{tail(r.log)}" for r in watch)
            raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}{logs}")
        time.sleep(POLL_S)


class DaemonSet:
    """The daemons recorded under ``<directory>/pids``."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.pid_dir = self.directory / "pids"

    def _path(self, name: str) -> Path:
        return self.pid_dir / f"{name}.json"

    def record(self, name: str) -> Optional[DaemonRecord]:
        """The record of daemon ``name`` (None: none, or unreadable)."""
        try:
            data = json.loads(self._path(name).read_text(encoding="utf-8"))
            return DaemonRecord(name=str(data["name"]), pid=int(data["pid"]), start_time=int(data["start_time"]),
                                boot_id=str(data["boot_id"]), command=tuple(str(c) for c in data["command"]),
                                log=str(data["log"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def alive(self, name: str) -> Optional[DaemonRecord]:
        """The record of daemon ``name`` when its leader still runs, else None."""
        record = self.record(name)
        return record if record is not None and record.alive() else None

    def start(self, name: str, command: Sequence[str], log_path: Path, *,
              env: Optional[Mapping[str, str]] = None, cwd: Optional[Path] = None) -> DaemonRecord:
        """Start ``command`` in a new session (its own process group), stdout and stderr appended to
        ``log_path``, and record it. :class:`ClusterError` when the program cannot be started."""
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {describe(command)}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, env=None if env is None else dict(env), cwd=cwd)
            except OSError as exc:
                raise ClusterError(f"cannot start {name}: `{describe(command)}`: {exc.strerror or exc}") from exc
        started = procfs.start_time(proc.pid)
        record = DaemonRecord(name=name, pid=proc.pid, start_time=started if started is not None else -1,
                              boot_id=procfs.boot_id(), command=tuple(str(c) for c in command), log=str(log_path))
        tmp = self._path(name).with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(record), indent=1), encoding="utf-8")
        os.replace(tmp, self._path(name))
        log.info("%s: started, process group %d, log %s", name, proc.pid, log_path)
        return record

    def stop(self, name: str, grace_s: float, *, leader_first: bool = False) -> bool:
        """Stop daemon ``name``'s recorded process group and forget it; True when nothing of it runs.

        ``leader_first``: SIGTERM only the leader first and give it ``grace_s`` to stop its own children
        (``ray start --block`` shuts its processes down in order); then the group as a whole."""
        record = self.record(name)
        if record is None:
            return True
        if record.members():
            if leader_first and record.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(record.pid, signal.SIGTERM)
                deadline = time.monotonic() + grace_s
                while record.members() and time.monotonic() < deadline:
                    time.sleep(POLL_S)
            if record.members():
                groups.stop_group(record.pid, grace_s, name)
        gone = not record.members()
        if gone:
            with contextlib.suppress(FileNotFoundError):
                self._path(name).unlink()
        else:
            log.error("%s: processes %s of group %d are still running", name, record.members(), record.pid)
        return gone
