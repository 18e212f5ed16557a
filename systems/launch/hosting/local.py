"""``engine.hosting=local``: every server on this host, bound to 127.0.0.1 (the default).

Hosts are loopback, ports come from :func:`systems.launch.ports.free_port`, files are written where the
deployment names them and nothing needs copying back.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from systems.launch.ports import LOOPBACK, free_port
from systems.launch.processes import ManagedProcess


class LocalHosting:
    """Every server on this host."""

    kind = "local"

    def __init__(self) -> None:
        self._ports: set[int] = set()
        self._servers: dict[str, str] = {}

    def place(self, servers: Sequence[tuple[str, str, int]]) -> None:
        self._servers.update({name: role for name, role, _ in servers})

    def host(self, name: str) -> str:
        return LOOPBACK

    def port(self, name: str) -> int:
        while (port := free_port()) in self._ports:  # the kernel may offer one port twice
            pass
        self._ports.add(port)
        return port

    def node_dir(self, name: str, local_dir: Path) -> Path:
        return Path(local_dir)

    def put_file(self, name: str, path: Path, data: bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)

    def process(self, name: str, mirror_to: Optional[Path] = None) -> ManagedProcess:
        return ManagedProcess(name)

    def mirror(self, name: str, node_path: Path, local_path: Path, whole: bool = False) -> None:
        if Path(node_path).resolve() != Path(local_path).resolve():
            raise ValueError(f"{name}: local hosting keeps files where they are ({node_path} vs {local_path})")

    def sync(self) -> None:
        return None

    def processes(self) -> dict[str, list[dict[str, Any]]]:
        return {}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "servers": {name: {"role": role, "host": LOOPBACK}
                                               for name, role in self._servers.items()}}

    def close(self) -> None:
        return None
