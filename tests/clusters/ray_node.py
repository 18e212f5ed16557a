"""One Ray worker node on this machine's loopback, joined to a loopback head: it stands for one host in tests.

::

    python -m tests.clusters.ray_node --address 127.0.0.1:PORT --name b --num-cpus 1 \\
        --resources '{"host_b": 1}' --labels hw=a100 --temp-dir DIR [--auth-token-path FILE]
    python -m tests.clusters.ray_node --address 127.0.0.1:PORT --list [--auth-token-path FILE]

The first form starts the node's Ray processes (raylet and what it starts) the way Ray's own
``ray.cluster_utils.Cluster.add_node`` does: ``ray._private.node.Node(RayParams(...), head=False)`` with
``node_ip_address=127.0.0.1`` and ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (``ray start --address`` cannot be
used: it refuses a second node on one machine with that variable, and without it binds every interface).
Every port Ray would take at a fixed number is drawn free or left to the OS, so several nodes (and the head)
share the machine. The node carries the label ``disagg_node=NAME`` besides ``--labels``. Once the head has
registered it, the program logs ``node NAME up: <ray node id>`` and blocks; SIGTERM or SIGINT stops the
node's processes gracefully (raylet first, which ends its workers) and exits 0. Ray's processes stay in this
program's process group and die with it (``PR_SET_PDEATHSIG``), so a SIGKILL of the group is the loss of a
host. ``--temp-dir`` is the node's own Ray temp folder: every process of the node names it on its command line.

``--list`` prints the nodes the head knows (alive or dead) as a JSON list and exits.

``--auth-token-path`` turns Ray's token authentication on with that file (the cluster's); without it the
environment's ``RAY_AUTH_*`` variables apply. Bad options exit with status 2 and name the option and value.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from vocab.errors import ConfigError

log = logging.getLogger(__name__)

NODE_LABEL = "disagg_node"
UP_FORMAT = "node {name} up: {node_id}"
UP_PATTERN = re.compile(r"node (?P<name>\S+) up: (?P<node_id>[0-9a-f]+)")
NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,14}[A-Za-z0-9])?$")  # a Ray label value, short (socket paths)
LABEL_KEY_RE = re.compile(r"^(?:[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}"
                          r"[A-Za-z0-9])?$")
LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
OBJECT_STORE_MB = 100  # Ray's minimum is 75 MiB; a test node needs little
EXIT_USAGE = 2


@dataclass(frozen=True)
class NodeSpec:
    """What one worker node offers the scheduler."""

    name: str
    num_cpus: int = 1
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name(self.name)
        if isinstance(self.num_cpus, bool) or not isinstance(self.num_cpus, int) or self.num_cpus < 0:
            raise ConfigError(f"node {self.name}: num_cpus must be a whole number >= 0, got {self.num_cpus!r}")
        check_resources(self.resources, f"node {self.name}: resources")
        check_labels(self.labels, f"node {self.name}: labels")

    def ray_labels(self) -> dict[str, str]:
        """``labels`` plus ``disagg_node=NAME``."""
        return {**self.labels, NODE_LABEL: self.name}


def check_name(name: str, what: str = "node name") -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(f"{what}: expected 1-16 letters, digits, '_', '.' or '-' (starting and ending with a "
                          f"letter or digit), got {name!r}")
    return name


def check_resources(resources: Mapping[str, Any], what: str = "--resources") -> dict[str, float]:
    """``resources`` as ``{name: float}``: names are non-empty strings other than Ray's built-in ones,
    amounts finite and >= 0."""
    if not isinstance(resources, Mapping):
        raise ConfigError(f"{what}: expected a JSON object of resource name -> amount, got {resources!r}")
    out: dict[str, float] = {}
    for key, amount in resources.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"{what}: resource names must be non-empty strings, got {key!r}")
        if key in RESERVED_RESOURCES:
            raise ConfigError(f"{what}: {key!r} is Ray's own resource; give CPUs with --num-cpus "
                              f"(expected custom resources only, e.g. {{\"host_b\": 1}})")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) \
                or amount < 0:
            raise ConfigError(f"{what}: resource {key!r} needs a number >= 0, got {amount!r}")
        out[key] = float(amount)
    return out


def check_labels(labels: Mapping[str, Any], what: str = "--labels") -> dict[str, str]:
    """``labels`` as ``{key: value}`` in Ray's label syntax; ``disagg_node`` and ``ray.io/`` keys are reserved."""
    if not isinstance(labels, Mapping):
        raise ConfigError(f"{what}: expected key=value pairs, got {labels!r}")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
            raise ConfigError(f"{what}: bad label key {key!r} (expected letters, digits, '_', '.', '-', up to 63, "
                              "optionally after 'prefix/')")
        if key == NODE_LABEL or key.startswith("ray.io/"):
            raise ConfigError(f"{what}: label key {key!r} is reserved (the node name sets {NODE_LABEL}; Ray sets "
                              "ray.io/*)")
        if not isinstance(value, str) or not LABEL_VALUE_RE.match(value):
            raise ConfigError(f"{what}: label {key!r} has a bad value {value!r} (expected up to 63 letters, "
                              "digits, '_', '.', '-', starting and ending with a letter or digit)")
        out[key] = value
    return out


