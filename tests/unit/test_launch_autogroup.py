"""A server's nice value given to its whole session (kernels that share CPU by session): on a real child in a
session of its own, and nothing done where the kernel does not group by session."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from systems.launch.autogroup import autogroup_enabled, autogroup_nice, set_autogroup_nice


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
