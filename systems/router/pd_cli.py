"""Command line of the disaggregating router: ``python -m systems.router disaggregated --config router.json --port P``.

``router.json`` is a :class:`systems.router.pd_app.RouterConfig` as JSON (the deployment writes it into the
run folder). Listens on the ``--host`` address (127.0.0.1 by default; a real deployment gives the address
of the node it runs on) for HTTP, and binds its KV-cache-events SUB socket (``kv_events_port``) and names
its Mooncake pool client after that address too. Exits 0 on SIGTERM/SIGINT and writes its final counters
to ``--stats-out`` when given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from aiohttp import web

from systems.launch.ports import check_host
from systems.launch.processes import stop_event_on_signals
from systems.router.kv_events import KVEventIndex
from systems.router.pd_app import HOST, PDRouter, RouterConfig, create_app
from systems.router.pool_index import PoolIndex, VllmBlockHasher

logger = logging.getLogger("systems.router.pd")


async def _serve(cfg: RouterConfig, port: int, stats_out: Optional[Path], host: str = HOST) -> None:
    pool = None
    if cfg.pool_master:
        pool = PoolIndex(cfg.pool_master, cfg.pool_key_prefix, cfg.block_size, cfg.pool_protocol,
                         local_hostname=host)
    events, hasher = None, None
    if cfg.kv_events_port and cfg.local_cache:
        events = KVEventIndex([p.name for p in cfg.prefill], cfg.event_index_capacity())
        events.start(cfg.kv_events_port, host=host)
        hasher = pool.hasher if pool is not None else VllmBlockHasher(cfg.block_size)
    router = PDRouter(cfg, pool, events, hasher)
    runner = web.AppRunner(create_app(router), access_log=None, handler_cancellation=True, shutdown_timeout=2.0)
    await runner.setup()
    stop = stop_event_on_signals()
    try:
        await web.TCPSite(runner, host, port, backlog=1024).start()
        logger.info("disaggregating router on http://%s:%d: %d prefill, %d decode, %d mixed; policy %s; pool %s",
                    host, port, len(cfg.prefill), len(cfg.decode), len(cfg.mixed), cfg.policy,
                    cfg.pool_master or "none")
        await stop.wait()
    finally:
        if stats_out is not None:
            stats_out.write_text(json.dumps(router.stats(), indent=2))
        await runner.cleanup()
        if events is not None:
            events.stop()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systems.router disaggregated", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--host", default=HOST,
                        help=f"address to listen on (HTTP and KV-cache events): the node's own (default {HOST})")
    parser.add_argument("--port", type=int, required=True, help="HTTP port on the --host address")
    parser.add_argument("--stats-out", type=Path, default=None)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    try:
        check_host(args.host, "--host")
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = RouterConfig.from_json(json.loads(args.config.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        parser.error(f"--config {args.config}: {exc}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(cfg, args.port, args.stats_out, args.host))
    return 0
