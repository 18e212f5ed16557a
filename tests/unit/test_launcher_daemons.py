"""The daemon records of the local clusters (``tests.clusters.daemons``): real child processes are started in
their own groups, recognised by pid and start time, and stopped by group; a record that no longer matches
its process is never acted on; failed commands and daemons that die are reported with their output."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from systems.launch import procfs
from tests.clusters import ray_local
from tests.clusters.daemons import ClusterError, DaemonSet, run_command, wait_for

pytestmark = pytest.mark.integration  # starts processes

# a leader that starts a child in its own group, then waits (the shape of `ray start --block`)
LEADER = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
          "print('child', 'started', flush=True); time.sleep(600)")  # the log's header repeats the command


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def wait_child_started(log: Path) -> None:
    wait_for(lambda: "child started" in log.read_text(), what="the child", timeout_s=120)


def test_started_daemon_is_recorded_and_stopped_by_its_group(tmp_path: Path):
    daemons = DaemonSet(tmp_path)
    record = daemons.start("d", [sys.executable, "-c", LEADER], tmp_path / "d.log")
    try:
        wait_child_started(tmp_path / "d.log")
        assert record.alive() and daemons.alive("d") == record
        assert procfs.proc_stat(record.pid).pgid == record.pid  # its own group
        members = record.members()
        assert len(members) == 2
        assert daemons.stop("d", grace_s=10)
        assert not any(procfs.is_running(pid) for pid in members)
        assert daemons.record("d") is None and not (tmp_path / "pids" / "d.json").exists()
    finally:
        kill_group(record.pid)


def test_leader_first_stop_lets_the_leader_end_its_group(tmp_path: Path):
    daemons = DaemonSet(tmp_path)
    record = daemons.start("d", [sys.executable, "-c", LEADER], tmp_path / "d.log")
    try:
        wait_child_started(tmp_path / "d.log")
        assert daemons.stop("d", grace_s=5, leader_first=True)  # the leader ignores nothing: SIGTERM ends it,
        assert not record.members()  # and what it leaves in the group is stopped after the grace period
    finally:
        kill_group(record.pid)


def test_record_whose_start_time_differs_is_not_acted_on(tmp_path: Path):
    daemons = DaemonSet(tmp_path)
    record = daemons.start("d", [sys.executable, "-c", "import time; time.sleep(600)"], tmp_path / "d.log")
    try:
        path = tmp_path / "pids" / "d.json"
        data = json.loads(path.read_text())
        data["start_time"] += 1  # a later process that reused the pid
        path.write_text(json.dumps(data))
        assert daemons.alive("d") is None
        assert daemons.stop("d", grace_s=1)
        assert procfs.is_running(record.pid, record.start_time)  # untouched
    finally:
        kill_group(record.pid)


def test_failed_command_names_itself_its_status_and_stderr():
    with pytest.raises(ClusterError) as info:
        run_command([sys.executable, "-c", "import sys; print('it broke', file=sys.stderr); sys.exit(3)"])
    assert "exit status 3" in str(info.value) and "it broke" in str(info.value)
    assert sys.executable in str(info.value)
    with pytest.raises(ClusterError, match="no-such-program-xyz not found"):
        run_command(["no-such-program-xyz"])


def test_waiting_on_a_daemon_that_dies_reports_its_log(tmp_path: Path):
    daemons = DaemonSet(tmp_path)
    record = daemons.start("d", [sys.executable, "-c", "print('bad config line 7'); raise SystemExit(1)"],
                           tmp_path / "d.log")
    with pytest.raises(ClusterError) as info:
        wait_for(lambda: False, what="d to answer", timeout_s=600, watch=[record])
    assert "d exited while waiting for d to answer" in str(info.value)
    assert "bad config line 7" in str(info.value)


def test_waiting_past_the_time_limit_says_what_it_waited_for():
    with pytest.raises(ClusterError, match="timed out after 0 s waiting for the moon"):
        wait_for(lambda: False, what="the moon", timeout_s=0.2)


def test_ray_down_stops_processes_left_with_the_clusters_folder_on_their_command_line(tmp_path: Path):
    """A worker that left the head's group is found by the cluster's temp folder in its command line."""
    (tmp_path / "cluster.json").write_text(json.dumps({"port": 1, "num_cpus": 1}))
    marker = tmp_path / "ray" / "session_x"
    stray = DaemonSet(tmp_path / "elsewhere").start(
        "stray", [sys.executable, "-c", "import time; time.sleep(600)", str(marker)], tmp_path / "stray.log")
    bystander = DaemonSet(tmp_path / "other").start(
        "other", [sys.executable, "-c", "import time; time.sleep(600)", "/tmp/not-this-cluster"], tmp_path / "o.log")
    try:
        assert ray_local.down(tmp_path)
        deadline = time.monotonic() + 60
        while procfs.is_running(stray.pid, stray.start_time) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not procfs.is_running(stray.pid, stray.start_time), _what_the_scan_saw(tmp_path, stray.pid)
        assert procfs.is_running(bystander.pid, bystander.start_time)
    finally:
        kill_group(stray.pid)
        kill_group(bystander.pid)


def _what_the_scan_saw(root: Path, pid: int) -> str:
    """Why a stray survived ``down`` (this test failed once in CI, not reproduced): its command line and state as
    /proc shows them now, and what the cluster's stray scan finds."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError as exc:
        cmdline = f"unreadable: {exc}".encode()
    return (f"stray {pid} still runs: cmdline {cmdline!r}, stat {procfs.proc_stat(pid)}; the scan of "
            f"{root / 'ray'} finds {[s.pid for s in ray_local._strays(root / 'ray')]}")
