"""A Ray cluster on this machine's loopback, for ``hydra/launcher=ray_cluster`` and the tests: a head, and
worker nodes that each stand for one host.

::

    python -m tests.clusters.ray_local up        # ray start --head on 127.0.0.1, wait until it answers
    eval "$(python -m tests.clusters.ray_local env)"     # export RAY_ADDRESS and three more (below)
    python -m harness --multirun hydra/launcher=ray_cluster system=distserve,mooncake
    python -m tests.clusters.ray_local status    # exit 0 when the head runs and its port answers
    python -m tests.clusters.ray_local down      # stop exactly the processes `up` started

    python -m tests.clusters.ray_local add-node b --resources '{"host_b": 1}' --labels hw=a100  # a "host"
    python -m tests.clusters.ray_local nodes     # the nodes as the head sees them (alive and dead)
    python -m tests.clusters.ray_local kill-node b     # lose host b: SIGKILL all of it, no shutdown
    python -m tests.clusters.ray_local remove-node b   # stop host b gracefully

``up`` runs ``ray start --head --block --node-ip-address=127.0.0.1 --port=PORT --include-dashboard=false
--num-cpus=N --temp-dir=DIR/ray --disable-usage-stats`` (the ``ray`` of this interpreter's environment) in a
new process group with a pid record (:mod:`tests.clusters.daemons`) and waits for "Ray runtime started"
and the GCS port (a head that exits or does not answer in time is stopped again, and the error ends
with the tail of its log). It is idempotent: with the head up it changes nothing and says so. The head runs in the
directory ``up`` ran in, and so do the Ray workers (not in the driver's): a relative ``results_dir`` only
means the same folder when the sweep is launched from there too.

A driver needs four variables, which ``env`` prints (:meth:`RayCluster.client_env`):

- ``RAY_ADDRESS=127.0.0.1:PORT``;
- ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, in the cluster *and in every driver*: without it Ray replaces
  127.0.0.1 by the host's network address (``resolve_ip_for_localhost``), so the head's servers listen on
  every interface and a driver given ``RAY_ADDRESS=127.0.0.1:PORT`` dials the network address instead and
  retries forever. With it, every Ray server of this cluster binds 127.0.0.1;
- ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH=DIR/auth_token``: the cluster requires the token
  ``up`` wrote there (0600). Ray otherwise decides per process: ``ray start`` turns token authentication
  on whenever ``~/.ray/auth_token`` exists (any local ``ray.init()`` writes one), while a driver given an
  explicit address never does, and is refused ("Authentication token is missing or incorrect").

The ports Ray would otherwise take at fixed numbers (client server 10001, dashboard agent 52365, dashboard
8265) are drawn free, so this cluster can run beside another one.

Worker nodes (:func:`add_node`, :func:`add_nodes`; :func:`local_ray_cluster` for tests) run
:mod:`tests.clusters.ray_node`, one daemon each (pid record ``ray_node_<NAME>``, log ``node_<NAME>.log``,
Ray temp folder ``DIR/ray/n/<NAME>``) with ``--num-cpus`` (default 1), custom ``--resources``, ``--labels``
and the label ``disagg_node=<NAME>``; the cluster's token file authenticates them. ``add-node`` waits until
the head has registered the node, and is idempotent (a node running with other settings is an error).
Ray puts each worker process (actors included) in a process group of its own and renames it
(``ray::Pinned``), so neither the daemon's group nor a command line finds it; it stays in the daemon's
*session*, and ``kill-node`` SIGKILLs every process of that session (raylet, agents, workers), then the head
notices the loss through its health checks (:func:`wait_node_dead`; :data:`FAST_FAILURE_DETECTION` makes
that about 5 s).

``down`` stops the worker nodes, then sends SIGTERM to ``ray start --block`` (which stops its processes in
order), then stops what is left of each daemon's process group and session, and finally any process whose
command line names this cluster's temp folder. It never runs ``ray stop``: that kills every Ray process on the machine
whose name matches (``raylet``, ``gcs_server``, workers ...), whoever started them.

The folder is ``--dir``, else ``$DISAGG_RAY_DIR``, else ``/tmp/disagg-bench-ray-<uid>`` (kept short: Ray's
unix sockets live under it). Exit status: 0; 1 when a command fails (the message ends with the tail of
Ray's log); 2 for a bad option or node spec; 3 from ``status`` (and ``env``) when the cluster is not up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from systems.launch import groups, ports, procfs
from tests.clusters import ray_node
from tests.clusters.daemons import (
    POLL_S,
    ClusterError,
    DaemonRecord,
    DaemonSet,
    describe,
    run_command,
    tail,
    wait_for,
)
from vocab.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/clusters/ray_local.py

log = logging.getLogger(__name__)

DIR_ENV = "DISAGG_RAY_DIR"
DEFAULT_PORT = 6390
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # keep 127.0.0.1 (see the module docstring)
HEAD = "ray_head"
NODE_PREFIX = "ray_node_"  # + the node's name: the pid record of a worker node's daemon
NODES_SUBDIR = "n"  # the worker nodes' Ray temp folders: <temp dir>/n/<name>
STARTED_LINE = "Ray runtime started"
LAYOUT_FILE = "cluster.json"
GRACE_S = 30.0
EXIT_NOT_UP = 3
EXIT_USAGE = 2  # bad option or node spec (ConfigError)


def default_dir() -> Path:
    """``$DISAGG_RAY_DIR``, else ``/tmp/disagg-bench-ray-<uid>``."""
    return Path(os.environ.get(DIR_ENV) or f"/tmp/disagg-bench-ray-{os.getuid()}")


def ray_program() -> str:
    """The ``ray`` command of this interpreter's environment (else the one on PATH)."""
    beside = Path(sys.executable).parent / "ray"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise ClusterError("ray is not installed in this environment: pip install -e '.[launchers]'")
    return found