def parse_resources(text: Optional[str], option: str = "--resources") -> dict[str, float]:
    """A JSON object of custom resources (``'{"host_b": 1}'``); '' or None: none."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: {text!r} is not valid JSON ({exc}); expected an object such as "
                          "'{\"host_b\": 1}'") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{option}: {text!r} is not a JSON object; expected one such as '{{\"host_b\": 1}}'")
    return check_resources(value, f"{option} {text!r}")


def parse_labels(text: Optional[str], option: str = "--labels") -> dict[str, str]:
    """``k=v,k2=v2`` (spaces around items ignored); '' or None: none. A key given twice is an error."""
    if text is None or not text.strip():
        return {}
    labels: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option}: {item!r} in {text!r} is not key=value (expected e.g. hw=a100,zone=z1)")
        key = key.strip()
        if key in labels:
            raise ConfigError(f"{option}: label {key!r} is given twice in {text!r}")
        labels[key] = value.strip()
    return check_labels(labels, f"{option} {text!r}")


def format_labels(labels: Mapping[str, str]) -> str:
    """The ``--labels`` text for ``labels``."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


def check_address(address: str, option: str = "--address") -> str:
    host, sep, port = address.rpartition(":")
    if not sep or host != "127.0.0.1" or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{option}: expected the head's GCS address 127.0.0.1:PORT, got {address!r}")
    return address


