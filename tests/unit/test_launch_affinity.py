"""Binding every thread of a server's processes to its cores: CPU lists, and a real multi-threaded child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from systems.launch.affinity import parse_cpu_list, pin_threads


def test_cpu_lists() -> None:
    assert parse_cpu_list("0") == {0}
    assert parse_cpu_list("0-2,5") == {0, 1, 2, 5}
    for bad in ("", "2-1", "a", "0,,1", "-1"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


@pytest.mark.integration
def test_every_thread_of_a_child_is_bound(tmp_path) -> None:
    target = {min(os.sched_getaffinity(0))}
    code = "import threading, time\nfor _ in range(3): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(os.listdir(f"/proc/{child.pid}/task")) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tids) == 4
        assert pin_threads([child.pid, 999_999_999], target) == 4  # a vanished pid is skipped
        assert all(os.sched_getaffinity(tid) == target for tid in tids)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
