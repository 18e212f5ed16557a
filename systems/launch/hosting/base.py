"""What a deployment asks of the layer that places its servers (``engine.hosting``).

A deployment names every server it will start, with its role, before starting any (:meth:`Hosting.place`);
then, per server, it asks for the address the server binds and clients dial (:meth:`Hosting.host`), free
ports on the server's node (:meth:`Hosting.port`), where the server's files live on that node
(:meth:`Hosting.node_dir`), and a process handle (:meth:`Hosting.process`) with the interface of
:class:`systems.launch.processes.ManagedProcess`. Files the servers read are written with
:meth:`Hosting.put_file`; files the harness reads back (logs, the router's request log, the KV transfer
logs) are registered with :meth:`Hosting.mirror` and copied into the job folder by :meth:`Hosting.sync`.
Addresses are never typed in: everything a deployment tells one server about another comes from here.

``local`` (:mod:`systems.launch.hosting.local`) is today's single-host behaviour; ``ray``
(:mod:`systems.launch.hosting.ray_hosting`) puts each server under a Ray actor on a node chosen by
:mod:`systems.launch.hosting.planner`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Protocol


class ServerProcess(Protocol):
    """The part of :class:`~systems.launch.processes.ManagedProcess` that deployments use."""

    name: str
    log_path: Optional[Path]

    def start(self, cmd: Sequence[str], env: Optional[dict[str, str]] = None, log_path: Optional[Path] = None,
              cwd: Optional[Path] = None, extra_env: Optional[dict[str, str]] = None) -> Any: ...

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> Optional[int]: ...

    def alive(self) -> bool: ...

    def stop(self, grace_s: float = 10.0) -> Optional[int]: ...

    def tail_log(self, n: int = 50) -> str: ...

    def note_shm_files(self) -> None: ...

    def make_dirs(self, paths: Sequence[Path]) -> None: ...

    def ensure_port_free(self, port: int) -> None: ...

    def pin_threads(self, cores: str) -> int: ...

    def set_nice(self, nice: int) -> bool: ...


class Hosting(Protocol):
    """Where a deployment's servers run, and how it reaches them."""

    kind: str

    def place(self, servers: Sequence[tuple[str, str, int]]) -> None:
        """Choose a node for every ``(name, role, gpus)`` before anything starts (``HostingError`` if not all fit)."""

    def host(self, name: str) -> str:
        """The address server ``name`` binds and is reached at."""

    def port(self, name: str) -> int:
        """A port free on server ``name``'s node, not handed out before by this hosting."""

    def node_dir(self, name: str, local_dir: Path) -> Path:
        """Where server ``name`` keeps the files the deployment would keep in ``local_dir`` on one host."""

    def put_file(self, name: str, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` (a :meth:`node_dir` path) on server ``name``'s node."""

    def process(self, name: str, mirror_to: Optional[Path] = None) -> ServerProcess:
        """A new, not yet started, process handle for server ``name``; its log is copied to ``mirror_to``."""

    def mirror(self, name: str, node_path: Path, local_path: Path, whole: bool = False) -> None:
        """Keep ``local_path`` up to date with ``node_path`` on server ``name``'s node: appended complete lines,
        or (``whole``) a copy of the whole file."""

    def sync(self) -> None:
        """Copy what is new in every mirrored file and log into the job folder."""

    def processes(self) -> dict[str, list[dict[str, Any]]]:
        """Per server placed elsewhere: its process group on its node (pid, command line)."""

    def describe(self) -> dict[str, Any]:
        """Which node each server runs on (written to ``<job>/servers/hosting.json``)."""

    def close(self) -> None:
        """Release what the hosting holds (after every process was stopped)."""
