"""Loopback ports: pick a free one, or fail clearly when a wanted one is taken."""

from __future__ import annotations

import errno
import logging
import os
import socket
from pathlib import Path

from harness.errors import UserError

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class PortInUseError(UserError, RuntimeError):
    """A port the suite wants to listen on is already taken."""

    def __init__(self, port: int, holder: str = "") -> None:
        self.port = port
        self.holder = holder
        who = f" (held by {holder})" if holder else ""
        super().__init__(f"port {port} on {LOOPBACK} is already in use{who}; "
                         f"stop that process or choose another port")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:``port`` now (SO_REUSEADDR, like servers use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def ensure_port_free(port: int) -> None:
    """Raise ``PortInUseError`` (naming the holder when it can be found cheaply) if ``port`` is taken."""
    if not port_is_free(port):
        raise PortInUseError(port, describe_port_holder(port))


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(inode)
    return inodes


def describe_port_holder(port: int) -> str:
    """'pid N (cmd)' of a process listening on ``port``, from /proc; '' when unknown (Linux only)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return ""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    proc = Path("/proc")
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                    return f"pid {entry.name} ({cmd[:120]})"
        except OSError:  # process gone or not ours to inspect
            continue
    return ""
