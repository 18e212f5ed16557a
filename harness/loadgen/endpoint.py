"""Resolve a base URL once, before the run: socket address, TLS context, Host header and request path."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Endpoint:
    address: tuple[Any, ...]
    family: int
    ssl_context: Optional[ssl.SSLContext]
    host_header: str
    hostname: str
    path: str  # e.g. "/v1/completions"


def resolve_endpoint(base_url: str, route: str = "/v1/completions") -> Endpoint:
    """Parse ``base_url`` (http or https) and resolve its host, preferring IPv4."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be http://host[:port][/prefix] or https://..., got {base_url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"cannot resolve {parts.hostname!r}")
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, _, _, _, address = infos[0]
    ctx = ssl.create_default_context() if parts.scheme == "https" else None
    default_port = port == (443 if parts.scheme == "https" else 80)
    host_header = parts.hostname if default_port else f"{parts.hostname}:{port}"
    if ":" in parts.hostname and not default_port:
        host_header = f"[{parts.hostname}]:{port}"
    return Endpoint(
        address=address,
        family=family,
        ssl_context=ctx,
        host_header=host_header,
        hostname=parts.hostname,
        path=parts.path.rstrip("/") + route,
    )
