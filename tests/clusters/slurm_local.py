"""A single-node Slurm cluster on this machine, for ``hydra/launcher=slurm_local`` and the tests.

::

    python -m tests.clusters.slurm_local up       # install slurm-wlm + munge if missing, start, wait for the node
    eval "$(python -m tests.clusters.slurm_local env)"    # export SLURM_CONF for sbatch/squeue/submitit
    python -m harness --multirun hydra/launcher=slurm_local system=distserve,mooncake
    python -m tests.clusters.slurm_local status   # the daemons and `sinfo`; exit 0 when the node is usable
    python -m tests.clusters.slurm_local down     # cancel this cluster's jobs, stop its daemons

``up`` installs Debian's ``slurm-wlm`` and ``munge`` when a program is missing (``apt-get``, as root or
through ``sudo -n``; ``--no-install`` refuses instead), writes ``slurm.conf`` and ``cgroup.conf`` for this
host (:mod:`tests.clusters.slurm_conf`: node ``$(hostname -s)`` with the CPUs and memory ``slurmd -C``
reports, partition ``local``, loopback only, ports ``--port`` and ``--port``+1), generates a munge key,
starts munged, slurmctld and slurmd, each in its own process group with a pid record
(:mod:`tests.clusters.daemons`), and waits until ``sinfo`` shows the node idle; when a daemon exits or does
not get there in time, the daemons this call started are stopped again and the error ends with the tail
of the daemon's log (and ``sinfo``'s reason for the node). It is idempotent: with the cluster up it changes
nothing and says so; a daemon that died is started again with the same config.
Everything lives in one folder: ``--dir``, else ``$DISAGG_SLURM_DIR``, else ``/tmp/disagg-bench-slurm-<uid>``
(world-executable, as munged requires of its socket's path). ``down`` cancels the jobs queued or running
on this cluster, stops exactly the recorded process groups, then any ``slurmstepd`` of this cluster (one
holding a file of its folder open) that outlived slurmd; the folder (configs, logs) is kept.

Exit status: 0; 1 when a command fails (the message names it and ends with its stderr or the daemon's
log); 3 from ``status`` (and ``env``) when the cluster is not up.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pwd
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from systems.launch import groups, ports, procfs
from tests.clusters import packages
from tests.clusters.daemons import ClusterError, DaemonSet, run_command, wait_for
from tests.clusters.slurm_conf import SlurmLayout, parse_slurmd_c, write_configs

log = logging.getLogger(__name__)

DIR_ENV = "DISAGG_SLURM_DIR"
DEFAULT_PORT = 16817
DAEMONS = ("munged", "slurmctld", "slurmd")  # start order; stopped in reverse
PROGRAMS = ("munged", "munge", "slurmctld", "slurmd", "sinfo", "squeue", "sbatch", "scancel", "srun")
DEB_PACKAGES = ("slurm-wlm", "munge")
READY_STATES = ("idle", "mixed", "allocated", "completing")
LAYOUT_FILE = "cluster.json"
GRACE_S = 10.0
EXIT_NOT_UP = 3


def default_dir() -> Path:
    """``$DISAGG_SLURM_DIR``, else ``/tmp/disagg-bench-slurm-<uid>``."""
    return Path(os.environ.get(DIR_ENV) or f"/tmp/disagg-bench-slurm-{os.getuid()}")


@dataclass(frozen=True)
class Cluster:
    """A cluster folder with its layout (ports, user, node) as the last ``up`` wrote it."""

    layout: SlurmLayout
    node: str

    @property
    def daemons(self) -> DaemonSet:
        return DaemonSet(self.layout.root)

    def client_env(self, base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with ``SLURM_CONF`` naming this cluster's config."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.layout.slurm_conf)
        env["PATH"] = packages.with_sbin(env.get("PATH", ""))
        return env


def load_cluster(directory: Path) -> Optional[Cluster]:
    """The cluster an earlier ``up`` set up in ``directory`` (None: never set up there)."""
    try:
        data = json.loads((Path(directory) / LAYOUT_FILE).read_text(encoding="utf-8"))
        layout = SlurmLayout(root=Path(directory), ctld_port=int(data["ctld_port"]),
                             slurmd_port=int(data["slurmd_port"]), user=str(data["user"]),
                             partition=str(data["partition"]))
        return Cluster(layout=layout, node=str(data["node"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_cluster(cluster: Cluster) -> None:
    layout = cluster.layout
    data = {"ctld_port": layout.ctld_port, "slurmd_port": layout.slurmd_port, "user": layout.user,
            "partition": layout.partition, "node": cluster.node}
    path = layout.root / LAYOUT_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def node_state(cluster: Cluster) -> str:
    """``sinfo``'s state of the node (``idle``, ``down*``, ...); '' when slurmctld does not answer."""
    proc = run_command(["sinfo", "-h", "-N", "-n", cluster.node, "-o", "%T"], env=cluster.client_env(),
                       timeout_s=30, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def node_reason(cluster: Cluster) -> str:
    proc = run_command(["sinfo", "-h", "-N", "-n", cluster.node, "-o", "%T %E"], env=cluster.client_env(),
                       timeout_s=30, check=False)
    return (proc.stdout or proc.stderr).strip()


def is_up(cluster: Optional[Cluster]) -> bool:
    """Every daemon runs and the node takes jobs."""
    if cluster is None or any(cluster.daemons.alive(name) is None for name in DAEMONS):
        return False
    return node_state(cluster) in READY_STATES


def _prepare(directory: Path, port: int, partition: str) -> Cluster:
    """Folders, munge key, configs for a cluster none of whose daemons runs."""
    hw = parse_slurmd_c(run_command([packages.program("slurmd"), "-C"], timeout_s=60).stdout)
    layout = SlurmLayout(root=directory, ctld_port=port, slurmd_port=port + 1,
                         user=pwd.getpwuid(os.getuid()).pw_name, partition=partition)
    for folder, mode in ((layout.root, 0o755), (layout.munge_dir, 0o700), (layout.munge_run, 0o755),
                         (layout.state_dir, 0o755), (layout.spool_dir, 0o755), (layout.run_dir, 0o755),
                         (layout.log_dir, 0o755)):
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, mode)
    if not layout.munge_key.exists():
        fd = os.open(layout.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as key:
            key.write(os.urandom(1024))
    for p in (layout.ctld_port, layout.slurmd_port):
        if not ports.port_is_free(p):
            holder = ports.describe_port_holder(p)
            raise ClusterError(f"port {p} on 127.0.0.1 is in use{' by ' + holder if holder else ''}; "
                               f"pick others with --port")
    write_configs(layout, hw)
    cluster = Cluster(layout=layout, node=hw.name)
    _save_cluster(cluster)
    return cluster


def _command(cluster: Cluster, name: str) -> list[str]:
    layout = cluster.layout
    if name == "munged":
        return [packages.program("munged"), "--foreground", f"--socket={layout.munge_socket}",
                f"--key-file={layout.munge_key}", f"--pid-file={layout.run_dir / 'munged.pid'}",
                f"--log-file={layout.log_dir / 'munged.log'}", f"--seed-file={layout.munge_dir / 'munged.seed'}"]
    if name == "slurmctld":
        return [packages.program("slurmctld"), "-D", "-f", str(layout.slurm_conf)]
    return [packages.program("slurmd"), "-D", "-N", cluster.node, "-f", str(layout.slurm_conf)]


def _ready(cluster: Cluster, name: str) -> bool:
    env = cluster.client_env()
    if name == "munged":
        if not cluster.layout.munge_socket.exists():
            return False
        return run_command(["munge", "-n", "-S", str(cluster.layout.munge_socket)], env=env, timeout_s=30,
                           check=False).returncode == 0
    if name == "slurmctld":
        return run_command(["sinfo", "-h"], env=env, timeout_s=30, check=False).returncode == 0
    return node_state(cluster) in READY_STATES


@dataclass(frozen=True)
class UpResult:
    """What ``up`` found and did."""

    cluster: Cluster
    started: tuple[str, ...]  # daemons this call started (empty: the cluster was already up)


def up(directory: Optional[Path] = None, *, port: int = DEFAULT_PORT, partition: str = "local",
       timeout_s: float = 180.0, install: bool = True) -> UpResult:
    """Bring the cluster in ``directory`` up (idempotent) and wait until its node takes jobs."""
    directory = Path(directory or default_dir()).absolute()
    packages.ensure_programs(PROGRAMS, DEB_PACKAGES, install=install)
    cluster = load_cluster(directory)
    alive = {} if cluster is None else {n: cluster.daemons.alive(n) for n in DAEMONS}
    if cluster is not None and all(alive.values()) and is_up(cluster):
        return UpResult(cluster, ())
    if cluster is None or not any(alive.values()):
        cluster = _prepare(directory, port, partition)
    started: list[str] = []
    records = []
    try:
        for name in DAEMONS:
            record = cluster.daemons.alive(name)
            if record is None:
                record = cluster.daemons.start(name, _command(cluster, name), cluster.layout.log_dir / f"{name}.out",
                                               env=cluster.client_env())
                started.append(name)
            records.append(record)
            what = "the node to be idle in `sinfo`" if name == "slurmd" else f"{name} to answer"
            try:
                wait_for(lambda n=name: _ready(cluster, n), what=what, timeout_s=timeout_s, watch=records)
            except ClusterError as exc:
                if name == "slurmd":
                    raise ClusterError(f"{exc}\nsinfo: {node_reason(cluster)}") from exc
                raise
    except ClusterError:
        for name in reversed(started):  # a failed `up` leaves running only what was running before it
            cluster.daemons.stop(name, GRACE_S)
        raise
    return UpResult(cluster, tuple(started))


def _our_stepds(root: Path) -> list[procfs.ProcStat]:
    """``slurmstepd`` processes of this cluster: those holding a file under its folder open (its log)."""
    found = []
    for stat in procfs.all_stats():
        try:
            if Path(f"/proc/{stat.pid}/comm").read_text().strip() != "slurmstepd":
                continue
            targets = [os.readlink(fd) for fd in Path(f"/proc/{stat.pid}/fd").iterdir()]
        except OSError:
            continue
        if any(t.startswith(str(root) + os.sep) for t in targets):
            found.append(stat)
    return found


def cancel_jobs(cluster: Cluster, timeout_s: float = 60.0) -> None:
    """Cancel every job of this cluster and wait until the queue is empty."""
    env = cluster.client_env()
    jobs = run_command(["squeue", "-h", "-o", "%A"], env=env, timeout_s=30).stdout.split()
    if not jobs:
        return
    log.info("cancelling %d job(s): %s", len(jobs), " ".join(jobs))
    run_command(["scancel", *jobs], env=env, timeout_s=30)
    wait_for(lambda: not run_command(["squeue", "-h", "-o", "%A"], env=env, timeout_s=30, check=False).stdout.split(),
             what="the cancelled jobs to leave the queue", timeout_s=timeout_s)


def down(directory: Optional[Path] = None) -> bool:
    """Stop the cluster in ``directory``: its jobs, its daemons, its leftover job steps. True when nothing
    of it runs any more."""
    directory = Path(directory or default_dir()).absolute()
    cluster = load_cluster(directory)
    if cluster is None:
        return True
    if cluster.daemons.alive("slurmctld") is not None and cluster.daemons.alive("munged") is not None:
        try:
            cancel_jobs(cluster)
        except ClusterError as exc:
            log.warning("could not cancel the jobs (%s); stopping the daemons anyway", exc)
    ok = True
    for name in reversed(DAEMONS):
        ok = cluster.daemons.stop(name, GRACE_S) and ok
    for stepd in _our_stepds(directory):
        session = {s.pgid for s in procfs.all_stats() if s.sid == stepd.sid and not s.zombie}
        for pgid in sorted(session):
            log.warning("stopping process group %d left by slurmstepd %d", pgid, stepd.pid)
            ok = groups.stop_group(pgid, GRACE_S, "slurmstepd") and ok
    return ok


def status_lines(cluster: Optional[Cluster], directory: Path) -> list[str]:
    if cluster is None:
        return [f"no cluster set up in {directory}"]
    lines = []
    for name in DAEMONS:
        record = cluster.daemons.record(name)
        state = "not started" if record is None else ("running" if record.alive() else "exited")
        pid = "" if record is None else f" (process group {record.pid}, log {record.log})"
        lines.append(f"{name}: {state}{pid}")
    if cluster.daemons.alive("slurmctld"):
        proc = run_command(["sinfo"], env=cluster.client_env(), timeout_s=30, check=False)
        lines.append((proc.stdout or proc.stderr).rstrip())
    lines.append(f"SLURM_CONF={cluster.layout.slurm_conf}")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.clusters.slurm_local",
                                     description="A single-node Slurm cluster on this machine (docs/launchers.md).")
    parser.add_argument("action", choices=("up", "down", "status", "env"))
    parser.add_argument("--dir", type=Path, default=None,
                        help=f"the cluster's folder (default ${DIR_ENV} or /tmp/disagg-bench-slurm-<uid>)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="slurmctld's port on 127.0.0.1; slurmd takes the next one (up only)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each daemon (up only)")
    parser.add_argument("--no-install", action="store_true", help="fail instead of installing missing packages")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    directory = Path(args.dir or default_dir()).absolute()
    try:
        if args.action == "up":
            result = up(directory, port=args.port, timeout_s=args.timeout, install=not args.no_install)
            what = f"started {', '.join(result.started)}" if result.started else "already up, nothing started"
            print(f"slurm_local: {what}; node {result.cluster.node} idle in partition "
                  f"{result.cluster.layout.partition}")
            print(f"export SLURM_CONF={result.cluster.layout.slurm_conf}")
            return 0
        cluster = load_cluster(directory)
        if args.action == "down":
            ok = down(directory)
            print("slurm_local: stopped" if ok else "slurm_local: some processes are still running (see above)")
            return 0 if ok else 1
        if args.action == "env":
            if cluster is None:
                print(f"error: no cluster set up in {directory}; run `python -m tests.clusters.slurm_local up`",
                      file=sys.stderr)
                return EXIT_NOT_UP
            print(f"export SLURM_CONF={cluster.layout.slurm_conf}")
            return 0
        print("\n".join(status_lines(cluster, directory)))
        return 0 if is_up(cluster) else EXIT_NOT_UP
    except ClusterError as exc:
        print(f"error: slurm_local {args.action}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
