"""Where the servers of a real deployment run: this host (``engine.hosting=local``, the default) or the
nodes of a Ray cluster (``engine.hosting=ray``); see :mod:`systems.launch.hosting.base` for what a
deployment asks of either, and docs/cluster.md for running on a cluster.

Modules: ``base`` (the interface), ``local`` (this host), ``rules`` (per-role hosting rules from
``engine.hosting_rules``), ``planner`` (choosing nodes before anything starts), ``server_host`` (the
Ray actor that owns one server on its node), ``ray_process`` (the harness's handle on it),
``ray_hosting`` (the Ray hosting itself).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from systems.launch.hosting.base import Hosting, ServerProcess
from systems.launch.hosting.local import LocalHosting
from systems.launch.hosting.planner import HostingError
from systems.launch.hosting.rules import check_rules

HOSTINGS = ("local", "ray")
PLACEMENT_FILE = "hosting.json"  # in <job>/servers/: where every server runs

logger = logging.getLogger(__name__)


def make_hosting(engine: Any) -> Hosting:
    """The hosting ``engine`` (a ``VllmEngineConfig``) asks for; Ray is imported only for ``ray``."""
    if engine.hosting == "local":
        return LocalHosting()
    from systems.launch.hosting.ray_hosting import RayHosting

    return RayHosting(engine.ray_address, check_rules(engine.hosting_rules), bind=engine.ray_bind,
                        connect_timeout_s=engine.ray_connect_timeout_s)


def record_hosting(hosting: Hosting, run_dir: Path) -> dict[str, Any]:
    """Write ``<run_dir>/hosting.json``: every server's node and, for servers on other nodes, the processes of
    its group there; log one line per node. Returns what was written."""
    record = {**hosting.describe(), "processes": hosting.processes()}
    by_node: dict[str, list[str]] = {}
    for name, server in record.get("servers", {}).items():
        node = server.get("node") or server.get("node_id", "")[:8] or server.get("host", "")
        count = len(record["processes"].get(name, []))
        by_node.setdefault(node, []).append(f"{name}" + (f" ({count} processes)" if count else ""))
    for node, names in by_node.items():
        logger.info("node %s: %s", node, ", ".join(names))
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / PLACEMENT_FILE).write_text(json.dumps(record, indent=2))
    return record


__all__ = ["PLACEMENT_FILE", "record_hosting", "HOSTINGS", "LocalHosting", "Hosting", "HostingError", "ServerProcess", "make_hosting"]
