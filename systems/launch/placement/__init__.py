"""Where the servers of a real deployment run: this host (``engine.placement=local``, the default) or the
nodes of a Ray cluster (``engine.placement=ray``); see :mod:`systems.launch.placement.base` for what a
deployment asks of either, and docs/cluster.md for running on a cluster.

Modules: ``base`` (the interface), ``local`` (this host), ``rules`` (per-role placement rules from
``engine.placement_rules``), ``planner`` (choosing nodes before anything starts), ``server_host`` (the
Ray actor that owns one server on its node), ``ray_process`` (the harness's handle on it),
``ray_placement`` (the Ray placement itself).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from systems.launch.placement.base import Placement, ServerProcess
from systems.launch.placement.local import LocalPlacement
from systems.launch.placement.planner import PlacementError
from systems.launch.placement.rules import check_rules

PLACEMENTS = ("local", "ray")
PLACEMENT_FILE = "placement.json"  # in <job>/servers/: where every server runs

logger = logging.getLogger(__name__)


def make_placement(engine: Any) -> Placement:
    """The placement ``engine`` (a ``VllmEngineConfig``) asks for; Ray is imported only for ``ray``."""
    if engine.placement == "local":
        return LocalPlacement()
    from systems.launch.placement.ray_placement import RayPlacement

    return RayPlacement(engine.ray_address, check_rules(engine.placement_rules), bind=engine.ray_bind,
                        connect_timeout_s=engine.ray_connect_timeout_s)


def record_placement(placement: Placement, run_dir: Path) -> dict[str, Any]:
    """Write ``<run_dir>/placement.json``: every server's node and, for servers on other nodes, the processes of
    its group there; log one line per node. Returns what was written."""
    record = {**placement.describe(), "processes": placement.processes()}
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


__all__ = ["PLACEMENT_FILE", "record_placement", "PLACEMENTS", "LocalPlacement", "Placement", "PlacementError", "ServerProcess", "make_placement"]
