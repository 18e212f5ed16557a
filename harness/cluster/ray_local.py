"""A single-node Ray cluster on this machine's loopback, for ``hydra/launcher=ray_cluster`` and the tests.

::

    python -m harness.cluster.ray_local up        # ray start --head on 127.0.0.1, wait until it answers
    eval "$(python -m harness.cluster.ray_local env)"     # export RAY_ADDRESS and three more (below)
    python -m harness --multirun hydra/launcher=ray_cluster system=distserve,mooncake
    python -m harness.cluster.ray_local status    # exit 0 when the head runs and its port answers
    python -m harness.cluster.ray_local down      # stop exactly the processes `up` started

``up`` runs ``ray start --head --block --node-ip-address=127.0.0.1 --port=PORT --include-dashboard=false
--num-cpus=N --temp-dir=DIR/ray --disable-usage-stats`` (the ``ray`` of this interpreter's environment) in a
new process group with a pid record (:mod:`harness.cluster.daemons`) and waits for "Ray runtime started"
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

``down`` sends SIGTERM to ``ray start --block`` (which stops its processes in order), then stops what is
left of its process group, and finally any process whose command line names this cluster's temp folder
(workers that left the group). It never runs ``ray stop``: that kills every Ray process on the machine
whose name matches (``raylet``, ``gcs_server``, workers ...), whoever started them.

The folder is ``--dir``, else ``$DISAGG_RAY_DIR``, else ``/tmp/disagg-bench-ray-<uid>`` (kept short: Ray's
unix sockets live under it). Exit status: 0; 1 when a command fails (the message ends with the tail of
Ray's log); 3 from ``status`` (and ``env``) when the cluster is not up.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import secrets
import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from harness.cluster.daemons import ClusterError, DaemonSet, tail, wait_for
from systems.launch import groups, ports, procfs

log = logging.getLogger(__name__)

DIR_ENV = "DISAGG_RAY_DIR"
DEFAULT_PORT = 6390
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # keep 127.0.0.1 (see the module docstring)
HEAD = "ray_head"
STARTED_LINE = "Ray runtime started"
LAYOUT_FILE = "cluster.json"
GRACE_S = 30.0
EXIT_NOT_UP = 3


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
       object_store_mb: Optional[int] = None, timeout_s: float = 300.0) -> UpResult:
    """Start the loopback head in ``directory`` unless it runs (idempotent); wait until it answers."""
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


def down(directory: Optional[Path] = None) -> bool:
    """Stop the cluster in ``directory``; True when nothing of it runs any more."""
    directory = Path(directory or default_dir()).absolute()
    cluster = load_cluster(directory)
    if cluster is None:
        return True
    ok = cluster.daemons.stop(HEAD, GRACE_S, leader_first=True)
    for pgid in sorted({s.pgid for s in _strays(cluster.temp_dir)}):
        log.warning("stopping process group %d: it runs processes of this Ray cluster", pgid)
        ok = groups.stop_group(pgid, GRACE_S, "ray") and ok
    return ok and not _strays(cluster.temp_dir)


def _exports(cluster: RayCluster) -> str:
    return "export " + " ".join(f"{k}={v}" for k, v in cluster.driver_vars().items())


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.cluster.ray_local",
                                     description="A single-node Ray cluster on 127.0.0.1 (docs/launchers.md).")
    parser.add_argument("action", choices=("up", "down", "status", "env"))
    parser.add_argument("--dir", type=Path, default=None,
                        help=f"the cluster's folder (default ${DIR_ENV} or /tmp/disagg-bench-ray-<uid>)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="the head's GCS port on 127.0.0.1 (up only)")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs Ray may schedule (default: all)")
    parser.add_argument("--object-store-mb", type=int, default=None, help="object store size (default: Ray's)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the head (up only)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    directory = Path(args.dir or default_dir()).absolute()
    try:
        if args.action == "up":
            result = up(directory, port=args.port, num_cpus=args.num_cpus, object_store_mb=args.object_store_mb,
                        timeout_s=args.timeout)
            what = "started" if result.started else "already up, nothing started"
            print(f"ray_local: {what}; head on {result.cluster.address} with {result.cluster.num_cpus} CPU(s)")
            print(_exports(result.cluster))
            return 0
        cluster = load_cluster(directory)
        if args.action == "down":
            ok = down(directory)
            print("ray_local: stopped" if ok else "ray_local: some processes are still running (see above)")
            return 0 if ok else 1
        if args.action == "env":
            if cluster is None:
                print(f"error: no Ray cluster set up in {directory}; run `python -m harness.cluster.ray_local up`",
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
        return 0 if is_up(cluster) else EXIT_NOT_UP
    except ClusterError as exc:
        print(f"error: ray_local {args.action}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
