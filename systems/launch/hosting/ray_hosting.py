"""``engine.hosting=ray``: every server of a deployment under a Ray actor on a node chosen by its role's rule.

:meth:`RayHosting.place` reads the cluster's nodes (``ray.nodes()``: address, resources, labels), plans
every server with :func:`systems.launch.hosting.planner.plan` (refusing, before anything starts, a
deployment that does not fit) and creates one :class:`~systems.launch.hosting.server_host.ServerHost`
actor per server, pinned to its node (``NodeAffinitySchedulingStrategy``, not soft) and holding the
resources its rule names (a GPU instance its tensor-parallel GPUs: Ray's ``CUDA_VISIBLE_DEVICES`` for
the actor becomes the server's). Servers bind their node's Ray address (``engine.ray_bind=node_ip``) or
127.0.0.1 (``loopback``: every node on this machine, as in the tests), and every address a server is
told comes from here. Files the harness reads back are copied into the job folder by :meth:`sync`;
:meth:`close` copies them one last time, removes each server's folder on its node and ends the actors.

Actors belong to this driver: if the harness dies, Ray ends them, and each server's supervisor, whose
parent is its actor, takes the server's process group down with it (the actors run with Ray's killing of a
worker's children turned off, :data:`ACTOR_ENV`, so the supervisor lives to do it). So does the loss of a node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from systems.contract import DeploymentError
from systems.launch.hosting.planner import HostingError, NodeView, ServerRequest, plan
from systems.launch.hosting.ray_process import RayServerProcess, ServerLost
from systems.launch.hosting.rules import HostingRule, server_demand
from systems.launch.ports import LOOPBACK

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]
NAMESPACE = "disagg-bench"
BINDS = ("node_ip", "loopback")
# Ray SIGKILLs a worker's child processes when the worker exits (Ray >= 2.x default). A server's supervisor is
# the actor's child and must outlive it long enough to stop the server's whole process group (its parent-death
# signal does that); killed at once, it would leave vLLM's engine core and workers orphaned. Our actors only.
ACTOR_ENV = {"RAY_kill_child_processes_on_worker_exit": "0"}


@dataclass
class _Mirror:
    name: str
    node_path: str
    local_path: Path
    whole: bool
    offset: int = 0


def _reachable(address: str, timeout_s: float = 5.0) -> Optional[str]:
    """None when ``host:port`` accepts a TCP connection, else why not."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except (OSError, ValueError) as exc:
        return str(exc)


def node_views(nodes: Sequence[Mapping[str, Any]]) -> list[NodeView]:
    """``ray.nodes()`` entries as the planner sees them."""
    return [NodeView(node_id=str(n.get("NodeID", "")), address=str(n.get("NodeManagerAddress", "")),
                     resources={k: float(v) for k, v in (n.get("Resources") or {}).items()},
                     labels={k: str(v) for k, v in (n.get("Labels") or {}).items()}, alive=bool(n.get("Alive")))
            for n in nodes]