@dataclass(frozen=True)
class RayCluster:
    """A cluster folder and the head's GCS port."""

    root: Path
    port: int
    num_cpus: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def temp_dir(self) -> Path:
        return self.root / "ray"

    @property
    def token_path(self) -> Path:
        return self.root / "auth_token"

    @property
    def daemons(self) -> DaemonSet:
        return DaemonSet(self.root)

    def driver_vars(self) -> dict[str, str]:
        """What a driver (``python -m harness ... hydra/launcher=ray_cluster``) needs to reach this cluster."""
        return {"RAY_ADDRESS": self.address, **LOOPBACK_ENV, "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN_PATH": str(self.token_path)}

    def client_env(self, base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with :meth:`driver_vars`; ``RAY_AUTH_TOKEN``
        removed (it would win over the token file)."""
        env = {**(os.environ if base is None else base), **self.driver_vars()}
        env.pop("RAY_AUTH_TOKEN", None)
        return env


def load_cluster(directory: Path) -> Optional[RayCluster]:
    """The cluster an earlier ``up`` set up in ``directory`` (None: never set up there)."""
    try:
        data = json.loads((Path(directory) / LAYOUT_FILE).read_text(encoding="utf-8"))
        return RayCluster(root=Path(directory), port=int(data["port"]), num_cpus=int(data["num_cpus"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            return True
    except OSError:
        return False


def _started(record_log: str) -> bool:
    return STARTED_LINE in tail(record_log, 400)


def is_up(cluster: Optional[RayCluster]) -> bool:
    """The head's ``ray start`` runs and its GCS port answers."""
    return cluster is not None and cluster.daemons.alive(HEAD) is not None and _answers(cluster.port)


@dataclass(frozen=True)
class UpResult:
    cluster: RayCluster
    started: bool  # False: it was already up


def up(directory: Optional[Path] = None, *, port: int = DEFAULT_PORT, num_cpus: Optional[int] = None,
       object_store_mb: Optional[int] = None, timeout_s: float = 300.0,
       system_config: Optional[Mapping[str, Any]] = None) -> UpResult:
    """Start the loopback head in ``directory`` unless it runs (idempotent); wait until it answers.

    ``system_config``: Ray's ``--system-config`` for the whole cluster (e.g. :data:`FAST_FAILURE_DETECTION`)."""
    directory = Path(directory or default_dir()).absolute()
    existing = load_cluster(directory)
    if existing is not None and existing.daemons.alive(HEAD) is not None:
        record = existing.daemons.alive(HEAD)
        assert record is not None
        wait_for(lambda: _started(record.log) and _answers(existing.port), what="the Ray head to answer",
                 timeout_s=timeout_s, watch=[record])
        return UpResult(existing, False)
    if existing is not None:
        existing.daemons.stop(HEAD, GRACE_S, leader_first=True)  # what a dead head left in its group
    if not 0 < port < 65536:
        raise ConfigError(f"--port: expected a TCP port 1-65535 for the head, got {port}")
    cluster = RayCluster(root=directory, port=port, num_cpus=num_cpus or os.cpu_count() or 1)
    if not ports.port_is_free(port):
        holder = ports.describe_port_holder(port)
        raise ClusterError(f"port {port} on 127.0.0.1 is in use{' by ' + holder if holder else ''}; pick another "
                           "with --port")
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    (directory / LAYOUT_FILE).write_text(json.dumps({"port": port, "num_cpus": cluster.num_cpus}), encoding="utf-8")
    cluster.token_path.unlink(missing_ok=True)
    fd = os.open(cluster.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as token:
        token.write(secrets.token_hex(32))  # Ray's own format (256 bits)
    command = [ray_program(), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
               "--include-dashboard=false", f"--num-cpus={cluster.num_cpus}", f"--temp-dir={cluster.temp_dir}",
               "--disable-usage-stats", f"--ray-client-server-port={ports.free_port()}",
               f"--dashboard-agent-listen-port={ports.free_port()}", f"--dashboard-port={ports.free_port()}"]
    if object_store_mb:
        command.append(f"--object-store-memory={object_store_mb * 1024 * 1024}")
    if system_config:
        command.append(f"--system-config={json.dumps(dict(system_config), separators=(',', ':'))}")
    log_path = directory / "ray_start.log"
    log_path.unlink(missing_ok=True)
    env = {**cluster.client_env(), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)  # the head must not try to join another cluster
    # Ray workers run in the raylet's working directory: this one, so that a sweep launched from where `up`
    # ran finds its relative results_dir (from anywhere else, give an absolute one)
    record = cluster.daemons.start(HEAD, command, log_path, env=env, cwd=Path.cwd())
    try:
        wait_for(lambda: _started(record.log) and _answers(port), what=f"the Ray head on {cluster.address}",
                 timeout_s=timeout_s, watch=[record])
    except ClusterError:
        down(directory)  # a failed `up` leaves nothing running
        raise
    return UpResult(cluster, True)


def _strays(temp_dir: Path) -> list[procfs.ProcStat]:
    """Live processes whose command line names ``temp_dir`` (Ray passes it, or a session folder under it, to
    every process it starts)."""
    names_it = re.compile(re.escape(str(temp_dir).encode()) + rb"(?:/|\x00|$)")  # the folder, not a longer name
    found = []
    for stat in procfs.all_stats():
        if stat.zombie or stat.pid == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{stat.pid}/cmdline").read_bytes()
        except OSError:
            continue
        if names_it.search(cmdline):
            found.append(stat)
    return found


def _session_members(record: DaemonRecord) -> list[procfs.ProcStat]:
    """Live processes of the session the daemon ``record`` leads, started no earlier than it (this boot only).

    Each daemon starts a session of its own; Ray puts every worker (actors included) in a process group of
    its own and renames it (``ray::Actor``), but the worker stays in the session."""
    if record.boot_id != procfs.boot_id():
        return []
    return [s for s in procfs.all_stats() if s.sid == record.pid and not s.zombie
            and s.start_time >= record.start_time and s.pid != os.getpid()]


def _signal_session(record: DaemonRecord, sig: int) -> None:
    for pgid in sorted({s.pgid for s in _session_members(record)}):
        groups.signal_group(pgid, sig)  # a group inside the session belongs to it


def _stop_session(record: DaemonRecord, grace_s: float) -> bool:
    """SIGTERM what is left of the daemon's session, SIGKILL it after ``grace_s``; True when none is left."""
    if not _session_members(record):
        return True
    log.info("%s: stopping %d leftover process(es) of its session", record.name, len(_session_members(record)))
    _signal_session(record, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _session_members(record) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return _kill_session(record, 10.0)


def _kill_session(record: DaemonRecord, timeout_s: float) -> bool:
    """SIGKILL every process group of the daemon's session until none is left (or ``timeout_s`` passes)."""
    deadline = time.monotonic() + timeout_s
    while True:
        _signal_session(record, signal.SIGKILL)
        left = _session_members(record)
        if not left:
            return True
        if time.monotonic() >= deadline:
            log.error("%s: processes %s survived SIGKILL", record.name, [s.pid for s in left])
            return False
        time.sleep(POLL_S)


def _node_records(cluster: RayCluster) -> list[DaemonRecord]:
    """The pid records of the worker nodes added to ``cluster`` (running or not)."""
    records = []
    for path in sorted(cluster.daemons.pid_dir.glob(f"{NODE_PREFIX}*.json")):
        record = cluster.daemons.record(path.stem)
        if record is not None:
            records.append(record)
    return records


def _stop_daemon(cluster: RayCluster, name: str, grace_s: float) -> bool:
    """Stop daemon ``name`` gracefully (SIGTERM to its leader first), then what is left of its session."""
    record = cluster.daemons.record(name)
    if record is None:
        return True
    ok = cluster.daemons.stop(name, grace_s, leader_first=True)
    return _stop_session(record, grace_s) and ok


def down(directory: Optional[Path] = None) -> bool:
    """Stop the cluster in ``directory`` (its worker nodes first, then the head); True when nothing of it runs
    any more."""
    directory = Path(directory or default_dir()).absolute()
    cluster = load_cluster(directory)
    if cluster is None:
        return True
    ok = True
    node_records = _node_records(cluster)
    for record in node_records:  # all nodes stop at once: each daemon stops its own Ray processes
        if record.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(record.pid, signal.SIGTERM)
    for record in node_records:
        ok = _stop_daemon(cluster, record.name, GRACE_S) and ok
    ok = _stop_daemon(cluster, HEAD, GRACE_S) and ok
    for pgid in sorted({s.pgid for s in _strays(cluster.temp_dir)}):
        log.warning("stopping process group %d: it runs processes of this Ray cluster", pgid)
        ok = groups.stop_group(pgid, GRACE_S, "ray") and ok
    return ok and not _strays(cluster.temp_dir)


# ---------------------------------------------------------------------------------------------------------------
# worker nodes: each stands for one host (tests.clusters.ray_node)

FAST_FAILURE_DETECTION = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 1000,
                          "health_check_timeout_ms": 3000, "health_check_failure_threshold": 5}
"""``system_config`` for :func:`up` in tests: the head declares a killed node dead after about 5 s (Ray's
default takes 15 s or more). A node that does not answer for 5 checks of 3 s is dead too."""

NodeArgs = Union[ray_node.NodeSpec, tuple, Mapping[str, Any]]


@dataclass(frozen=True)
class NodeInfo:
    """A node as this cluster knows it: ``name`` (its ``disagg_node`` label; ``head`` for the head), the Ray
    node id, the process group of its daemon (None: not started by this cluster, or gone), its resources
    and labels (as registered with the head, or as asked for), and whether the head counts it alive."""

    name: str
    node_id: str
    pgid: Optional[int]
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    alive: bool = True
    is_head: bool = False


def node_daemon(name: str) -> str:
    """The pid record name of worker node ``name``."""
    return NODE_PREFIX + ray_node.check_name(name)


def node_temp_dir(cluster: RayCluster, name: str) -> Path:
    return cluster.temp_dir / NODES_SUBDIR / name


def _require_up(directory: Optional[Path]) -> RayCluster:
    directory = Path(directory or default_dir()).absolute()
    cluster = load_cluster(directory)
    if cluster is None or not is_up(cluster):
        raise ClusterError(f"no Ray head runs in {directory}: run `python -m tests.clusters.ray_local up` first")
    return cluster


def _tooling_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with this checkout's root first on ``PYTHONPATH``: a ``python -m tests.clusters.ray_node`` child
    imports this tooling from the checkout (it is not installed with the suite), whatever its working directory."""
    paths = [str(REPO_ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def _node_command(cluster: RayCluster, spec: ray_node.NodeSpec) -> list[str]:
    return [sys.executable, "-m", "tests.clusters.ray_node", "--address", cluster.address, "--name", spec.name,
            "--num-cpus", str(spec.num_cpus), "--resources", json.dumps(dict(spec.resources), sort_keys=True),
            "--labels", ray_node.format_labels(spec.labels), "--temp-dir", str(node_temp_dir(cluster, spec.name)),
            "--auth-token-path", str(cluster.token_path)]


def _up_node_id(record: DaemonRecord) -> Optional[str]:
    """The Ray node id the daemon logged once the head registered it (this start of the log only)."""
    try:
        text = Path(record.log).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    header = "=== "
    last = text.rfind("\n" + header)
    for match in ray_node.UP_PATTERN.finditer(text[max(last, 0):]):
        if match["name"] == record.name[len(NODE_PREFIX):]:
            return match["node_id"]
    return None


def as_spec(name: str, args: NodeArgs) -> ray_node.NodeSpec:
    """A :class:`ray_node.NodeSpec` from a spec, a ``(num_cpus, resources, labels)`` tuple or a mapping of
    those keys (:class:`ConfigError` naming the node when malformed)."""
    if isinstance(args, ray_node.NodeSpec):
        if args.name != name:
            raise ConfigError(f"node {name}: its spec is named {args.name!r}")
        return args
    if isinstance(args, Mapping):
        unknown = set(args) - {"num_cpus", "resources", "labels"}
        if unknown:
            raise ConfigError(f"node {name}: unknown field(s) {sorted(unknown)} (expected num_cpus, resources, labels)")
        return ray_node.NodeSpec(name=name, num_cpus=args.get("num_cpus", 1), resources=args.get("resources") or {},
                                 labels=args.get("labels") or {})
    if isinstance(args, tuple) and 1 <= len(args) <= 3:
        num_cpus, resources, labels = (tuple(args) + (None, None))[:3]
        return ray_node.NodeSpec(name=name, num_cpus=num_cpus, resources=resources or {}, labels=labels or {})
    raise ConfigError(f"node {name}: expected (num_cpus, resources, labels), got {args!r}")


def add_nodes(directory: Optional[Path], specs: Mapping[str, NodeArgs], *, timeout_s: float = 180.0) \
        -> dict[str, NodeInfo]:
    """Start the worker nodes ``specs`` (name -> :class:`ray_node.NodeSpec` or ``(num_cpus, resources,
    labels)``) together and wait until the head has registered each. A node already running with the same
    settings is left as it is; one running with other settings is an error (remove it first). A node that
    fails to come up is stopped again, and so are the others this call started."""
    cluster = _require_up(directory)
    wanted = [as_spec(name, args) for name, args in specs.items()]
    started: list[DaemonRecord] = []
    records: dict[str, DaemonRecord] = {}
    for spec in wanted:
        name = node_daemon(spec.name)
        command = _node_command(cluster, spec)
        running = cluster.daemons.alive(name)
        if running is not None:
            if list(running.command) != command:
                raise ClusterError(f"node {spec.name} already runs with other settings ({describe(running.command)}); "
                                   f"remove it first (`ray_local remove-node {spec.name}`)")
            log.info("node %s: already up, nothing started", spec.name)
            records[spec.name] = running
            continue
        _stop_daemon(cluster, name, GRACE_S)  # what a dead node daemon left
        env = _tooling_env({**cluster.client_env(), "RAY_USAGE_STATS_ENABLED": "0"})
        env.pop("RAY_ADDRESS", None)
        record = cluster.daemons.start(name, command, cluster.root / f"node_{spec.name}.log", env=env, cwd=Path.cwd())
        started.append(record)
        records[spec.name] = record
    t0 = time.monotonic()
    try:
        for spec in wanted:
            record = records[spec.name]
            wait_for(lambda r=record: _up_node_id(r) is not None, what=f"Ray node {spec.name} to join the head",
                     timeout_s=max(1.0, timeout_s - (time.monotonic() - t0)), watch=[record])
    except ClusterError:
        for record in started:
            _stop_daemon(cluster, record.name, GRACE_S)
        raise
    if started:
        log.info("%d node(s) up in %.1f s", len(started), time.monotonic() - t0)
    return {spec.name: NodeInfo(name=spec.name, node_id=_up_node_id(records[spec.name]) or "",
                                pgid=records[spec.name].pid,
                                resources={"CPU": float(spec.num_cpus), **spec.resources},
                                labels=spec.ray_labels()) for spec in wanted}


def add_node(directory: Optional[Path], name: str, *, num_cpus: int = 1,
             resources: Optional[Mapping[str, float]] = None, labels: Optional[Mapping[str, str]] = None,
             timeout_s: float = 180.0) -> NodeInfo:
    """Start worker node ``name`` (a host: ``num_cpus``, custom ``resources``, ``labels`` plus
    ``disagg_node=name``) joined to the head in ``directory``; wait until the head has registered it.
    Idempotent: a node running with the same settings is left as it is."""
    spec = ray_node.NodeSpec(name=name, num_cpus=num_cpus, resources=dict(resources or {}), labels=dict(labels or {}))
    return add_nodes(directory, {name: spec}, timeout_s=timeout_s)[name]


def kill_node(directory: Optional[Path], name: str, *, timeout_s: float = 60.0) -> Optional[str]:
    """Lose host ``name``: SIGKILL its daemon's process group and every process of its session (raylet,
    agents, workers and actors), no graceful shutdown; return when none is left. The Ray node id it had (None:
    it never came up). The head notices the loss by itself (:func:`wait_node_dead`)."""
    cluster = load_cluster(Path(directory or default_dir()).absolute())
    record = None if cluster is None else cluster.daemons.record(node_daemon(name))
    if cluster is None or record is None:
        raise ClusterError(f"no node {name} was added to the Ray cluster in {directory or default_dir()}")
    node_id = _up_node_id(record)
    if record.boot_id == procfs.boot_id() and procfs.is_running(record.pid, record.start_time):
        groups.signal_group(record.pid, signal.SIGKILL)
    if not _kill_session(record, timeout_s):
        raise ClusterError(f"node {name}: processes {[s.pid for s in _session_members(record)]} survived SIGKILL")
    cluster.daemons.stop(record.name, 1.0)  # nothing is left: this only forgets the record
    log.info("node %s: killed (Ray node %s)", name, node_id)
    return node_id


def remove_node(directory: Optional[Path], name: str, *, grace_s: float = GRACE_S) -> bool:
    """Stop worker node ``name`` gracefully (its raylet leaves the cluster); True when nothing of it runs."""
    cluster = load_cluster(Path(directory or default_dir()).absolute())
    if cluster is None or cluster.daemons.record(node_daemon(name)) is None:
        raise ClusterError(f"no node {name} was added to the Ray cluster in {directory or default_dir()}")
    return _stop_daemon(cluster, node_daemon(name), grace_s)


def nodes(directory: Optional[Path] = None, *, timeout_s: float = 120.0) -> list[NodeInfo]:
    """The cluster's nodes as the head sees them (alive and dead), head first, then by name."""
    cluster = _require_up(directory)
    env = _tooling_env({**cluster.client_env(), "RAY_USAGE_STATS_ENABLED": "0"})
    env.pop("RAY_ADDRESS", None)
    proc = run_command([sys.executable, "-m", "tests.clusters.ray_node", "--address", cluster.address, "--list",
                        "--auth-token-path", str(cluster.token_path)], env=env, timeout_s=timeout_s)
    try:
        listed = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise ClusterError(f"cannot read the node list of {cluster.address}: {proc.stdout[-500:]!r}") from exc
    pgids = {node_id: r.pid for r in _node_records(cluster) if r.alive() and (node_id := _up_node_id(r))}
    head = cluster.daemons.alive(HEAD)

    def pgid(n: Mapping[str, Any]) -> Optional[int]:
        if not n["alive"]:
            return None
        return (head.pid if head is not None else None) if n["is_head"] else pgids.get(n["node_id"])

    return [NodeInfo(name=n["name"], node_id=n["node_id"], alive=bool(n["alive"]), is_head=bool(n["is_head"]),
                     pgid=pgid(n), resources={k: float(v) for k, v in n["resources"].items()},
                     labels=dict(n["labels"])) for n in listed]


def wait_node_dead(directory: Optional[Path], node_id: str, *, timeout_s: float = 120.0) -> NodeInfo:
    """Wait until the head counts Ray node ``node_id`` dead (after :func:`kill_node`, its health checks must
    fail first: see :data:`FAST_FAILURE_DETECTION`); its last entry."""
    found: list[NodeInfo] = []

    def dead() -> bool:
        found[:] = [n for n in nodes(directory) if n.node_id == node_id]
        return bool(found) and not found[0].alive

    t0 = time.monotonic()
    wait_for(dead, what=f"the head to count node {node_id} dead", timeout_s=timeout_s)
    log.info("node %s (%s): dead for the head after %.1f s", found[0].name, node_id, time.monotonic() - t0)
    return found[0]


def cluster_processes(directory: Path) -> list[int]:
    """Pids of the live processes of the cluster in ``directory``: those whose command line names its temp
    folder and those in the sessions of its recorded daemons."""
    cluster = load_cluster(Path(directory).absolute())
    if cluster is None:
        return []
    pids = {s.pid for s in _strays(cluster.temp_dir)}
    records = [r for r in [*_node_records(cluster), cluster.daemons.record(HEAD)] if r is not None]
    for record in records:
        pids.update(s.pid for s in _session_members(record))
    return sorted(pids)


@contextlib.contextmanager
def local_ray_cluster(directory: Path, nodes: Mapping[str, NodeArgs], head_cpus: int = 1, *,
                      port: Optional[int] = None, object_store_mb: int = 100,
                      system_config: Optional[Mapping[str, Any]] = FAST_FAILURE_DETECTION,
                      timeout_s: float = 300.0) -> Iterator[RayCluster]:
    """A loopback head (``head_cpus`` CPUs) and worker ``nodes`` (name -> ``(num_cpus, resources, labels)``)
    in ``directory`` (keep it short: Ray's unix sockets live under it) for the body of the ``with``; always
    torn down afterwards, and :class:`ClusterError` when anything of it is left running (unless the body
    raised: then that is logged and the body's exception goes on). ``directory`` must not hold a running
    cluster already."""
    directory = Path(directory).absolute()
    existing = load_cluster(directory)
    if existing is not None and cluster_processes(directory):
        raise ClusterError(f"a Ray cluster already runs in {directory}; use another folder or `ray_local down`")
    specs = {name: as_spec(name, args) for name, args in nodes.items()}  # bad specs fail before anything starts
    t0 = time.monotonic()
    try:
        result = up(directory, port=port or ports.free_port(), num_cpus=head_cpus, object_store_mb=object_store_mb,
                    timeout_s=timeout_s, system_config=system_config)
        if specs:
            add_nodes(directory, specs, timeout_s=timeout_s)
        log.info("Ray cluster in %s: head + %d node(s) up in %.1f s", directory, len(specs), time.monotonic() - t0)
        yield result.cluster
    except BaseException:
        if not down(directory) or cluster_processes(directory):
            log.error("Ray cluster in %s: processes %s are still running after down", directory,
                      cluster_processes(directory))
        raise
    t0 = time.monotonic()
    if not down(directory) or cluster_processes(directory):
        raise ClusterError(f"Ray cluster in {directory}: processes {cluster_processes(directory)} are still running "
                           "after down")
    log.info("Ray cluster in %s: down in %.1f s", directory, time.monotonic() - t0)


def _exports(cluster: RayCluster) -> str:
    return "export " + " ".join(f"{k}={v}" for k, v in cluster.driver_vars().items())


def format_nodes(listed: list[NodeInfo]) -> str:
    """A table of ``listed``: name, state, node id, process group, resources, labels."""
    rows = [("NAME", "STATE", "NODE ID", "PGID", "RESOURCES", "LABELS")]
    for n in listed:
        resources = ",".join(f"{k}={v:g}" for k, v in sorted(n.resources.items())
                             if k not in ("memory", "object_store_memory") and not k.startswith("node:"))
        labels = ",".join(f"{k}={v}" for k, v in sorted(n.labels.items()) if not k.startswith("ray.io/"))
        rows.append((n.name or "?", "alive" if n.alive else "dead", n.node_id[:16],
                     "-" if n.pgid is None else str(n.pgid), resources or "-", labels or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.clusters.ray_local",
                                     description="A loopback Ray cluster on 127.0.0.1: a head, and worker nodes "
                                                 "that stand for hosts (docs/launchers.md).")
    parser.add_argument("action", choices=("up", "down", "status", "env", "add-node", "kill-node", "remove-node",
                                           "nodes"))
    parser.add_argument("name", nargs="?", default=None, help="the worker node (add-node, kill-node, remove-node)")
    parser.add_argument("--dir", type=Path, default=None,
                        help=f"the cluster's folder (default ${DIR_ENV} or /tmp/disagg-bench-ray-<uid>)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="the head's GCS port on 127.0.0.1 (up only)")
    parser.add_argument("--num-cpus", type=int, default=None,
                        help="CPUs Ray may schedule (up: default all; add-node: default 1)")
    parser.add_argument("--object-store-mb", type=int, default=None, help="object store size (default: Ray's)")
    parser.add_argument("--resources", default="", help='add-node: custom resources as JSON, e.g. \'{"host_b": 1}\'')
    parser.add_argument("--labels", default="", help="add-node: labels k=v,k2=v2 (disagg_node=NAME is added)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the head or node")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    directory = Path(args.dir or default_dir()).absolute()
    try:
        if args.action in ("add-node", "kill-node", "remove-node"):
            if args.name is None:
                raise ConfigError(f"{args.action}: the node's NAME is required")
            ray_node.check_name(args.name)
        elif args.name is not None:
            raise ConfigError(f"{args.action} takes no NAME (got {args.name!r})")
        if args.action == "up":
            result = up(directory, port=args.port, num_cpus=args.num_cpus, object_store_mb=args.object_store_mb,
                        timeout_s=args.timeout)
            what = "started" if result.started else "already up, nothing started"
            print(f"ray_local: {what}; head on {result.cluster.address} with {result.cluster.num_cpus} CPU(s)")
            print(_exports(result.cluster))
            return 0
        if args.action == "add-node":
            resources = ray_node.parse_resources(args.resources)
            labels = ray_node.parse_labels(args.labels)
            cluster = _require_up(directory)
            was_up = cluster.daemons.alive(node_daemon(args.name)) is not None
            info = add_node(directory, args.name, num_cpus=1 if args.num_cpus is None else args.num_cpus,
                            resources=resources, labels=labels, timeout_s=args.timeout)
            what = "already up, nothing started" if was_up else "started"
            print(f"ray_local: node {info.name} {what}; Ray node {info.node_id}, process group {info.pgid}")
            return 0
        if args.action == "kill-node":
            node_id = kill_node(directory, args.name)
            print(f"ray_local: node {args.name} killed (Ray node {node_id or 'never registered'})")
            return 0
        if args.action == "remove-node":
            ok = remove_node(directory, args.name)
            print(f"ray_local: node {args.name} " + ("removed" if ok else "still has processes running (see above)"))
            return 0 if ok else 1
        if args.action == "nodes":
            print(format_nodes(nodes(directory)))
            return 0
        cluster = load_cluster(directory)
        if args.action == "down":
            ok = down(directory)
            print("ray_local: stopped" if ok else "ray_local: some processes are still running (see above)")
            return 0 if ok else 1
        if args.action == "env":
            if cluster is None:
                print(f"error: no Ray cluster set up in {directory}; run `python -m tests.clusters.ray_local up`",
                      file=sys.stderr)
                return EXIT_NOT_UP
            print(_exports(cluster))
            return 0
        if cluster is None:
            print(f"no Ray cluster set up in {directory}")
            return EXIT_NOT_UP
        record = cluster.daemons.record(HEAD)
        state = "not started" if record is None else ("running" if record.alive() else "exited")
        where = "" if record is None else f" (process group {record.pid}, log {record.log})"
        print(f"ray head: {state}{where}\naddress: {cluster.address}\ntemp dir: {cluster.temp_dir}")
        for node in _node_records(cluster):
            print(f"node {node.name[len(NODE_PREFIX):]}: {'running' if node.alive() else 'exited'} "
                  f"(process group {node.pid}, log {node.log})")
        return 0 if is_up(cluster) else EXIT_NOT_UP
    except ConfigError as exc:
        print(f"error: ray_local {args.action}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ClusterError as exc:
        print(f"error: ray_local {args.action}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
