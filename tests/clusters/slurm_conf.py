"""``slurm.conf`` and ``cgroup.conf`` for a single-node Slurm cluster on this machine.

Everything a cluster owns lives in one folder (:class:`SlurmLayout`): the configs, the munge key and
socket, slurmctld's state, slurmd's spool, pid files and logs. The daemons talk over 127.0.0.1 only
(``SlurmctldHost=localhost(127.0.0.1)``, ``NodeAddr=127.0.0.1``, ``CommunicationParameters=NoCtldInAddrAny,
NoInAddrAny``: slurmctld and slurmd bind the loopback address instead of every interface) on their own
ports, and authenticate through their own munged (``AuthInfo=socket=...``), so they neither need nor touch a
system-wide Slurm or munge.

It runs where there is no systemd and no writable cgroup tree (a container): processes are tracked through
``/proc`` (``ProctrackType=proctrack/linuxproc``), tasks are not bound (``TaskPlugin=task/none``), nothing
is gathered per job, and there is no accounting database, so ``sacct`` answers "accounting storage is
disabled" (submitit then watches its result files instead). The node's CPUs and memory are what
``slurmd -C`` reports for this machine (:func:`parse_slurmd_c`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tests.clusters.daemons import ClusterError

PARTITION = "local"
CLUSTER_NAME = "harness"


@dataclass(frozen=True)
class NodeHardware:
    """What ``slurmd -C`` reports for this host."""

    name: str
    cpus: int
    boards: int
    sockets_per_board: int
    cores_per_socket: int
    threads_per_core: int
    real_memory_mb: int


@dataclass(frozen=True)
class SlurmLayout:
    """Where a single-node cluster keeps everything, and the ports it listens on (127.0.0.1)."""

    root: Path
    ctld_port: int
    slurmd_port: int
    user: str
    partition: str = PARTITION

    @property
    def slurm_conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def cgroup_conf(self) -> Path:
        return self.root / "etc" / "cgroup.conf"

    @property
    def munge_dir(self) -> Path:
        """Key and seed (0700)."""
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def munge_run(self) -> Path:
        """The socket's folder: munged requires every folder on the way to be executable by all."""
        return self.root / "munge-run"

    @property
    def munge_socket(self) -> Path:
        return self.munge_run / "munge.socket"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def spool_dir(self) -> Path:
        return self.root / "spool"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"


_FIELD = re.compile(r"(\w+)=(\S+)")


def parse_slurmd_c(text: str) -> NodeHardware:
    """The node line of ``slurmd -C`` (``NodeName=vm CPUs=2 Boards=1 ... RealMemory=24105``)."""
    fields = dict(_FIELD.findall(text))
    try:
        return NodeHardware(name=fields["NodeName"], cpus=int(fields["CPUs"]), boards=int(fields.get("Boards", 1)),
                            sockets_per_board=int(fields["SocketsPerBoard"]),
                            cores_per_socket=int(fields["CoresPerSocket"]),
                            threads_per_core=int(fields["ThreadsPerCore"]), real_memory_mb=int(fields["RealMemory"]))
    except (KeyError, ValueError) as exc:
        raise ClusterError(f"cannot read the node's hardware from `slurmd -C` (missing or bad {exc}): {text.strip()!r}") \
            from exc


def render_slurm_conf(layout: SlurmLayout, hw: NodeHardware) -> str:
    """The whole ``slurm.conf`` of a one-node cluster whose node is ``hw``."""
    lines = [
        "# Written by `python -m tests.clusters.slurm_local up` for this machine; rewritten on each start.",
        f"ClusterName={CLUSTER_NAME}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={layout.ctld_port}",
        f"SlurmdPort={layout.slurmd_port}",
        "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
        f"SlurmUser={layout.user}",
        f"SlurmdUser={layout.user}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        "# no cgroups, no systemd: track processes through /proc, bind no tasks, gather nothing",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "ReturnToService=2",
        "SlurmdTimeout=120",
        "InactiveLimit=0",
        "KillWait=10",
        "MinJobAge=300",
        f"StateSaveLocation={layout.state_dir}",
        f"SlurmdSpoolDir={layout.spool_dir}",
        f"SlurmctldPidFile={layout.run_dir / 'slurmctld.pid'}",
        f"SlurmdPidFile={layout.run_dir / 'slurmd.pid'}",
        f"SlurmctldLogFile={layout.log_dir / 'slurmctld.log'}",
        f"SlurmdLogFile={layout.log_dir / 'slurmd.log'}",
        f"NodeName={hw.name} NodeAddr=127.0.0.1 CPUs={hw.cpus} Boards={hw.boards} "
        f"SocketsPerBoard={hw.sockets_per_board} CoresPerSocket={hw.cores_per_socket} "
        f"ThreadsPerCore={hw.threads_per_core} RealMemory={hw.real_memory_mb} State=UNKNOWN",
        f"PartitionName={layout.partition} Nodes={hw.name} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def render_cgroup_conf() -> str:
    """``cgroup.conf``: read by slurmd beside ``slurm.conf``; no plugin above uses cgroups."""
    return ("# Written by `python -m tests.clusters.slurm_local up`. ProctrackType=proctrack/linuxproc and\n"
            "# TaskPlugin=task/none use no cgroups, so this cluster also runs without systemd or a writable\n"
            "# cgroup tree (containers).\n"
            "CgroupPlugin=autodetect\n")


def write_configs(layout: SlurmLayout, hw: NodeHardware) -> None:
    """Write ``slurm.conf`` and ``cgroup.conf`` (atomically, readable by all: slurmd and clients read them)."""
    layout.slurm_conf.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((layout.slurm_conf, render_slurm_conf(layout, hw)), (layout.cgroup_conf, render_cgroup_conf())):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
