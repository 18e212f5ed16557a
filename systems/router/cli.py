"""Command line of the colocated router: ``python -m systems.router colocated --port P --backend NAME=URL ... --policy NAME``.

Listens on 127.0.0.1 only, logs to stderr, and exits with status 0 on SIGTERM or SIGINT after closing
its listener and backend connections. Uses uvloop when it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from typing import Any, Optional

from systems.launch.processes import stop_event_on_signals
from systems.policies import POLICY_NAMES, RoutingPolicy, build_policy, policy_parameters
from systems.router.app import DEFAULT_BLOCK_SIZE, create_app, start_router
from systems.router.state import parse_backend

__all__ = ["build_parser", "main", "policy_from_args"]

logger = logging.getLogger("systems.router")


def build_parser() -> argparse.ArgumentParser:
    """The router's argument parser."""
    p = argparse.ArgumentParser(prog="python -m systems.router colocated", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True, help="port on 127.0.0.1 (0: any free port)")
    p.add_argument(
        "--backend", action="append", required=True, metavar="NAME=URL", help="a backend; repeat for each"
    )
    p.add_argument("--policy", default="round_robin", choices=POLICY_NAMES)
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE, help="tokens per hashed block")
    p.add_argument(
        "--capacity-blocks", type=int, default=None, help="cache_aware: blocks remembered per backend"
    )
    p.add_argument("--max-imbalance", type=int, default=None, help="cache_aware: load guard, in requests")
    p.add_argument("--load-weight", type=float, default=None, help="cache_aware: blocks of match per request")
    p.add_argument("--seed", type=int, default=None, help="random: RNG seed")
    p.add_argument("--log-level", default="INFO")
    return p


def policy_from_args(args: argparse.Namespace) -> RoutingPolicy:
    """Build the policy; an option given for a policy that does not take it is an error."""
    accepted = set(policy_parameters(args.policy))
    kwargs: dict[str, Any] = {}
    if "block_size" in accepted:
        kwargs["block_size"] = args.block_size
    given = {
        "capacity_blocks_per_instance": args.capacity_blocks,
        "max_imbalance": args.max_imbalance,
        "load_weight": args.load_weight,
        "seed": args.seed,
    }
    kwargs.update({k: v for k, v in given.items() if v is not None})
    return build_policy(args.policy, **kwargs)


async def _serve(args: argparse.Namespace) -> None:
    app = create_app(
        [parse_backend(b) for b in args.backend], policy_from_args(args), block_size=args.block_size
    )
    stop = stop_event_on_signals()
    runner, _ = await start_router(app, args.port)
    try:
        await stop.wait()
        logger.info("router stopping")
    finally:
        await runner.cleanup()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the router until SIGTERM/SIGINT; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        policy_from_args(args)
        for b in args.backend:
            parse_backend(b)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(_serve(args))
    return 0
