"""The Ray actor that owns one server process on its node (``engine.hosting=ray``).

:class:`ServerHost` runs on the node the planner chose and does there what the harness does on its own host:
it starts the server as a :class:`~systems.launch.processes.ManagedProcess` (own process group, under the
launch supervisor, whose parent is this actor: if the actor dies, with its node or with the harness, the
supervisor takes the server down), watches it, stops it, and serves its files back (the log, the logs the
harness reads facts from). Every path it is given must lie under its ``root``, a folder of its own on the
node, removed by :meth:`ServerHost.cleanup` (or, when its actor died without cleaning up, by the next actor
started on that node: :func:`remove_orphaned_folders`). It imports nothing from Ray itself but ``ray.get_gpu_ids`` /
``ray.get_runtime_context`` (so this module can be imported, and tested, without a cluster).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from systems.launch import procfs
from systems.launch.ports import LOOPBACK, ensure_port_free, free_port
from systems.launch.processes import ManagedProcess

logger = logging.getLogger(__name__)

READ_LIMIT = 8 << 20  # bytes returned per read call
OWNER_FILE = ".owner"  # in each server's folder: "<actor pid> <its start time>"


def remove_orphaned_folders(base: Path) -> list[Path]:
    """Remove the server folders under ``base/<deployment>/<server>/`` whose actor is gone without cleaning up
    (its harness was killed, or Ray ended it), and deployment folders left empty; returns what was removed."""
    removed = []
    for folder in sorted(Path(base).glob(f"*/*/{OWNER_FILE}")):
        try:
            pid_text, started = folder.read_text().split()
            alive = procfs.is_running(int(pid_text), None if started == "None" else int(started))
        except (OSError, ValueError):
            continue
        if not alive:
            shutil.rmtree(folder.parent, ignore_errors=True)
            removed.append(folder.parent)
            with contextlib.suppress(OSError):
                folder.parent.parent.rmdir()
    return removed


class ServerHost:
    """One server's process on this node, and the files under ``root``."""

    def __init__(self, name: str, root: str, grace_s: float = 10.0) -> None:
        self.name = name
        self.root = Path(root)
        remove_orphaned_folders(self.root.parent.parent)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / OWNER_FILE).write_text(f"{os.getpid()} {procfs.start_time(os.getpid())}")
        self.process = ManagedProcess(name, grace_s=grace_s)
        self._ports: set[int] = set()

    def _inside(self, path: str | Path) -> Path:
        resolved = Path(path).resolve()
        if not resolved.is_relative_to(self.root.resolve()):
            raise ValueError(f"{self.name}: {path} is outside this server's folder {self.root}")
        return resolved

    def node(self) -> dict[str, Any]:
        """Where this actor runs: the Ray node id, the host name, its pid and the GPUs Ray gave it."""
        node_id, gpus = "", []
        try:
            import ray
        except ImportError:
            ray = None  # type: ignore[assignment]
        if ray is not None and ray.is_initialized():  # not inside Ray (tests): asking would start a local Ray
            node_id = ray.get_runtime_context().get_node_id()
            gpus = [str(g) for g in ray.get_gpu_ids()]
        return {"node_id": node_id, "hostname": socket.gethostname(), "actor_pid": os.getpid(), "gpu_ids": gpus,
                "root": str(self.root)}

    def free_port(self, host: str = LOOPBACK) -> int:
        """A port free on this node (bindable at ``host``), not handed out by this actor before."""
        while (port := free_port()) in self._ports:
            pass
        self._ports.add(port)
        if host != LOOPBACK:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # also free at the node's address
                sock.bind((host, port))
        return port

    def make_dirs(self, paths: Sequence[str]) -> None:
        self.process.make_dirs([self._inside(p) for p in paths])

    def write_file(self, path: str, data: bytes) -> None:
        target = self._inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def ensure_port_free(self, port: int) -> None:
        ensure_port_free(port)

    def start(self, cmd: Sequence[str], extra_env: dict[str, str], log_path: str, cwd: Optional[str]) -> int:
        """Start the server (the node's environment through the allow-list, plus ``extra_env``); its pid."""
        env = dict(extra_env)
        gpus = self.node()["gpu_ids"]
        if gpus and "CUDA_VISIBLE_DEVICES" not in env:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)  # the GPUs Ray reserved for this server
        log = self._inside(log_path)
        log.parent.mkdir(parents=True, exist_ok=True)
        workdir = self._inside(cwd) if cwd else None
        if workdir is not None:
            workdir.mkdir(parents=True, exist_ok=True)
        self.process.start(list(cmd), log_path=log, cwd=workdir, extra_env=env)
        return self.process.pid

    def status(self) -> tuple[bool, Optional[int]]:
        """(running, exit code)."""
        return self.process.alive(), self.process.returncode

    def read(self, path: str, offset: int) -> bytes:
        """Up to :data:`READ_LIMIT` bytes of ``path`` from ``offset`` (b"" when it does not exist)."""
        target = self._inside(path)
        try:
            with open(target, "rb") as f:
                f.seek(offset)
                return f.read(READ_LIMIT)
        except FileNotFoundError:
            return b""

    def size(self, path: str) -> int:
        try:
            return self._inside(path).stat().st_size
        except FileNotFoundError:
            return 0

    def group_pids(self) -> list[int]:
        return self.process.group_pids()

    def processes(self) -> list[dict[str, Any]]:
        """The server's process group on this node: pid and command line (cut to 160 characters) of each."""
        listed = []
        for pid in self.process.group_pids():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            listed.append({"pid": pid, "cmd": cmd[:160]})
        return listed

    def note_shm_files(self) -> None:
        self.process.note_shm_files()

    def pin_threads(self, cores: str) -> int:
        return self.process.pin_threads(cores)

    def set_nice(self, nice: int) -> bool:
        return self.process.set_nice(nice)

    def stop(self, grace_s: float = 10.0) -> Optional[int]:
        return self.process.stop(grace_s)

    def cleanup(self) -> None:
        """Stop the server if it still runs, then remove this server's folder on the node."""
        self.process.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(OSError):  # the deployment's folder on this node, once its last server is gone
            self.root.parent.rmdir()
