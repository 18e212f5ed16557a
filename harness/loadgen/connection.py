"""A minimal HTTP/1.1 keep-alive client on asyncio protocols: one connection per in-flight request, a pool
of idle ones, no pipelining. Every read is timestamped with ``perf_counter()`` before it is parsed.

The connection hands the response to an ``Exchange`` (see ``exchange.py``) through four callbacks:
``on_head(status, headers)``, ``on_body(data, t)``, ``on_end(t)`` and ``on_fail(reason, t, retryable)``;
``retryable`` is true when a reused connection died before any byte of the response came back (the
server closed an idle keep-alive connection as the request went out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import ssl
from collections.abc import Callable
from time import perf_counter
from typing import Any, Optional, Protocol

from harness.loadgen.http1 import HTTPProtocolError, ResponseParser

log = logging.getLogger(__name__)


class ResponseHandler(Protocol):
    def on_head(self, status: int, headers: dict[str, str]) -> None: ...
    def on_body(self, data: bytes, t: float) -> None: ...
    def on_end(self, t: float) -> None: ...
    def on_fail(self, reason: str, t: float, retryable: bool) -> None: ...


class HTTPConnection(asyncio.Protocol):
    """One TCP connection; ``send`` writes a whole request and returns the time it was written."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self.transport: Optional[asyncio.Transport] = None
        self._parser = ResponseParser()
        self._handler: Optional[ResponseHandler] = None
        self._received = 0
        self.n_sent = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, payload: bytes, handler: ResponseHandler) -> float:
        self._handler = handler
        self._parser.reset()
        self._received = 0
        self.n_sent += 1
        self.transport.write(payload)  # type: ignore[union-attr]
        return perf_counter()

    def detach(self) -> None:
        """Forget the current request and drop the connection (the request was cut or timed out)."""
        self._handler = None
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        t = perf_counter()
        handler = self._handler
        if handler is None:
            log.debug("unexpected %d bytes on an idle connection; closing it", len(data))
            self.abort()
            return
        self._received += len(data)
        parser = self._parser
        had_head = parser.head_complete
        try:
            pieces = parser.feed(data)
        except HTTPProtocolError as exc:
            self._handler = None
            self.abort()
            handler.on_fail(f"bad HTTP response: {exc}", t, False)
            return
        if not had_head and parser.head_complete:
            handler.on_head(parser.status, parser.headers)
        for piece in pieces:
            handler.on_body(piece, t)
        if parser.complete:
            self._handler = None
            if parser.keep_alive and not self.closed:
                self._pool.release(self)
            else:
                self.abort()
            handler.on_end(t)
        pool = self._pool
        if pool.on_due is not None and perf_counter() >= pool.next_due:
            pool.on_due()

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True
        self._pool.forget(self)
        handler = self._handler
        if handler is None:
            return
        self._handler = None
        t = perf_counter()
        if self._parser.reads_until_close:
            handler.on_end(t)
            return
        why = f": {exc}" if exc else ""
        reason = f"connection closed by the server after {self._received} response bytes{why}"
        handler.on_fail(reason, t, self._received == 0 and self.n_sent > 1)


class ConnectionPool:
    """Idle keep-alive connections to one address (already resolved: no DNS during the run).

    ``acquire_idle`` is synchronous (the fast path); ``open`` makes a new connection. After an acquire that
    empties the pool, ``ensure_spare`` opens one more in the background so the next request finds one.
    ``on_due``, when set, is called after a read once ``perf_counter()`` has passed ``next_due``: the
    open-loop issuer uses it to send requests that came due while the loop was busy reading.
    """

    def __init__(
        self, address: tuple[Any, ...], family: int, ssl_context: Optional[ssl.SSLContext], server_hostname: str
    ) -> None:
        self._address = address
        self._family = family
        self._ssl = ssl_context
        self._server_hostname = server_hostname if ssl_context is not None else None
        self._idle: list[HTTPConnection] = []
        self._all: set[HTTPConnection] = set()
        self._spare_tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.n_opened = 0
        self.on_due: Optional[Callable[[], Any]] = None
        self.next_due = math.inf

    @property
    def n_idle(self) -> int:
        return len(self._idle)

    def acquire_idle(self) -> Optional[HTTPConnection]:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def open(self) -> HTTPConnection:
        loop = asyncio.get_running_loop()
        sock = socket.socket(self._family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, self._address)
        except BaseException:
            sock.close()
            raise
        _, conn = await loop.create_connection(
            lambda: HTTPConnection(self), sock=sock, ssl=self._ssl, server_hostname=self._server_hostname
        )
        self.n_opened += 1
        if self._closed:
            conn.abort()
            raise ConnectionError("connection pool closed")
        self._all.add(conn)
        return conn

    def release(self, conn: HTTPConnection) -> None:
        if self._closed:
            conn.abort()
        else:
            self._idle.append(conn)

    def forget(self, conn: HTTPConnection) -> None:
        self._all.discard(conn)

    def ensure_spare(self, n: int = 1) -> None:
        """Open connections in the background until ``n`` are idle or being opened."""
        while len(self._idle) + len(self._spare_tasks) < n and not self._closed:
            task = asyncio.get_running_loop().create_task(self._open_spare())
            self._spare_tasks.add(task)
            task.add_done_callback(self._spare_tasks.discard)

    async def _open_spare(self) -> None:
        try:
            self.release(await self.open())
        except (OSError, ConnectionError) as exc:
            log.debug("spare connection failed: %s", exc)

    async def prewarm(self, n: int) -> None:
        """Open ``n`` idle connections now (before the run starts)."""
        conns = await asyncio.gather(*(self.open() for _ in range(n)), return_exceptions=True)
        for conn in conns:
            if isinstance(conn, HTTPConnection):
                self.release(conn)
            else:
                log.warning("pre-opening a connection failed: %s", conn)

    def close(self) -> None:
        self._closed = True
        for task in list(self._spare_tasks):
            task.cancel()
        for conn in list(self._all):
            conn.abort()
        self._idle.clear()
        self._all.clear()
