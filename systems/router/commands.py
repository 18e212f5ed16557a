"""Command lines of the suite's routers, and the entry point that picks one by its first argument.

``python -m systems.router colocated ...`` (:mod:`systems.router.cli`) and ``python -m systems.router
disaggregated ...`` (:mod:`systems.router.pd_cli`); deployments build these argv with the functions here.
Each router listens on ``--host`` (the address of the node it runs on; 127.0.0.1 by default).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from systems.launch.ports import LOOPBACK, check_host

KINDS = ("colocated", "disaggregated")


def colocated_router_command(port: int, policy: str, block_size: int, seed: int,
                             backends: Mapping[str, str], host: str = LOOPBACK) -> list[str]:
    """argv of the colocated router listening on ``host:port`` in front of ``backends`` (name -> base URL),
    routing by ``policy`` (a canonical name, see :mod:`systems.topology`)."""
    check_host(host, "colocated router host")
    cmd = [sys.executable, "-m", "systems.router", "colocated", "--host", host, "--port", str(port),
           "--policy", policy, "--block-size", str(block_size)]
    if policy == "random":
        cmd += ["--seed", str(seed)]
    for name, url in backends.items():
        cmd += ["--backend", f"{name}={url}"]
    return cmd


def disaggregated_router_command(config: Path, port: int, stats_out: Optional[Path] = None,
                                 host: str = LOOPBACK) -> list[str]:
    """argv of the disaggregating router reading ``config`` (a ``RouterConfig`` as JSON), listening on
    ``host:port`` (HTTP) and binding its KV-cache-events socket on ``host`` too."""
    check_host(host, "disaggregated router host")
    cmd = [sys.executable, "-m", "systems.router", "disaggregated", "--config", str(config), "--host", host,
           "--port", str(port)]
    if stats_out is not None:
        cmd += ["--stats-out", str(stats_out)]
    return cmd


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Dispatch ``colocated`` / ``disaggregated`` to its command line; exit status 2 on a bad first argument."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in KINDS:
        print(f"usage: python -m systems.router {{{','.join(KINDS)}}} [options]  (got {args[:1] or 'nothing'}); "
              "see --help of each", file=sys.stderr)
        return 2
    if args[0] == "colocated":
        from systems.router.cli import main as colocated_main

        return colocated_main(args[1:])
    from systems.router.pd_cli import main as pd_main

    return pd_main(args[1:])
