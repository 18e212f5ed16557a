"""Command line of the colocated router: ``python -m systems.router colocated --port P --backend NAME=URL ... --policy NAME``.

Listens on the ``--host`` address (127.0.0.1 by default; a real deployment gives the address of the node
it runs on), logs to stderr, and exits with status 0 on SIGTERM or SIGINT after closing its listener and
backend connections. Uses uvloop when it is installed.

Overload and memory bounds (defaults in :mod:`systems.router.admission` and :mod:`systems.router.capacity`):
``--max-pending`` requests held at once (beyond: ``429``; 0: no bound), ``--connect-timeout-s`` and
``--upstream-timeout-s`` (total, per upstream request; beyond: ``504``), and for ``cache_aware``
``--capacity-blocks`` (``auto``: learnt from the backends' ``/metrics``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from typing import Any, Optional

from systems.launch.ports import LOOPBACK, check_host
from systems.launch.processes import stop_event_on_signals
from systems.policies import POLICY_NAMES, RoutingPolicy, build_policy, policy_parameters
from systems.router.admission import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_PENDING,
    DEFAULT_UPSTREAM_TIMEOUT_S,
)
from systems.router.app import DEFAULT_BLOCK_SIZE, create_app, start_router
from systems.router.capacity import DEFAULT_CAPACITY_TOKENS, default_capacity_blocks, learn_capacity_blocks
from systems.router.state import parse_backend

__all__ = ["build_parser", "main", "policy_from_args"]

AUTO = "auto"
_CAPACITY_PARAM = "capacity_blocks_per_instance"

logger = logging.getLogger("systems.router")


def build_parser() -> argparse.ArgumentParser:
    """The router's argument parser."""
    p = argparse.ArgumentParser(prog="python -m systems.router colocated", description=__doc__.splitlines()[0])
    p.add_argument("--host", default=LOOPBACK,
                   help=f"address to listen on: the node's own address (default {LOOPBACK})")
    p.add_argument("--port", type=int, required=True, help="port on the --host address (0: any free port)")
    p.add_argument(
        "--backend", action="append", required=True, metavar="NAME=URL", help="a backend; repeat for each"
    )
    p.add_argument("--policy", default="round_robin", choices=POLICY_NAMES)
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE, help="tokens per hashed block")
    p.add_argument(
        "--capacity-blocks", type=_capacity, default=None, metavar="N|auto",
        help="cache_aware: blocks remembered per backend, least recently routed forgotten first (default "
        f"auto: the smallest backend KV cache from vLLM's /metrics, else {DEFAULT_CAPACITY_TOKENS} tokens)",
    )
    p.add_argument("--max-imbalance", type=int, default=None, help="cache_aware: load guard, in requests")
    p.add_argument("--load-weight", type=float, default=None, help="cache_aware: blocks of match per request")
    p.add_argument("--seed", type=int, default=None, help="random: RNG seed")
    p.add_argument("--max-pending", type=_non_negative_int, default=DEFAULT_MAX_PENDING,
                   help="requests held at once (in flight + waiting for a connection); beyond it 429 "
                   f"(0: no bound; default {DEFAULT_MAX_PENDING})")
    p.add_argument("--max-connections", type=_positive_int, default=None,
                   help="upstream connection pool (default: --max-pending, or 4096 when unbounded)")
    p.add_argument("--connect-timeout-s", type=_positive_float, default=DEFAULT_CONNECT_TIMEOUT_S,
                   help=f"upstream connect timeout (default {DEFAULT_CONNECT_TIMEOUT_S:g} s)")
    p.add_argument("--upstream-timeout-s", type=_non_negative_float, default=DEFAULT_UPSTREAM_TIMEOUT_S,
                   help="total time for one upstream request, to the answer's last byte; beyond it 504 "
                   f"(0: none; default {DEFAULT_UPSTREAM_TIMEOUT_S:g} s)")
    p.add_argument("--log-level", default="INFO")
    return p


def _number(kind: type, minimum: float, inclusive: bool, what: str) -> Any:
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum or (not inclusive and value == minimum):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return convert


_positive_int = _number(int, 0, False, "a positive integer")
_non_negative_int = _number(int, 0, True, "an integer >= 0")
_positive_float = _number(float, 0.0, False, "a positive number")
_non_negative_float = _number(float, 0.0, True, "a number >= 0")


def _capacity(text: str) -> int | str:
    return AUTO if text == AUTO else _positive_int(text)


def policy_from_args(args: argparse.Namespace, learned_capacity: Optional[int] = None) -> RoutingPolicy:
    """Build the policy; an option given for a policy that does not take it is an error.

    ``--capacity-blocks auto`` (or not given) uses ``learned_capacity``, else the default capacity.
    """
    accepted = set(policy_parameters(args.policy))
    kwargs: dict[str, Any] = {}
    if "block_size" in accepted:
        kwargs["block_size"] = args.block_size
    capacity = args.capacity_blocks
    if capacity in (None, AUTO):
        capacity = None
        if _CAPACITY_PARAM in accepted:
            capacity = learned_capacity or default_capacity_blocks(args.block_size)
    given = {
        _CAPACITY_PARAM: capacity,
        "max_imbalance": args.max_imbalance,
        "load_weight": args.load_weight,
        "seed": args.seed,
    }
    kwargs.update({k: v for k, v in given.items() if v is not None})
    return build_policy(args.policy, **kwargs)


async def _learned_capacity(args: argparse.Namespace, urls: list[str]) -> Optional[int]:
    if args.capacity_blocks not in (None, AUTO) or _CAPACITY_PARAM not in policy_parameters(args.policy):
        return None
    learned = await learn_capacity_blocks(urls, args.block_size)
    if learned is None:
        logger.warning("the backends' KV capacity is unknown (no vllm:cache_config_info on /metrics); the "
                       "cache-aware index keeps %d blocks per backend", default_capacity_blocks(args.block_size))
    else:
        logger.info("cache-aware index: %d blocks per backend (the smallest backend KV cache)", learned)
    return learned


async def _serve(args: argparse.Namespace) -> None:
    backends = [parse_backend(b) for b in args.backend]
    learned = await _learned_capacity(args, [b.url for b in backends])
    app = create_app(
        backends, policy_from_args(args, learned), block_size=args.block_size,
        connect_timeout_s=args.connect_timeout_s, max_connections=args.max_connections,
        max_pending=args.max_pending, upstream_timeout_s=args.upstream_timeout_s,
    )
    stop = stop_event_on_signals()
    runner, _ = await start_router(app, args.port, host=args.host)
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
        check_host(args.host, "--host")
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
