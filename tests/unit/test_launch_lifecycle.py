"""The shared deployment life cycle: the health check names a dead process and records the shared-memory
files running ones created after start-up, so a later cleanup can remove them."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from systems.contract import DeploymentError
from systems.launch import pidfile
from systems.launch.lifecycle import ProcessDeployment
from systems.launch.processes import ManagedProcess

pytestmark = pytest.mark.integration  # starts processes or opens sockets (tests/conftest.py)

LATE_SHM = textwrap.dedent("""
    import os, sys, time
    shm_dir, trigger = sys.argv[1], sys.argv[2]
    while not os.path.exists(trigger):
        time.sleep(0.02)
    f = open(os.path.join(shm_dir, "psm_late"), "wb")
    print("late", flush=True)
    time.sleep(600)
""")


class OneProcess(ProcessDeployment):
    def __init__(self, tmp: Path, cmd: list[str]) -> None:
        self.tmp, self.cmd = tmp, cmd

    def _bring_up(self) -> None:
        self.proc = self.watch("server", ManagedProcess("server", runtime_dir=self.tmp / "rt",
                                                        shm_dir=self.tmp / "shm"))
        self._stack.callback(self.proc.stop, 1.0)
        self.proc.start(self.cmd, log_path=self.tmp / "server.log")


def wait_until(condition, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def test_check_health_records_shm_files_created_after_start(tmp_path):
    (tmp_path / "shm").mkdir()
    trigger = tmp_path / "go"
    cmd = [sys.executable, "-c", LATE_SHM, str(tmp_path / "shm"), str(trigger)]
    with OneProcess(tmp_path, cmd) as deployment:
        deployment.check_health()
        [path] = pidfile.record_paths(tmp_path / "rt")
        assert pidfile.read_record(path).shm_files == ()
        trigger.write_text("")
        assert wait_until(lambda: "late" in deployment.proc.tail_log().splitlines())
        deployment.check_health()
        assert [Path(f.path).name for f in pidfile.read_record(path).shm_files] == ["psm_late"]
    assert not (tmp_path / "shm" / "psm_late").exists()  # removed at stop
    assert pidfile.record_paths(tmp_path / "rt") == []


def test_check_health_names_the_dead_process(tmp_path):
    (tmp_path / "shm").mkdir()
    cmd = [sys.executable, "-c", "import sys; print('bye'); sys.exit(4)"]
    with OneProcess(tmp_path, cmd) as deployment:
        assert wait_until(lambda: not deployment.proc.alive())
        with pytest.raises(DeploymentError, match=r"(?s)server died \(exit code 4\).*bye"):
            deployment.check_health()
