"""Pid files and leftovers: what a dead harness left is stopped by group; nothing else is touched."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from systems.launch import leftovers, pidfile, procfs
from systems.launch.processes import ManagedProcess

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def wait_until(condition, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def start_group() -> subprocess.Popen:
    """A process leading its own group (a stand-in for a server's supervisor) with one child in it."""
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
            " print('up', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "up"
    assert wait_until(lambda: len(procfs.group_members(proc.pid)) == 2)
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the group of ``proc`` while it is still ours (not reaped, so its pid is not reused)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def dead_owner() -> tuple[int, int]:
    """(pid, start time) of a process that has exited."""
    proc = subprocess.Popen(SLEEPER, start_new_session=True)
    started = procfs.start_time(proc.pid)
    kill_group(proc)
    assert started is not None and not procfs.is_running(proc.pid, started)
    return proc.pid, started


def record_for(proc: subprocess.Popen, owner: tuple[int, int], **changes) -> pidfile.ProcessRecord:
    record = pidfile.new_record("srv", proc.pid, ["srv", "--port", "1"], Path("srv.log"))
    return dataclasses.replace(record, owner_pid=owner[0], owner_start_time=owner[1], **changes)


@pytest.mark.integration
def test_leftover_of_a_dead_harness_is_stopped_by_group(tmp_path, dead_owner):
    proc = start_group()
    try:
        members = procfs.group_members(proc.pid)
        path = pidfile.write_record(pidfile.new_path(tmp_path, "srv"), record_for(proc, dead_owner))
        found = leftovers.find_leftovers(tmp_path)
        assert [(f.path, f.state) for f in found] == [(path, leftovers.RUNNING)]
        assert "srv --port 1" in found[0].describe()
        leftovers.stop_leftovers(tmp_path, grace_s=5)
        proc.wait(timeout=60)
        assert wait_until(lambda: not any(procfs.is_running(p) for p in members))
        assert not path.exists()
    finally:
        kill_group(proc)


@pytest.mark.integration
def test_a_live_harness_servers_are_never_touched(tmp_path):
    proc = start_group()
    try:
        me = (os.getpid(), procfs.start_time(os.getpid()))
        path = pidfile.write_record(pidfile.new_path(tmp_path, "srv"), record_for(proc, me))
        assert leftovers.find_leftovers(tmp_path) == []
        leftovers.stop_leftovers(tmp_path, grace_s=1)
        assert path.exists() and procfs.is_running(proc.pid) and len(procfs.group_members(proc.pid)) == 2
    finally:
        kill_group(proc)


@pytest.mark.integration
def test_a_pid_with_another_start_time_is_not_touched(tmp_path, dead_owner):
    proc = start_group()
    try:
        record = record_for(proc, dead_owner)
        path = pidfile.write_record(pidfile.new_path(tmp_path, "srv"),
                                    dataclasses.replace(record, start_time=record.start_time - 1))
        found = leftovers.find_leftovers(tmp_path)
        assert [f.state for f in found] == [leftovers.MEMBERS_LEFT]
        assert leftovers.stop_leftover(found[0], grace_s=1) is False
        leftovers.stop_leftovers(tmp_path, grace_s=1)
        assert path.exists() and procfs.is_running(proc.pid) and len(procfs.group_members(proc.pid)) == 2
    finally:
        kill_group(proc)


@pytest.mark.integration
def test_records_from_another_boot_are_left_alone(tmp_path, dead_owner):
    proc = start_group()
    try:
        record = record_for(proc, dead_owner, boot_id="another-boot")
        path = pidfile.write_record(pidfile.new_path(tmp_path, "srv"), record)
        assert leftovers.find_leftovers(tmp_path) == []
        assert path.exists() and procfs.is_running(proc.pid)
    finally:
        kill_group(proc)


@pytest.mark.integration
def test_gone_leftover_only_cleans_its_pid_and_shm_files(tmp_path, dead_owner):
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    theirs = shm_dir / "psm_left"
    theirs.write_bytes(b"x")
    other = shm_dir / "psm_other"
    other.write_bytes(b"x")
    proc = subprocess.Popen(SLEEPER, start_new_session=True)
    record = record_for(proc, dead_owner)
    kill_group(proc)
    record = pidfile.with_shm_files(record, [pidfile.ShmFile(str(theirs), theirs.stat().st_ino)])
    path = pidfile.write_record(pidfile.new_path(tmp_path, "srv"), record)
    found = leftovers.stop_leftovers(tmp_path, shm_dir=shm_dir)
    assert [f.state for f in found] == [leftovers.GONE]
    assert not path.exists() and not theirs.exists() and other.exists()


def test_invalid_pid_file_is_skipped_with_its_name(tmp_path, caplog):
    bad = tmp_path / "broken-1.json"
    bad.write_text("{not json")
    assert leftovers.find_leftovers(tmp_path) == []
    assert str(bad) in caplog.text and bad.exists()


@pytest.mark.integration
def test_managed_process_start_stops_leftovers_first(tmp_path, dead_owner):
    proc = start_group()
    runtime = tmp_path / "rt"
    started = None
    try:
        pidfile.ensure_runtime_dir(runtime)
        path = pidfile.write_record(pidfile.new_path(runtime, "old"), record_for(proc, dead_owner))
        started = ManagedProcess("new", runtime_dir=runtime).start(SLEEPER, log_path=tmp_path / "new.log")
        proc.wait(timeout=60)  # the old leader was stopped
        assert not path.exists()
        records = [pidfile.read_record(p) for p in pidfile.record_paths(runtime)]
        assert [(r.name, r.pid, r.owner_pid) for r in records] == [("new", started.pid, os.getpid())]
        assert records[0].command == tuple(SLEEPER)
        started.stop(grace_s=1)
        assert pidfile.record_paths(runtime) == []  # a clean stop removes its pid file
    finally:
        kill_group(proc)
        if started is not None:
            started.stop(grace_s=0.1)


@pytest.mark.integration
def test_cli_lists_then_stops(tmp_path, dead_owner, capsys):
    proc = start_group()
    try:
        path = pidfile.write_record(pidfile.new_path(tmp_path, "srv"), record_for(proc, dead_owner))
        assert leftovers.main(["--dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "srv (group" in out and "--stop" in out and path.exists() and procfs.is_running(proc.pid)
        assert leftovers.main(["--dir", str(tmp_path), "--stop", "--grace", "5"]) == 0
        assert "stopped" in capsys.readouterr().out
        proc.wait(timeout=60)
        assert not path.exists()
        assert leftovers.main(["--dir", str(tmp_path)]) == 0
        assert "no leftover" in capsys.readouterr().out
    finally:
        kill_group(proc)


def test_runtime_dir_is_private_and_refuses_a_symlink(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "disagg-bench-link"
    link.symlink_to(target)
    with pytest.raises(pidfile.RuntimeDirError, match="symbolic link"):
        pidfile.ensure_runtime_dir(link / "processes")
    made = pidfile.ensure_runtime_dir(tmp_path / "disagg-bench-x" / "processes")
    assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o700
    assert (made.parent.stat().st_mode & 0o777) == 0o700


def test_runtime_dir_choice():
    assert pidfile.runtime_dir({pidfile.RUNTIME_DIR_ENV: "/x/y"}) == Path("/x/y")
    assert pidfile.runtime_dir({}).name == "processes"
    assert f"disagg-bench-{os.getuid()}" in str(pidfile.runtime_dir({}))


def test_record_round_trips_through_json(tmp_path):
    record = pidfile.new_record("me", os.getpid(), ["a", "b c"], Path("x.log"))
    record = pidfile.with_shm_files(record, [pidfile.ShmFile("/dev/shm/psm_1", 7)])
    path = pidfile.write_record(tmp_path / "me.json", record)
    assert pidfile.read_record(path) == record
    assert json.loads(path.read_text())["command"] == ["a", "b c"]
