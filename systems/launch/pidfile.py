"""Pid files: one JSON record per started server, so a later start can find what a dead harness left.

``ManagedProcess.start`` writes ``<runtime dir>/<name>-<random>.json`` and ``stop`` removes it. A
record names the process group (whose leader is the launch supervisor), the leader's pid and start time
(``/proc/<pid>/stat`` field 22, so a reused pid is never mistaken for it), the command, the log, the
owner (the harness's pid, start time, uid and user name), this boot's id and pid namespace, and the
shared-memory files the group was seen using once it was ready (path and inode).

The runtime directory is ``$DISAGG_RUNTIME_DIR`` when set, else ``$XDG_RUNTIME_DIR/disagg-bench/processes``,
else ``<temp dir>/disagg-bench-<uid>/processes``; it is created private (0700) and refused when it is a
symbolic link or belongs to another user. Standard library (and ``vocab.errors``) only: the launch
supervisor imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from systems.launch import procfs
from vocab.errors import UserError

RUNTIME_DIR_ENV = "DISAGG_RUNTIME_DIR"
SUFFIX = ".json"


class RuntimeDirError(UserError, OSError):
    """The runtime directory cannot be used safely (a symbolic link, another user's, not a directory)."""


def runtime_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """Where this user's pid files live (see the module docstring); not created here."""
    environ = os.environ if environ is None else environ
    if environ.get(RUNTIME_DIR_ENV):
        return Path(environ[RUNTIME_DIR_ENV])
    xdg = environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir() and os.access(xdg, os.W_OK):
        return Path(xdg) / "disagg-bench" / "processes"
    return Path(tempfile.gettempdir()) / f"disagg-bench-{os.getuid()}" / "processes"


def _check_private(path: Path) -> None:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise RuntimeDirError(f"{path}: expected a directory for pid files, found a symbolic link or a file")
    if info.st_uid != os.getuid():
        raise RuntimeDirError(f"{path}: pid-file directory belongs to uid {info.st_uid}, not to this user "
                              f"({os.getuid()}); set {RUNTIME_DIR_ENV} to a directory of your own")


def ensure_runtime_dir(directory: Path) -> Path:
    """Create ``directory`` private to this user (and its ``disagg-bench*`` parent, likewise); refuse one
    that is a symbolic link or another user's (``RuntimeDirError`` naming it)."""
    directory = Path(directory)
    ours = [directory.parent, directory] if directory.parent.name.startswith("disagg-bench") else [directory]
    ours[0].parent.mkdir(parents=True, exist_ok=True)
    for path in ours:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        _check_private(path)
    return directory


@dataclass(frozen=True)
class ShmFile:
    """A shared-memory file a group was seen using: its path and inode (a re-created file differs)."""

    path: str
    inode: int


@dataclass(frozen=True)
class ProcessRecord:
    """One started server, as its pid file records it."""

    name: str
    pid: int  # the group leader (the launch supervisor)
    pgid: int
    start_time: int  # of ``pid``, clock ticks after boot
    command: tuple[str, ...]
    log_path: str
    owner_pid: int  # the harness that started it
    owner_start_time: int
    uid: int
    user: str
    boot_id: str
    pid_namespace: str
    started_at: float  # wall-clock seconds (for people)
    shm_files: tuple[ShmFile, ...] = field(default=())

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> ProcessRecord:
        raw: dict[str, Any] = json.loads(text)
        raw["command"] = tuple(raw["command"])
        raw["shm_files"] = tuple(ShmFile(**f) for f in raw.get("shm_files", ()))
        return ProcessRecord(**raw)

    def same_host_view(self) -> bool:
        """Whether this record's pids mean what they say here (same boot, same pid namespace)."""
        return self.boot_id == procfs.boot_id() and self.pid_namespace == procfs.pid_namespace()

    def owner_alive(self) -> bool:
        """Whether the harness that started it is still running (the same process, not a reused pid)."""
        return procfs.is_running(self.owner_pid, self.owner_start_time)

    def leader_running(self) -> bool:
        """Whether the recorded group leader still runs (same pid, same start time, same group)."""
        stat_ = procfs.proc_stat(self.pid)
        return (stat_ is not None and not stat_.zombie and stat_.start_time == self.start_time
                and stat_.pgid == self.pgid)


def new_record(name: str, pid: int, command: Iterable[str], log_path: Path) -> ProcessRecord:
    """The record of ``pid`` (just started by this process), read from /proc."""
    start = procfs.start_time(pid)
    owner_start = procfs.start_time(os.getpid())
    if start is None or owner_start is None:
        raise ProcessLookupError(f"{name}: pid {pid} is not in /proc")
    try:
        import pwd
        user = pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        user = str(os.getuid())
    return ProcessRecord(name=name, pid=pid, pgid=pid, start_time=start, command=tuple(map(str, command)),
                         log_path=str(log_path), owner_pid=os.getpid(), owner_start_time=owner_start,
                         uid=os.getuid(), user=user, boot_id=procfs.boot_id(), pid_namespace=procfs.pid_namespace(),
                         started_at=time.time())


def new_path(directory: Path, name: str) -> Path:
    """A fresh pid-file path for a server called ``name`` (known before the server starts)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:64] or "process"
    return Path(directory) / f"{safe}-{uuid.uuid4().hex[:12]}{SUFFIX}"


def write_record(path: Path, record: ProcessRecord) -> Path:
    """Write (or replace) the pid file ``path`` atomically; returns ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=SUFFIX)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(record.to_json())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def with_shm_files(record: ProcessRecord, files: Iterable[ShmFile]) -> ProcessRecord:
    """``record`` with ``files`` added to its shared-memory files."""
    merged = {f.path: f for f in record.shm_files}
    merged.update({f.path: f for f in files})
    return replace(record, shm_files=tuple(sorted(merged.values(), key=lambda f: f.path)))


def read_record(path: Path) -> ProcessRecord:
    """The record in ``path``; ``ValueError`` naming the file when it is not a valid record."""
    try:
        return ProcessRecord.from_json(Path(path).read_text())
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path}: not a valid pid file ({exc})") from exc


def record_paths(directory: Path) -> list[Path]:
    """The pid files in ``directory`` (none when it does not exist)."""
    try:
        return sorted(p for p in Path(directory).iterdir() if p.suffix == SUFFIX and not p.name.startswith("."))
    except OSError:
        return []


def remove_record(path: Path) -> None:
    """Delete a pid file; one already gone is fine."""
    with contextlib.suppress(FileNotFoundError):
        Path(path).unlink()
