"""Servers die with their harness: a SIGKILLed harness takes its whole server tree (grandchildren too)
with it, and their pid file and shared-memory files are cleaned up; the supervisor mirrors exit codes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from systems.launch import pidfile, procfs
from systems.launch.processes import ManagedProcess
from systems.launch.supervisor import supervisor_command

REPO = Path(__file__).resolve().parents[2]

# A server that forks a grandchild (same group); both open a file in the shm directory; prints pids.
SERVER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    shm_dir, mode = sys.argv[1], sys.argv[2]
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    f = open(os.path.join(shm_dir, "psm_server"), "wb")
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'wb'); "
                              "print('grandchild up', flush=True); time.sleep(600)",
                              os.path.join(shm_dir, "sem.mp-grandchild")])
    while not os.path.exists(os.path.join(shm_dir, "sem.mp-grandchild")):
        time.sleep(0.01)
    print("pids", os.getpid(), child.pid, flush=True)
    time.sleep(600)
""")

# The harness stand-in: starts the server through ManagedProcess (optionally from a thread that then
# ends), waits for its pids, records its shm files, tells the test, and sleeps until killed.
HARNESS = textwrap.dedent("""
    import sys, threading, time
    from pathlib import Path
    from systems.launch.processes import ManagedProcess
    server, shm_dir, runtime, log, mode, from_thread = sys.argv[1:7]
    proc = ManagedProcess("server", grace_s=1.0, runtime_dir=Path(runtime), shm_dir=Path(shm_dir))
    def start_and_wait():
        proc.start([sys.executable, "-c", server, shm_dir, mode], log_path=Path(log))
        while not any(l.startswith("pids ") for l in proc.tail_log().splitlines()):
            assert proc.alive(), proc.tail_log()
            time.sleep(0.02)
    if from_thread == "thread":
        t = threading.Thread(target=start_and_wait)
        t.start()
        t.join()  # the thread that forked the supervisor has ended, after the supervisor was up
    else:
        start_and_wait()
    pids = [l for l in proc.tail_log().splitlines() if l.startswith("pids ")][0].split()[1:]
    proc.note_shm_files()
    print("tree", proc.pid, *pids, flush=True)
    time.sleep(600)
""")


def wait_until(condition, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def kill_tree(leader: int, started: int) -> None:
    """SIGKILL the group led by ``leader``, only while that same process (same start time) leads it."""
    if procfs.is_running(leader, started):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader, signal.SIGKILL)


@pytest.mark.integration
@pytest.mark.parametrize("mode,from_thread", [("polite", "main"), ("stubborn", "main"), ("polite", "thread")])
def test_sigkilled_harness_takes_its_server_tree_along(tmp_path, mode, from_thread):
    shm_dir, runtime = tmp_path / "shm", tmp_path / "rt"
    shm_dir.mkdir()
    before = shm_dir / "psm_before"  # existed before the start: never removed
    before.write_bytes(b"x")
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, SERVER, str(shm_dir), str(runtime), str(tmp_path / "server.log"), mode,
         from_thread], cwd=REPO, stdout=subprocess.PIPE, text=True, start_new_session=True)
    tree: list[int] = []
    leader_started = None
    try:
        line = harness.stdout.readline()
        assert line.startswith("tree "), (line, (tmp_path / "server.log").read_text())
        tree = [int(x) for x in line.split()[1:]]
        leader = tree[0]
        leader_started = procfs.start_time(leader)
        assert all(procfs.is_running(p) for p in tree)
        assert {procfs.proc_stat(p).pgid for p in tree} == {leader} != {os.getpgid(harness.pid)}
        [record_path] = pidfile.record_paths(runtime)
        record = pidfile.read_record(record_path)
        assert record.owner_pid == harness.pid and record.pgid == leader
        assert {Path(f.path).name for f in record.shm_files} == {"psm_server", "sem.mp-grandchild"}
        if from_thread == "thread":  # the forking thread ended: the server must still run
            assert wait_until(lambda: "thread that started this ended" in (tmp_path / "server.log").read_text())
            time.sleep(2.5)  # more than the supervisor's 1 s check of its parent
            assert all(procfs.is_running(p) for p in tree)
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait(timeout=60)
        assert wait_until(lambda: not any(procfs.is_running(p) for p in tree)), \
            (tree, (tmp_path / "server.log").read_text())
        assert wait_until(lambda: not record_path.exists())
        assert sorted(p.name for p in shm_dir.iterdir()) == ["psm_before"]
        log = (tmp_path / "server.log").read_text()
        assert f"harness pid {harness.pid} is gone" in log
        if mode == "stubborn":
            assert "sending SIGKILL" in log
    finally:
        if harness.poll() is None:
            os.killpg(harness.pid, signal.SIGKILL)
        harness.wait()
        if tree:
            kill_tree(tree[0], leader_started)


