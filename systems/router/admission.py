"""Bounded admission and upstream timeouts shared by both routers (the overload policy).

A router admits at most ``max_pending`` requests at once: in flight at a backend plus waiting for an
upstream connection. The next one is answered at once with ``429`` and a JSON error of type
``overloaded`` (and ``Retry-After: 1``) before its body is read, so memory and sockets stay bounded
however fast clients send. ``max_pending = 0`` turns the bound off (the routers' former behaviour).

Upstream requests carry a connect timeout and a *total* timeout (from sending the request to the last
byte of the answer). A total timeout before the backend answered gives ``504`` with a JSON error of type
``upstream_timeout`` naming the backend and the limit; after a streamed answer began, the status is
already sent, so the router cuts the client connection (a truncated response, as for a broken stream).

Defaults (documented in docs/reliability.md, "Overload"): :data:`DEFAULT_MAX_PENDING` requests, a
:data:`DEFAULT_CONNECT_TIMEOUT_S` s connect timeout and a :data:`DEFAULT_UPSTREAM_TIMEOUT_S` s total
timeout, longer than the load generator's default ``request_timeout_s`` (600 s) so that in the suite's
benchmarks the client's own limit always fires first.
"""

from __future__ import annotations

from typing import Optional

import aiohttp
from aiohttp import web

__all__ = ["DEFAULT_CONNECT_TIMEOUT_S", "DEFAULT_MAX_PENDING", "DEFAULT_UPSTREAM_TIMEOUT_S", "Admission",
           "client_timeout", "overloaded_response", "timeout_message"]

DEFAULT_MAX_PENDING = 4096  # as many as the routers' former connection pool held
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_UPSTREAM_TIMEOUT_S = 900.0


class Admission:
    """Counts the requests a router holds and refuses the one beyond ``max_pending`` (0: no bound)."""

    def __init__(self, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_pending < 0:
            raise ValueError(f"max_pending must be >= 0 (0: no bound), got {max_pending}")
        self.max_pending = max_pending
        self.pending = 0
        self.peak = 0
        self.rejected = 0

    def try_enter(self) -> bool:
        """Admit one request (True) or count a rejection (False)."""
        if self.max_pending and self.pending >= self.max_pending:
            self.rejected += 1
            return False
        self.pending += 1
        self.peak = max(self.peak, self.pending)
        return True

    def leave(self) -> None:
        """An admitted request ended (however it ended)."""
        self.pending -= 1

    def stats(self) -> dict[str, int]:
        return {"max_pending": self.max_pending, "pending": self.pending, "peak_pending": self.peak,
                "rejected_overload": self.rejected}


def overloaded_response(admission: Admission) -> web.Response:
    """The ``429`` answer to a request beyond the bound."""
    error = {"message": f"router overloaded: {admission.pending} requests pending, the bound is "
                        f"{admission.max_pending} (max_pending); retry later",
             "type": "overloaded", "code": 429}
    return web.json_response({"error": error}, status=429, headers={"Retry-After": "1"})


def client_timeout(connect_timeout_s: float, upstream_timeout_s: Optional[float]) -> aiohttp.ClientTimeout:
    """The upstream session's timeouts (``upstream_timeout_s`` None or 0: no total limit)."""
    if connect_timeout_s <= 0:
        raise ValueError(f"connect_timeout_s must be positive, got {connect_timeout_s}")
    if upstream_timeout_s is not None and upstream_timeout_s < 0:
        raise ValueError(f"upstream_timeout_s must be >= 0 (0: none), got {upstream_timeout_s}")
    return aiohttp.ClientTimeout(total=upstream_timeout_s or None, sock_connect=connect_timeout_s)


def timeout_message(timeout: aiohttp.ClientTimeout, exc: BaseException) -> str:
    """Which limit a ``TimeoutError`` from an upstream request ran into."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return f"no connection within the connect timeout ({timeout.sock_connect:g} s)"
    if timeout.total:
        return f"no complete answer within the total upstream timeout ({timeout.total:g} s)"
    return f"timed out ({type(exc).__name__})"
