"""The harness's handle on a server that a Ray actor (:class:`~systems.launch.hosting.server_host.ServerHost`)
runs on another node: the interface of :class:`~systems.launch.processes.ManagedProcess`, over actor calls.

The server's log is written on its node and copied, complete lines at a time, into the job folder
(``mirror_to``) whenever the harness looks at the server (:meth:`RayServerProcess.sync_log`), and in full
when it stops. When the actor is gone (its node died, or Ray lost it), the handle says so: ``alive()`` is
False, :attr:`RayServerProcess.lost` holds why, and the log is what had been copied until then.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from systems.launch.child_env import split_inherited
from systems.launch.processes import LOG_TAIL_LINES, SURVIVOR_WAIT_S, tail_lines

logger = logging.getLogger(__name__)


class ServerLost(RuntimeError):
    """The actor that ran the server is gone."""


class RayServerProcess:
    """One server run by a ``ServerHost`` actor; ``mirror_to`` is where its log is copied in the job folder."""

    def __init__(self, name: str, actor: Any, mirror_to: Optional[Path], call_timeout_s: float = 60.0,
                 node: str = "") -> None:
        self.name = name
        self.node = node
        self.log_path: Optional[Path] = Path(mirror_to) if mirror_to is not None else None
        self.node_log_path: Optional[str] = None
        self.call_timeout_s = call_timeout_s
        self.lost: Optional[str] = None
        self._actor = actor
        self._pid: Optional[int] = None
        self._status: tuple[bool, Optional[int]] = (False, None)
        self._offset = 0

    # -- calls -------------------------------------------------------------------------------------------
    def _call(self, method: str, *args: Any, timeout_s: Optional[float] = None) -> Any:
        import ray
        from ray import exceptions

        if self.lost is not None:
            raise ServerLost(f"{self.name}: {self.lost}")
        try:
            return ray.get(getattr(self._actor, method).remote(*args), timeout=timeout_s or self.call_timeout_s)
        except (exceptions.RayActorError, exceptions.ActorUnavailableError) as exc:
            where = f" on node {self.node}" if self.node else ""
            self.lost = f"the Ray actor running it{where} is gone ({type(exc).__name__}; its node died or was removed)"
            logger.warning("%s: %s", self.name, self.lost)
            raise ServerLost(f"{self.name}: {self.lost}") from exc

    # -- ManagedProcess interface --------------------------------------------------------------------------
    def start(self, cmd: Sequence[str], env: Optional[dict[str, str]] = None, log_path: Optional[Path] = None,
              cwd: Optional[Path] = None, extra_env: Optional[dict[str, str]] = None) -> RayServerProcess:
        """Start ``cmd`` on the node. Of ``env``, only what differs from this process's environment is sent (the
        node's own environment is inherited there, through the same allow-list as locally)."""
        if self._pid is not None:
            raise RuntimeError(f"{self.name}: already started (pid {self._pid} on {self.node})")
        explicit = split_inherited(env, os.environ)[1] if env is not None else {}
        settings = {**explicit, **(extra_env or {})}
        self.node_log_path = str(log_path if log_path is not None else f"{self.name}.log")
        if self.log_path is None:
            raise ValueError(f"{self.name}: a server on another node needs a local path to copy its log to")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._pid = int(self._call("start", [str(c) for c in cmd], settings, self.node_log_path,
                                   str(cwd) if cwd is not None else None))
        self._status = (True, None)
        logger.info("%s: started pid %d on node %s, log copied to %s", self.name, self._pid, self.node, self.log_path)
        return self

    @property
    def pid(self) -> int:
        if self._pid is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._pid

    @property
    def returncode(self) -> Optional[int]:
        return self._status[1]

    def alive(self) -> bool:
        if self._pid is None or self.lost is not None:
            return False
        try:
            self._status = tuple(self._call("status"))  # type: ignore[assignment]
        except ServerLost:
            return False
        return self._status[0]

    def group_pids(self) -> list[int]:
        """The pids of the server's group, on its node."""
        try:
            return list(self._call("group_pids"))
        except ServerLost:
            return []

    def note_shm_files(self) -> None:
        with contextlib.suppress(ServerLost):
            self._call("note_shm_files")

    def make_dirs(self, paths: Sequence[Path]) -> None:
        self._call("make_dirs", [str(p) for p in paths])

    def ensure_port_free(self, port: int) -> None:
        self._call("ensure_port_free", port)

    def pin_threads(self, cores: str) -> int:
        return int(self._call("pin_threads", cores))

    def set_nice(self, nice: int) -> bool:
        return bool(self._call("set_nice", nice))

    def sync_log(self, final: bool = False) -> None:
        """Append what is new in the node's log to the local copy (only complete lines unless ``final``)."""
        if self.node_log_path is None or self.log_path is None or self.lost is not None:
            return
        while True:
            try:
                data: bytes = self._call("read", self.node_log_path, self._offset)
            except ServerLost:
                return
            if not final and b"\n" in data:
                data = data[:data.rindex(b"\n") + 1]
            elif not final:
                return
            if not data:
                return
            with open(self.log_path, "ab") as out:
                out.write(data)
            self._offset += len(data)

    def stop(self, grace_s: float = 10.0) -> Optional[int]:
        """Stop the server's group on its node (as :meth:`ManagedProcess.stop` does there), copy its log."""
        if self._pid is None:
            return None
        try:
            code = self._call("stop", grace_s, timeout_s=grace_s + SURVIVOR_WAIT_S + 30.0)
            self._status = (False, code)
        except ServerLost:
            code = None
        self.sync_log(final=True)
        return code

    def tail_log(self, n: int = LOG_TAIL_LINES) -> str:
        self.sync_log(final=True)
        return tail_lines(self.log_path, n)