def _use_token(token_path: Optional[str]) -> None:
    """Set this process's Ray auth variables (before Ray is imported)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep 127.0.0.1 (see ray_local)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if token_path:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN_PATH"] = token_path
        os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.pop("RAY_ADDRESS", None)


def list_nodes(address: str) -> list[dict[str, Any]]:
    """The nodes the head at ``address`` knows, alive or dead: ``node_id``, ``name`` (the ``disagg_node``
    label; ``head`` for the head node), ``alive``, ``is_head``, ``address``, ``resources``, ``labels``."""
    from ray._raylet import GcsClient

    client = GcsClient(address=address)
    found = []
    for node_id, info in client.get_all_node_info(timeout=30).items():
        labels = dict(info.labels)
        found.append({
            "node_id": node_id.hex(),
            "name": labels.get(NODE_LABEL) or ("head" if info.is_head_node else ""),
            "alive": info.state == 0,  # GcsNodeInfo.ALIVE
            "is_head": bool(info.is_head_node),
            "address": f"{info.node_manager_address}:{info.node_manager_port}",
            "resources": dict(info.resources_total),
            "labels": labels,
        })
    return sorted(found, key=lambda n: (not n["is_head"], n["name"], n["node_id"]))


class _Stop(Exception):
    """SIGTERM or SIGINT arrived."""


def _raise_stop(signum: int, _frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


def run_node(address: str, spec: NodeSpec, temp_dir: str) -> int:
    """Start the node, log that it is up, block until SIGTERM/SIGINT, stop it; the exit status."""
    import ray._private.node
    import ray._private.parameter
    from ray._private import services

    from systems.launch import ports

    params = ray._private.parameter.RayParams(
        gcs_address=address, node_ip_address="127.0.0.1", num_cpus=spec.num_cpus, num_gpus=0,
        resources=dict(spec.resources), labels=spec.ray_labels(), temp_dir=temp_dir,
        # short unix socket paths (Ray's default, under the session folder, can pass the 107-byte limit)
        raylet_socket_name=os.path.join(temp_dir, "raylet.sock"),
        plasma_store_socket_name=os.path.join(temp_dir, "plasma.sock"),
        object_store_memory=OBJECT_STORE_MB * 1024 * 1024, include_log_monitor=True,
        node_manager_port=0, object_manager_port=0, min_worker_port=0, max_worker_port=0,
        dashboard_agent_listen_port=ports.free_port(), metrics_agent_port=0, metrics_export_port=0,
        runtime_env_agent_port=0, ray_client_server_port=None)
    node = None
    try:
        # kernel fate sharing (spawn_reaper on Linux): each Ray process dies with this one
        node = ray._private.node.Node(params, head=False, shutdown_at_exit=False, spawn_reaper=True)
        info = services.get_node(address, node.node_id)
        if info.get("labels", {}).get(NODE_LABEL) != spec.name:
            log.error("node %s: the head registered %s without the label %s=%s", spec.name, node.node_id,
                      NODE_LABEL, spec.name)
            return 1
        log.info(UP_FORMAT.format(name=spec.name, node_id=node.node_id))
        while True:
            time.sleep(1.0)
            dead = [kind for kind, proc in node.dead_processes() if proc.returncode is not None]
            if dead:
                log.error("node %s: Ray process(es) %s exited; stopping the node", spec.name, ", ".join(dead))
                return 1
    except _Stop as stop:
        log.info("node %s: %s received, stopping", spec.name, stop)
        return 0
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        if node is not None:
            node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
            log.info("node %s: stopped", spec.name)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.clusters.ray_node",
                                     description="One Ray worker node on 127.0.0.1 (docs/launchers.md).")
    parser.add_argument("--address", required=True, help="the head's GCS address, 127.0.0.1:PORT")
    parser.add_argument("--name", help="the node's name (label disagg_node=NAME)")
    parser.add_argument("--num-cpus", type=int, default=1, help="CPUs Ray may schedule on the node (default 1)")
    parser.add_argument("--resources", default="", help='custom resources as JSON, e.g. \'{"host_b": 1}\'')
    parser.add_argument("--labels", default="", help="node labels k=v,k2=v2 (disagg_node=NAME is added)")
    parser.add_argument("--temp-dir", help="the node's own Ray temp folder")
    parser.add_argument("--auth-token-path", default=None, help="the cluster's token file (token auth)")
    parser.add_argument("--list", action="store_true", help="print the cluster's nodes as JSON and exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    try:
        address = check_address(args.address)
        if not args.list:
            if not args.name or not args.temp_dir:
                raise ConfigError("--name and --temp-dir are required (unless --list)")
            spec = NodeSpec(name=args.name, num_cpus=args.num_cpus, resources=parse_resources(args.resources),
                            labels=parse_labels(args.labels))
    except ConfigError as exc:
        print(f"error: ray_node: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _use_token(args.auth_token_path)
    if args.list:
        json.dump(list_nodes(address), sys.stdout)
        print()
        return 0
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    return run_node(address, spec, os.path.abspath(args.temp_dir))


if __name__ == "__main__":
    sys.exit(main())
