"""A tiny OpenAI-compatible streaming backend, for router tests and router benchmarks (no model inside).

``POST /v1/completions`` and ``/v1/chat/completions`` answer ``max_tokens`` chunks (default 3): SSE
``data:`` events ending with ``data: [DONE]`` when ``stream`` is true, one JSON body otherwise. Extra
body fields steer it (a real engine would ignore or reject them; the router forwards them untouched):

* ``fake_status``: answer this HTTP status with a JSON error instead;
* ``fake_break_after``: abort the connection after this many chunks;
* ``fake_hold``: after the first chunk, wait until :attr:`FakeBackend.release` is set;
* ``fake_delay_s``: sleep this long before every chunk;
* ``fake_stall``: answer nothing (not even the status line) until :attr:`FakeBackend.release` is set.

``GET /metrics`` answers vLLM's ``vllm:cache_config_info`` line when the backend was given
``kv_blocks=(num_gpu_blocks, block_size)``, and an empty page otherwise.

It keeps every request body it received, and counts requests started, completed and aborted (the client
went away). ``python -m systems.router.fake_backend --port P`` serves one on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from typing import Any, Optional

from aiohttp import web

__all__ = ["FakeBackend"]

logger = logging.getLogger(__name__)


class FakeBackend:
    """One fake server; :meth:`start` serves it on a loopback port, :meth:`stop` tears it down."""

    def __init__(self, name: str = "fake", kv_blocks: Optional[tuple[int, int]] = None) -> None:
        self.name = name
        self.kv_blocks = kv_blocks
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self.started = 0
        self.completed = 0
        self.aborted = 0
        self.release = asyncio.Event()
        self.url = ""
        self._runner: Optional[web.AppRunner] = None

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_post("/v1/chat/completions", self._generate)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self, port: int = 0) -> str:
        """Serve on ``127.0.0.1:port`` (0: a free port); returns the base URL."""
        self._runner = web.AppRunner(
            self.app(), handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.url

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "owned_by": self.name}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        text = ""
        if self.kv_blocks is not None:
            blocks, size = self.kv_blocks
            text = (f'vllm:cache_config_info{{block_size="{size}",engine="0",num_gpu_blocks="{blocks}"}} 1.0\n')
        return web.Response(text=text, content_type="text/plain")

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.bodies.append(raw)
        self.paths.append(request.path)
        self.started += 1
        body: dict[str, Any] = json.loads(raw)
        if body.get("fake_stall"):
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.aborted += 1
                raise
        if "fake_status" in body:
            self.completed += 1
            return web.json_response({"error": {"message": "fake failure"}}, status=int(body["fake_status"]))
        n = int(body.get("max_tokens", 3))
        delay = float(body.get("fake_delay_s", 0.0))
        break_after = body.get("fake_break_after")
        if not body.get("stream", False):
            text = "".join(f"t{i} " for i in range(n))
            self.completed += 1
            return web.json_response(
                {"object": "text_completion", "model": self.name, "choices": [{"text": text}]}
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i in range(n):
                if break_after is not None and i >= int(break_after):
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                if delay:
                    await asyncio.sleep(delay)
                event = {
                    "object": "text_completion",
                    "model": self.name,
                    "choices": [{"index": 0, "text": f"t{i} "}],
                }
                await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                if i == 0 and body.get("fake_hold"):
                    await self.release.wait()
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (asyncio.CancelledError, ConnectionError):
            self.aborted += 1
            raise
        self.completed += 1
        return resp


async def _serve(port: int) -> None:
    backend = FakeBackend()
    url = await backend.start(port)
    logger.info("fake backend on %s", url)
    try:
        await asyncio.Event().wait()
    finally:
        await backend.stop()


def main() -> None:
    """Serve a fake backend until interrupted."""
    parser = argparse.ArgumentParser(description="fake OpenAI-compatible streaming backend")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    try:
        import uvloop

        uvloop.run(_serve(args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
