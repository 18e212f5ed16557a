"""A minimal OpenAI-compatible streaming completion server with injected delays, for tests and benchmarks.

``POST /v1/completions`` answers after ``ttft_ms`` with the first token, then one token every ``itl_ms``
(each token its own SSE event and HTTP chunk), exactly ``max_tokens`` tokens, ``finish_reason`` "length"
on the last one, a usage chunk when ``stream_options.include_usage`` is set, and ``data: [DONE]``. Token
times are absolute (request receipt + ttft + k * itl), so delays do not drift. It can instead answer with
an error status, drop the connection mid-stream, send keep-alive comments and use CRLF line endings; a
request may override these with a ``"mock": {...}`` object in its body (keys as in ``MockConfig``).
``GET /health`` and ``GET /v1/models`` answer 200. Raw asyncio protocol (uvloop when installed).

    python -m harness.loadgen.mock_server --port P --ttft-ms X --itl-ms Y [--spin-us 1500] [--cpu 0]

binds 127.0.0.1 and prints ``listening on http://127.0.0.1:PORT`` once ready. ``--spin-us`` makes token
times precise to a few microseconds by busy-yielding before each (use it on a dedicated core only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from time import perf_counter
from typing import Any, Optional

from harness.loadgen.clock import PreciseScheduler

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}


@dataclass(frozen=True)
class MockConfig:
    """Behaviour of the mock server (per request, fields can be overridden by the body's ``mock`` object)."""

    ttft_ms: float = 10.0
    itl_ms: float = 5.0
    status: int = 200  # answer completions with this status instead (e.g. 429, 500)
    drop_after: int = -1  # close the connection after this many tokens (-1: never)
    ping: bool = False  # send a ": ping" comment before every token
    crlf: bool = False  # end SSE lines with \r\n
    instance: str = "mock-0"  # x-instance response header ("" to omit)
    cached_tokens: int = -1  # usage.prompt_tokens_details.cached_tokens (-1: omit the details)
    close_after_response: bool = False  # close the connection after each response, without saying so
    spin_us: float = 0.0  # precise token times: busy-yield this long before each (0: loop timers only)


def _override(config: MockConfig, body: dict[str, Any]) -> MockConfig:
    extra = body.get("mock")
    if not isinstance(extra, dict):
        return config
    names = {f.name for f in fields(MockConfig)} - {"spin_us"}
    return replace(config, **{k: v for k, v in extra.items() if k in names})


def _response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Stream:
    """One streamed completion being emitted on a connection."""

    __slots__ = ("conn", "cfg", "n", "k", "t_first", "itl", "token", "last", "tail", "ping")

    def __init__(self, conn: _ServerConnection, cfg: MockConfig, n: int, t_recv: float, tokens: tuple[bytes, bytes, bytes]) -> None:
        self.conn = conn
        self.cfg = cfg
        self.n = n
        self.k = 0
        self.t_first = t_recv + cfg.ttft_ms / 1e3
        self.itl = cfg.itl_ms / 1e3
        self.token, self.last, self.tail = tokens
        self.ping = _chunk(b": ping\r\n\r\n" if cfg.crlf else b": ping\n\n") if cfg.ping else b""


class _ServerConnection(asyncio.Protocol):
    def __init__(self, server: MockServer) -> None:
        self._server = server
        self._transport: Optional[asyncio.Transport] = None
        self._buf = b""
        self._busy = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        t = perf_counter()
        self._buf += data
        if len(self._buf) > MAX_REQUEST_BYTES:
            self.abort()
            return
        if not self._busy:
            self._process(t)

    def write(self, data: bytes) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(data)

    def abort(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def _process(self, t: float) -> None:
        while not self._busy and not self.closed:
            buf = self._buf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = buf[:end].decode("latin-1").split("\r\n")
            try:
                method, path, _ = lines[0].split(" ", 2)
            except ValueError:
                self._reply(400, {"error": {"message": "bad request line"}}, close=True)
                return
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            try:
                length = int(headers.get("content-length", "0") or 0)
            except ValueError:
                self._reply(400, {"error": {"message": "bad content-length"}}, close=True)
                return
            if len(buf) < end + 4 + length:
                return
            body = buf[end + 4 : end + 4 + length]
            self._buf = buf[end + 4 + length :]
            self._handle(method, path.split("?", 1)[0], body, t)

    def _reply(self, status: int, obj: Any, close: bool = False) -> None:
        body = json.dumps(obj).encode()
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        if close:
            headers.append(("connection", "close"))
        self.write(_response_head(status, headers) + body)
        if close:
            self.abort()

    def _handle(self, method: str, path: str, body: bytes, t: float) -> None:
        server = self._server
        if method == "GET" and path in ("/health", "/v1/models"):
            self._reply(200, {"object": "list", "data": [{"id": "mock", "object": "model"}]})
            return
        if method != "POST" or path != "/v1/completions":
            self._reply(404, {"error": {"message": f"no route {method} {path}"}})
            return
        try:
            req = json.loads(body)
            n_tokens = int(req.get("max_tokens", 16))
        except (ValueError, TypeError, AttributeError):
            self._reply(400, {"error": {"message": "body is not a completion request"}})
            return
        cfg = _override(server.config, req)
        server.n_requests += 1
        if cfg.status != 200:
            message = "mock: too many requests" if cfg.status == 429 else f"mock: injected status {cfg.status}"
            self._reply(cfg.status, {"object": "error", "message": message, "code": cfg.status})
            return
        prompt = req.get("prompt", [])
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        rid = server.n_requests
        model = str(req.get("model", "mock"))
        if not req.get("stream", False):
            self._busy = True
            server.stream_started()
            delay = cfg.ttft_ms / 1e3 + max(n_tokens - 1, 0) * cfg.itl_ms / 1e3
            server.scheduler.call_at(t + delay, self._reply_whole, rid, model, n_tokens, n_prompt, cfg)
            return
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        tokens = server.token_events(rid, model, n_tokens, n_prompt, cfg, include_usage)
        headers = [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")]
        if cfg.instance:
            headers.append(("x-instance", cfg.instance))
        stream = _Stream(self, cfg, n_tokens, t, tokens)
        self._busy = True
        server.stream_started()
        self.write(_response_head(200, headers) + stream.ping)
        if n_tokens <= 0:
            server.stream_ended()
            self._end_stream(stream.tail, cfg)
            return
        server.scheduler.call_at(stream.t_first, self._emit, stream)

    def _emit(self, stream: _Stream) -> None:
        if self.closed:
            self._server.stream_ended()
            return
        stream.k += 1
        last = stream.k >= stream.n
        if last:
            self.write(stream.ping + stream.last + stream.tail)
        else:
            self.write(stream.ping + stream.token)
        if stream.k == stream.cfg.drop_after:
            self._server.stream_ended()
            self.abort()
            return
        if last:
            self._server.stream_ended()
            self._end_stream(b"", stream.cfg)
            return
        self._server.scheduler.call_at(stream.t_first + stream.k * stream.itl, self._emit, stream)

    def _end_stream(self, tail: bytes, cfg: MockConfig) -> None:
        if tail:
            self.write(tail)
        if cfg.close_after_response:
            self.abort()
            return
        self._busy = False
        if self._buf:
            self._process(perf_counter())

    def _reply_whole(self, rid: int, model: str, n_tokens: int, n_prompt: int, cfg: MockConfig) -> None:
        self._busy = False
        self._server.stream_ended()
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_tokens, "total_tokens": n_prompt + n_tokens}
        choice = {"index": 0, "text": " tok" * n_tokens, "finish_reason": "length"}
        self._reply(200, {"id": f"cmpl-{rid}", "object": "text_completion", "model": model,
                          "choices": [choice], "usage": usage})
        if self._buf:
            self._process(perf_counter())


class MockServer:
    """The server on the running loop: ``await start()`` (returns the port), ``await stop()``."""

    def __init__(self, config: Optional[MockConfig] = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config or MockConfig()
        self.host = host
        self.port = port
        self.n_requests = 0
        self.active = 0  # completions being answered now
        self.max_active = 0
        self.scheduler = PreciseScheduler(self.config.spin_us / 1e6)
        self._server: Optional[asyncio.AbstractServer] = None
        self._created = int(time.time())

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self.scheduler.start()
        self._server = await loop.create_server(
            lambda: _ServerConnection(self), self.host, self.port, reuse_address=True, backlog=4096
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        await self.scheduler.stop()

    def stream_started(self) -> None:
        self.active += 1
        self.max_active = max(self.max_active, self.active)

    def stream_ended(self) -> None:
        self.active -= 1

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def token_events(
        self, rid: int, model: str, n: int, n_prompt: int, cfg: MockConfig, include_usage: bool
    ) -> tuple[bytes, bytes, bytes]:
        """Chunk-framed bytes of a middle token, the last token, and the tail (usage, [DONE], end)."""
        sep = "\r\n\r\n" if cfg.crlf else "\n\n"
        head = f'{{"id":"cmpl-{rid}","object":"text_completion","created":{self._created},"model":{json.dumps(model)},'
        def event(reason: str) -> bytes:
            choice = f'{{"index":0,"text":" tok","logprobs":null,"finish_reason":{reason},"stop_reason":null}}'
            return _chunk(f'data: {head}"choices":[{choice}],"usage":null}}{sep}'.encode())
        tail = b""
        if include_usage:
            usage: dict[str, Any] = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n, "completion_tokens": n}
            if cfg.cached_tokens >= 0:
                usage["prompt_tokens_details"] = {"cached_tokens": cfg.cached_tokens}
            tail += _chunk(f'data: {head}"choices":[],"usage":{json.dumps(usage)}}}{sep}'.encode())
        tail += _chunk(f"data: [DONE]{sep}".encode()) + b"0\r\n\r\n"
        return event("null"), event('"length"'), tail


@contextlib.contextmanager
def mock_server_thread(config: Optional[MockConfig] = None) -> Iterator[MockServer]:
    """Run a ``MockServer`` on 127.0.0.1 (free port) in a background thread; stopped on exit."""
    server = MockServer(config)
    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def main() -> None:
        holder["loop"] = asyncio.get_running_loop()
        holder["stop"] = asyncio.Event()
        try:
            await server.start()
        except BaseException as exc:
            holder["error"] = exc
            ready.set()
            return
        ready.set()
        await holder["stop"].wait()
        await server.stop()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="mock-server", daemon=True)
    thread.start()
    ready.wait(30)
    try:
        if "error" in holder:
            raise holder["error"]
        if not ready.is_set():
            raise TimeoutError("mock server did not start")
        yield server
    finally:
        if "loop" in holder and "stop" in holder:
            holder["loop"].call_soon_threadsafe(holder["stop"].set)
        thread.join(10)


def _parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--ttft-ms", type=float, default=10.0)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--status", type=int, default=200)
    p.add_argument("--drop-after", type=int, default=-1)
    p.add_argument("--ping", action="store_true")
    p.add_argument("--crlf", action="store_true")
    p.add_argument("--instance", default="mock-0")
    p.add_argument("--cached-tokens", type=int, default=-1)
    p.add_argument("--close-after-response", action="store_true")
    p.add_argument("--spin-us", type=float, default=0.0)
    p.add_argument("--cpu", type=int, default=None, help="pin the server to this CPU")
    p.add_argument("--no-uvloop", action="store_true")
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> None:
    args = _parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("the mock server binds loopback only")
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    config = MockConfig(
        ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, status=args.status, drop_after=args.drop_after,
        ping=args.ping, crlf=args.crlf, instance=args.instance, cached_tokens=args.cached_tokens,
        close_after_response=args.close_after_response, spin_us=args.spin_us,
    )

    async def serve() -> None:
        server = MockServer(config, args.host, args.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await server.start()
        print(f"listening on {server.base_url}", flush=True)
        await stop.wait()
        await server.stop()

    factory = None
    if not args.no_uvloop:
        from harness.loadgen.loops import loop_factory

        factory = loop_factory()
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve())


if __name__ == "__main__":
    main()
