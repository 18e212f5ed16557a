"""Servers a dead harness left behind: find them from their pid files, and stop them.

Every server ``ManagedProcess`` starts has a pid file (:mod:`systems.launch.pidfile`). A record is a
*leftover* when the harness that wrote it is no longer running (its pid is gone, or now belongs to a
process with another start time). A leftover whose group leader still runs with the recorded pid and
start time is stopped by process group (SIGTERM, grace, SIGKILL); then the shared-memory files recorded
for it are removed where no live process uses them, and the pid file is deleted. A record whose leader is
gone and whose group is empty is only cleaned up. Records of a live harness are never touched, nor
records written in another boot or pid namespace, nor a group whose leader is gone but which still has
members (its pgid is not proof enough; those are reported with their pids for a person to judge).

``ManagedProcess.start`` runs :func:`stop_leftovers` before each start, with a warning naming what it
stopped. From a shell::

    python -m systems.launch.leftovers          # list this user's leftover servers
    python -m systems.launch.leftovers --stop   # stop them (and clean their pid and shared-memory files)

(``--dir`` picks another pid-file directory, ``--grace`` the seconds between SIGTERM and SIGKILL.)
Exit status: 0, or 1 when a leftover could not be stopped.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from systems.launch import groups, pidfile, procfs, shm

logger = logging.getLogger(__name__)

RUNNING = "running"  # the recorded leader runs: stop the group
GONE = "gone"  # nothing of it runs: only clean up
MEMBERS_LEFT = "leader gone, members left"  # reported, never signalled


@dataclass(frozen=True)
class Leftover:
    """A pid file whose harness is dead, and what of its group still runs."""

    path: Path
    record: pidfile.ProcessRecord
    state: str
    members: tuple[int, ...]

    def describe(self) -> str:
        r = self.record
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started_at))
        return (f"{r.name} (group {r.pgid}, {self.state}, pids {list(self.members)}, started {started} by "
                f"harness pid {r.owner_pid} of {r.user}, log {r.log_path}): {' '.join(r.command)}")


def find_leftovers(directory: Optional[Path] = None) -> list[Leftover]:
    """The leftovers recorded in ``directory`` (default :func:`pidfile.runtime_dir`)."""
    directory = pidfile.runtime_dir() if directory is None else Path(directory)
    found: list[Leftover] = []
    for path in pidfile.record_paths(directory):
        try:
            record = pidfile.read_record(path)
        except (OSError, ValueError) as exc:
            logger.warning("skipping %s", exc)
            continue
        if not record.same_host_view():
            logger.debug("%s: written in another boot or pid namespace; left alone", path)
            continue
        if record.owner_alive():
            continue
        members = tuple(sorted(procfs.group_members(record.pgid)))
        if record.leader_running():
            state = RUNNING
        elif members:
            state = MEMBERS_LEFT
        else:
            state = GONE
        found.append(Leftover(path, record, state, members))
    return found


def stop_leftover(leftover: Leftover, grace_s: float = 10.0, shm_dir: Path = shm.SHM_DIR) -> bool:
    """Stop one leftover (see the module docstring); True when nothing of it is left running."""
    record = leftover.record
    if leftover.state == MEMBERS_LEFT:
        return False
    if leftover.state == RUNNING:
        if not record.leader_running():  # re-checked right before signalling
            if procfs.group_members(record.pgid):
                return False
        elif not groups.stop_group(record.pgid, grace_s, f"leftover {record.name}"):
            return False
    shm.remove_recorded({Path(f.path): f.inode for f in record.shm_files}, shm_dir)
    pidfile.remove_record(leftover.path)
    return True


def stop_leftovers(directory: Optional[Path] = None, grace_s: float = 10.0,
                   shm_dir: Path = shm.SHM_DIR) -> list[Leftover]:
    """Stop every leftover in ``directory``, with a warning naming each running one; returns those found."""
    leftovers = find_leftovers(directory)
    for leftover in leftovers:
        if leftover.state == RUNNING:
            logger.warning("stopping a server a dead harness left running: %s", leftover.describe())
        elif leftover.state == MEMBERS_LEFT:
            logger.warning("a dead harness left processes whose group leader is gone; not touched "
                           "(check them, and stop them yourself if they are yours): %s", leftover.describe())
        if not stop_leftover(leftover, grace_s, shm_dir) and leftover.state != MEMBERS_LEFT:
            logger.error("could not stop leftover %s", leftover.describe())
    return leftovers


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systems.launch.leftovers",
                                     description="List (or --stop) servers that a dead harness left running.")
    parser.add_argument("--stop", action="store_true", help="stop them and clean their pid and shm files")
    parser.add_argument("--dir", type=Path, default=None, help="pid-file directory (default: the runtime dir)")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    directory = pidfile.runtime_dir() if args.dir is None else args.dir
    leftovers = find_leftovers(directory)
    if not leftovers:
        print(f"no leftover servers recorded in {directory}")
        return 0
    failed = 0
    for leftover in leftovers:
        print(leftover.describe())
        if args.stop:
            ok = stop_leftover(leftover, args.grace)
            failed += not ok
            print(f"  -> {'stopped' if ok else 'NOT stopped'}")
    if not args.stop:
        print(f"{len(leftovers)} leftover(s); run with --stop to stop them")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
