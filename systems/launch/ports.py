"""Loopback ports: pick a free one, or fail clearly when a wanted one is taken."""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import random
import re
import socket
from pathlib import Path

from vocab.errors import UserError

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


_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def check_host(host: str, what: str) -> str:
    """``host`` when it is a literal IPv4/IPv6 address or a plausible host name (RFC 1123 labels, the last
    not all digits); else ``ValueError`` naming ``what`` (the option or field) and the value."""
    if isinstance(host, str) and host:
        try:
            ipaddress.ip_address(host)
            return host
        except ValueError:
            labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
            if (len(host) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)
                    and not labels[-1].isdigit()):
                return host
    raise ValueError(f"{what}: expected an IPv4/IPv6 address or a host name, got {host!r}")


LISTEN_PORTS_FROM = 20000  # servers get ports from here up to the kernel's ephemeral range
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_PROBES = 64


def ephemeral_start(path: Path = EPHEMERAL_RANGE) -> int:
    """The first port the kernel hands to outgoing connections (32768 on Linux by default)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    It is drawn from below the kernel's ephemeral range, so that the many outgoing connections a run
    makes (health probes, clients, the KV transfer engine) cannot take it in the seconds between this
    choice and the server's bind. Where that range is empty, the OS picks one (port 0).
    """
    low, high = LISTEN_PORTS_FROM, ephemeral_start()
    if high > low:
        draw = random.SystemRandom()
        for _ in range(_PROBES):
            port = draw.randrange(low, high)
            if port_is_free(port):
                return port
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
