"""A server's nice value given to its whole session (kernels that share CPU by session) and to every one of its
threads: on a real child in a session of its own, and nothing done where the kernel does not group by session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from systems.launch.autogroup import autogroup_enabled, autogroup_nice, renice_threads, set_autogroup_nice
from systems.launch.processes import ManagedProcess

THREADED_CHILD = ("import os, threading, time\n"
                  "for _ in range(3): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                  "if os.fork() == 0: time.sleep(30)\n"
                  "time.sleep(30)\n")


def thread_nice_values(pids: list[int]) -> list[int]:
    """The nice value of every thread of ``pids`` (field 19 of /proc/<pid>/task/<tid>/stat)."""
    values = []
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            fields = task.joinpath("stat").read_text().rsplit(")", 1)[1].split()
            values.append(int(fields[16]))
    return values


def wait_for_threads(proc: ManagedProcess, threads: int, timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = proc.group_pids()
        if len(pids) == 3 and len(thread_nice_values(pids)) >= threads:  # the supervisor, the child, its fork
            return pids
        time.sleep(0.05)
    raise AssertionError(f"the child did not start its threads and its fork in {timeout_s} s")


@pytest.mark.integration
def test_the_session_of_a_child_gets_the_nice_value(tmp_path) -> None:
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        took = set_autogroup_nice(child.pid, 7)
        if autogroup_enabled():
            assert took and autogroup_nice(child.pid) == 7
            assert autogroup_nice(os.getpid()) != 7  # the harness's own session is untouched
        else:
            assert not took
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def test_nothing_is_written_without_session_grouping(tmp_path) -> None:
    switch = tmp_path / "sched_autogroup_enabled"
    switch.write_text("0\n")
    proc = tmp_path / "proc"
    (proc / "123").mkdir(parents=True)
    assert set_autogroup_nice(123, 10, switch=switch, proc=proc) is False
    assert not (proc / "123" / "autogroup").exists()
    assert autogroup_enabled(tmp_path / "missing") is False


def test_a_vanished_process_is_not_an_error(tmp_path) -> None:
    switch = tmp_path / "switch"
    switch.write_text("1")
    assert set_autogroup_nice(999_999, 10, switch=switch, proc=tmp_path) is False
    assert autogroup_nice(999_999, proc=tmp_path) is None


@pytest.mark.parametrize("text, value", [("/autogroup-12 nice 10\n", 10), ("/autogroup-3 nice -5", -5)])
def test_reading_the_session_nice_value(tmp_path, text, value) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "autogroup").write_text(text)
    assert autogroup_nice(42, proc=tmp_path) == value


@pytest.mark.integration
def test_every_thread_of_a_group_gets_the_nice_value_and_its_start_is_untouched(tmp_path) -> None:
    proc = ManagedProcess("threaded", runtime_dir=tmp_path / "run")
    proc.start([sys.executable, "-c", THREADED_CHILD], log_path=tmp_path / "child.log")
    try:
        pids = wait_for_threads(proc, threads=6)  # the supervisor's 1, the child's main + 3, the fork's 1
        assert set(thread_nice_values(pids)) == {os.getpriority(os.PRIO_PROCESS, 0)}  # started as we run
        assert proc.set_nice(9)
        assert set(thread_nice_values(pids)) == {9}
        if autogroup_enabled():
            assert autogroup_nice(proc.pid) == 9
    finally:
        proc.stop(grace_s=1.0)


def test_renicing_a_vanished_process_changes_nothing(tmp_path) -> None:
    assert renice_threads([999_999], 10, proc=tmp_path) == 0
