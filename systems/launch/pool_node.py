"""A Mooncake Store pool node: a process that contributes DRAM to the cluster-wide KV pool and nothing else.

It joins ``mooncake_master`` as a store client and mounts a segment of ``--segment-size`` bytes, which
the master then hands out for the KV blocks prefill instances put. It holds no KV cache of its own and
serves reads from its segment through the Mooncake transfer engine (TCP on CPU hosts), which names
itself by the ``--host`` address (127.0.0.1 by default; a real deployment gives the address of the node
it runs on). A tiny HTTP endpoint on the same address answers ``GET /health`` while the segment is
mounted, so the harness knows when the node is ready; SIGTERM/SIGINT unmount it and exit 0.

CLI: ``python -m systems.launch.pool_node --master 127.0.0.1:50051 --segment-size 256MB [--host H] --port P``.
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

from systems.launch.mooncake_store import MIN_SEGMENT_BYTES, P2P_HANDSHAKE, parse_size
from systems.launch.ports import LOOPBACK, check_host
from systems.launch.processes import stop_event_on_signals

logger = logging.getLogger("systems.launch.pool_node")

HOST = LOOPBACK  # the default --host


def mount_segment(master: str, segment_bytes: int, protocol: str = "tcp", local_buffer_bytes: int = 16 << 20,
                  local_hostname: str = HOST) -> Any:
    """A ``MooncakeDistributedStore`` client that contributes ``segment_bytes`` to the pool at ``master``; its
    transfer engine names itself ``local_hostname`` (this node's address)."""
    from mooncake.store import MooncakeDistributedStore

    check_host(local_hostname, "pool node local_hostname")
    store = MooncakeDistributedStore()
    rc = store.setup(local_hostname, P2P_HANDSHAKE, segment_bytes, local_buffer_bytes, protocol, "", master)
    if rc != 0:
        raise RuntimeError(f"could not join mooncake_master at {master} (setup returned {rc})")
    return store


async def _serve(args: argparse.Namespace) -> None:
    store = mount_segment(args.master, parse_size(args.segment_size), args.protocol, local_hostname=args.host)
    app = web.Application()

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "segment_bytes": parse_size(args.segment_size)})

    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stop = stop_event_on_signals()
    try:
        await web.TCPSite(runner, args.host, args.port).start()
        logger.info("pool node: %s segment mounted at master %s; health on http://%s:%d/health",
                    args.segment_size, args.master, args.host, args.port)
        await stop.wait()
    finally:
        await runner.cleanup()
        with contextlib.suppress(Exception):
            store.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Mount a pool segment until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m systems.launch.pool_node", description=__doc__.splitlines()[0])
    parser.add_argument("--master", required=True, help="mooncake_master RPC address, e.g. 127.0.0.1:50051")
    parser.add_argument("--segment-size", default="256MB", help="DRAM contributed to the pool")
    parser.add_argument("--protocol", default="tcp", help="transfer-engine protocol (tcp on CPU hosts, rdma on GPU hosts)")
    parser.add_argument("--host", default=HOST,
                        help=f"this node's address: the health endpoint and the transfer engine (default {HOST})")
    parser.add_argument("--port", type=int, required=True, help="health endpoint port on the --host address")
    args = parser.parse_args(argv)
    try:
        check_host(args.host, "--host")
    except ValueError as exc:
        parser.error(str(exc))
    try:
        size = parse_size(args.segment_size)
    except ValueError as exc:
        parser.error(f"--segment-size: {exc}")
    if size < MIN_SEGMENT_BYTES:
        parser.error(f"--segment-size: Mooncake needs at least 16MB per segment, got {args.segment_size}")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