@pytest.mark.integration
def test_supervisor_does_not_start_when_its_harness_is_already_gone(tmp_path):
    marker = tmp_path / "started"
    cmd = supervisor_command([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], parent_pid=1, grace_s=1,
                             pid_file=None)
    # Its parent is this test, not pid 1: as when the harness died before prctl and it was re-parented.
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and not marker.exists()
    assert "is gone before the start" in done.stderr


@pytest.mark.integration
@pytest.mark.parametrize("cmd,expected", [(["true"], 0), (["false"], 1)])
def test_a_command_that_exits_at_once_is_reaped_and_mirrored(tmp_path, cmd, expected):
    proc = ManagedProcess("instant", runtime_dir=tmp_path / "rt").start(cmd, log_path=tmp_path / "i.log")
    try:
        assert wait_until(lambda: not proc.alive()), proc.tail_log()
        assert proc.returncode == expected, proc.tail_log()
        assert "Traceback" not in proc.tail_log()
    finally:
        proc.stop(grace_s=0.1)


@pytest.mark.parametrize("code,expected", [("sys.exit(3)", 3), ("sys.exit(0)", 0),
                                           ("os.kill(os.getpid(), signal.SIGUSR2); time.sleep(60)", -signal.SIGUSR2)])
@pytest.mark.integration
def test_exit_status_is_mirrored(tmp_path, code, expected):
    proc = ManagedProcess("exit", runtime_dir=tmp_path / "rt").start(
        [sys.executable, "-c", f"import os, signal, sys, time; {code}"], log_path=tmp_path / "e.log")
    try:
        assert wait_until(lambda: not proc.alive()), proc.tail_log()
        assert proc.returncode == expected
    finally:
        proc.stop(grace_s=0.1)
    assert pidfile.record_paths(tmp_path / "rt") == []


@pytest.mark.integration
def test_stop_reaches_the_server_under_the_supervisor(tmp_path):
    proc = ManagedProcess("sleeper", runtime_dir=tmp_path / "rt").start(
        [sys.executable, "-c", "import os, time; print('pid', os.getpid(), flush=True); time.sleep(600)"],
        log_path=tmp_path / "s.log")
    try:
        assert wait_until(lambda: "pid " in proc.tail_log())
        server = int(proc.tail_log().split("pid ")[-1].split()[0])
        assert server != proc.pid and procfs.proc_stat(server).pgid == proc.pgid
        assert set(proc.group_pids()) == {proc.pid, server}
        assert proc.stop(grace_s=5) == -signal.SIGTERM
        assert not procfs.is_running(server)
    finally:
        proc.stop(grace_s=0.1)


@pytest.mark.integration
def test_an_orphan_of_the_tree_is_stopped_and_reaped_before_the_supervisor_exits(tmp_path):
    # the server leaves a grandchild behind and exits (as vLLM's workers outlive a dead engine core): the
    # supervisor adopts it (child subreaper), stops it and reaps it, so no process or zombie outlives the tree
    server = ("import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
              "print('orphan', c.pid, flush=True)")
    proc = ManagedProcess("orphaning", runtime_dir=tmp_path / "rt").start([sys.executable, "-c", server],
                                                                          log_path=tmp_path / "o.log")
    try:
        assert wait_until(lambda: "orphan " in proc.tail_log(), 120), proc.tail_log()
        orphan = int(proc.tail_log().split("orphan ")[-1].split()[0])
        assert wait_until(lambda: not proc.alive(), 120), proc.tail_log()
        assert proc.returncode == 0  # the server's own status, mirrored
        assert not Path(f"/proc/{orphan}").exists()  # stopped and reaped, not a zombie left to PID 1
    finally:
        proc.stop(grace_s=0.1)


def test_the_parent_watch_raises_once_so_a_second_signal_cannot_interrupt_the_tear_down():
    from systems.launch.supervisor import DEATH_SIGNAL, ParentGone, ParentWatch

    watch = ParentWatch(parent_pid=os.getppid())
    watch(DEATH_SIGNAL)  # the parent is still there: nothing happens
    gone = ParentWatch(parent_pid=-1)  # as after the harness died
    with pytest.raises(ParentGone):
        gone(signal.SIGALRM)
    gone(DEATH_SIGNAL)  # a second signal during the tear-down: no second exception
    gone(signal.SIGALRM)