class RayHosting:
    """Servers on the nodes of the Ray cluster at ``address`` (None: ``$RAY_ADDRESS``)."""

    kind = "ray"

    def __init__(self, address: Optional[str], rules: Mapping[str, HostingRule], bind: str = "node_ip",
                 connect_timeout_s: float = 60.0, call_timeout_s: float = 60.0) -> None:
        if bind not in BINDS:
            raise DeploymentError(f"engine.ray_bind: expected one of {', '.join(BINDS)}, got {bind!r}")
        self.address = address or os.environ.get("RAY_ADDRESS") or ""
        if not self.address:
            raise DeploymentError("engine.hosting=ray: set engine.ray_address (host:port of the cluster's head) or "
                                  "RAY_ADDRESS; see docs/cluster.md")
        self.rules = dict(rules)
        self.bind = bind
        self.connect_timeout_s = connect_timeout_s
        self.call_timeout_s = call_timeout_s
        self.token = secrets.token_hex(4)  # names this deployment's actors and folders
        self._connected = False
        self._roles: dict[str, str] = {}
        self._nodes: dict[str, NodeView] = {}
        self._actors: dict[str, Any] = {}
        self._info: dict[str, dict[str, Any]] = {}
        self._processes: dict[str, RayServerProcess] = {}
        self._mirrors: list[_Mirror] = []
        self._ports: set[tuple[str, int]] = set()

    # -- connecting and planning -----------------------------------------------------------------------------
    def connect(self) -> None:
        """Join the cluster as a driver (``DeploymentError`` when its head does not answer)."""
        if self._connected:
            return
        why = _reachable(self.address)
        if why is not None:
            raise DeploymentError(f"engine.hosting=ray: the Ray head at {self.address} does not answer ({why}); "
                                  "start the cluster first (docs/cluster.md) or fix engine.ray_address")
        import ray
        from ray._private import ray_constants

        host = self.address.rpartition(":")[0].strip("[]")
        if host in ("127.0.0.1", "localhost", "::1") and ray_constants.ENABLE_RAY_CLUSTER:
            raise DeploymentError(
                f"engine.hosting=ray: the Ray head at {self.address} is on loopback, but this process imported Ray "
                "without RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, so Ray would dial this host's network address "
                "instead and retry forever; export the variables `python -m tests.clusters.ray_local env` prints "
                "(it sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0) before starting the harness")
        pythonpath = os.pathsep.join([str(REPO_ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                        if p]])
        logger.info("connecting to the Ray cluster at %s", self.address)
        ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False, configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": pythonpath, **ACTOR_ENV}})
        self._connected = True

    def nodes(self) -> list[NodeView]:
        import ray

        return node_views(ray.nodes())

    def place(self, servers: Sequence[tuple[str, str, int]]) -> None:
        """Plan every server on the cluster's nodes, then start one actor per server on its node."""
        self.connect()
        requests = []
        for name, role, gpus in servers:
            rule = self.rules.get(role) or HostingRule()
            requests.append(ServerRequest(name=name, role=role, resources=server_demand(rule, gpus),
                                          labels=rule.labels, spread=rule.spread))
        chosen = plan(requests, self.nodes())
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from systems.launch.hosting.server_host import ServerHost

        host_class = ray.remote(ServerHost)
        root = f"/tmp/disagg-servers-{os.getuid()}/{self.token}"
        pending = {}
        for request in requests:
            node = chosen[request.name]
            demand = dict(request.resources)
            options = {"num_cpus": demand.pop("CPU", 0.0), "num_gpus": demand.pop("GPU", 0.0), "resources": demand,
                       "max_restarts": 0, "name": f"{self.token}-{request.name}",
                       "scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False)}
            actor = host_class.options(**options).remote(request.name, f"{root}/{request.name}")
            self._actors[request.name] = actor
            self._roles[request.name] = request.role
            self._nodes[request.name] = node
            pending[request.name] = actor.node.remote()
            logger.info("%s (%s): node %s at %s, resources %s", request.name, request.role, node.short, node.address,
                        request.resources or "{}")
        deadline = time.monotonic() + self.connect_timeout_s
        for name, ref in pending.items():
            try:
                self._info[name] = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError as exc:
                raise HostingError(f"{name}: Ray did not start its actor on node {self._nodes[name].short} within "
                                     f"{self.connect_timeout_s:.0f} s (are its resources held by other work?)") from exc
            except ray.exceptions.RayError as exc:
                raise HostingError(f"{name}: its actor on node {self._nodes[name].short} failed to start: "
                                     f"{exc}") from exc

    def _actor(self, name: str) -> Any:
        if name not in self._actors:
            raise KeyError(f"{name}: not placed (place() every server before asking for its address)")
        return self._actors[name]

    def _get(self, name: str, method: str, *args: Any) -> Any:
        import ray

        return ray.get(getattr(self._actor(name), method).remote(*args), timeout=self.call_timeout_s)

    # -- what a deployment asks --------------------------------------------------------------------------------
    def host(self, name: str) -> str:
        self._actor(name)
        return LOOPBACK if self.bind == "loopback" else self._nodes[name].address

    def port(self, name: str) -> int:
        host = self.host(name)
        while True:
            port = int(self._get(name, "free_port", host))
            if (self._nodes[name].address, port) not in self._ports:  # two actors of one node may draw the same
                self._ports.add((self._nodes[name].address, port))
                return port

    def node_dir(self, name: str, local_dir: Path) -> Path:
        self._actor(name)
        return Path(self._info[name]["root"])

    def put_file(self, name: str, path: Path, data: bytes) -> None:
        self._get(name, "write_file", str(path), data)

    def process(self, name: str, mirror_to: Optional[Path] = None) -> RayServerProcess:
        if name in self._processes:
            raise RuntimeError(f"{name}: already has a process")
        proc = RayServerProcess(name, self._actor(name), mirror_to, self.call_timeout_s,
                                node=f"{self._nodes[name].short} at {self._nodes[name].address}")
        self._processes[name] = proc
        return proc

    def mirror(self, name: str, node_path: Path, local_path: Path, whole: bool = False) -> None:
        self._actor(name)
        Path(local_path).parent.mkdir(parents=True, exist_ok=True)
        self._mirrors.append(_Mirror(name, str(node_path), Path(local_path), whole))

    def sync(self, final: bool = False) -> None:
        """Copy what is new on the nodes into the job folder: mirrored files, then every server's log."""
        import ray

        for m in self._mirrors:
            proc = self._processes.get(m.name)
            if proc is not None and proc.lost is not None:
                continue
            try:
                if m.whole:
                    data = self._get(m.name, "read", m.node_path, 0)
                    if data:
                        m.local_path.write_bytes(data)
                    continue
                while True:
                    data = self._get(m.name, "read", m.node_path, m.offset)
                    if not final:
                        data = data[:data.rindex(b"\n") + 1] if b"\n" in data else b""
                    if not data:
                        break
                    with open(m.local_path, "ab") as out:
                        out.write(data)
                    m.offset += len(data)
            except (ray.exceptions.RayError, ServerLost) as exc:
                logger.warning("%s: could not copy %s from its node: %s", m.name, m.node_path, exc)
        for proc in self._processes.values():
            proc.sync_log(final=final)

    def processes(self) -> dict[str, list[dict[str, Any]]]:
        """Per server: the processes of its group on its node (pid, command line)."""
        listed = {}
        for name, proc in self._processes.items():
            try:
                listed[name] = [] if proc.lost else list(self._get(name, "processes"))
            except Exception as exc:  # a node that died since
                logger.warning("%s: could not list its processes: %s", name, exc)
                listed[name] = []
        return listed

    def describe(self) -> dict[str, Any]:
        servers = {}
        for name, node in self._nodes.items():
            proc = self._processes.get(name)
            servers[name] = {"role": self._roles[name], "node_id": node.node_id,
                             "node": node.labels.get("disagg_node", ""), "address": node.address,
                             "host": self.host(name), "actor_pid": self._info.get(name, {}).get("actor_pid"),
                             "pid": getattr(proc, "_pid", None), "gpu_ids": self._info.get(name, {}).get("gpu_ids")}
        return {"kind": self.kind, "address": self.address, "bind": self.bind, "servers": servers}

    def close(self) -> None:
        """Copy the files one last time, remove each server's folder on its node, end the actors, disconnect."""
        if not self._connected:
            return
        import ray

        try:
            self.sync(final=True)
        except Exception:
            logger.exception("copying the servers' files back failed")
        cleanups = {}
        for name, actor in self._actors.items():
            proc = self._processes.get(name)
            if proc is None or proc.lost is None:
                cleanups[name] = actor.cleanup.remote()
        for name, ref in cleanups.items():
            try:
                ray.get(ref, timeout=self.call_timeout_s + 90.0)
            except ray.exceptions.RayError as exc:
                logger.warning("%s: cleanup on its node failed: %s", name, exc)
        for actor in self._actors.values():
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor, no_restart=True)
        self._actors.clear()
        ray.shutdown()
        self._connected = False


def ray_is_installed() -> bool:
    """Whether ``ray`` can be imported here (the ``launchers`` extra)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = ["RayHosting", "node_views", "ray_is_installed"]
