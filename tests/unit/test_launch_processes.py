"""Process groups: start, crash detection with the log tail, group teardown, shm clean-up, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from systems.launch.ports import free_port
from systems.launch.processes import (
    ManagedProcess,
    ProcessGroup,
    ServerStartError,
    Terminated,
    sigterm_as_exception,
    wait_http_ready,
)

pytestmark = pytest.mark.integration  # starts processes


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# A parent that forks a grandchild (same process group), prints both pids, and ignores SIGTERM
# when asked to, so only SIGKILL ends it.
FAMILY = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    if sys.argv[1] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("pids", os.getpid(), child.pid, flush=True)
    time.sleep(600)
""")


def wait_line(proc: ManagedProcess, line: str, timeout_s: float = 10.0) -> None:
    """Wait until the log has ``line`` as a whole line (the log's first line echoes the command)."""
    deadline = time.monotonic() + timeout_s
    while line not in proc.tail_log().splitlines():
        assert time.monotonic() < deadline, proc.tail_log()
        time.sleep(0.02)


def read_pids(proc: ManagedProcess, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in proc.tail_log().splitlines():
            if line.startswith("pids "):
                return [int(x) for x in line.split()[1:]]
        time.sleep(0.05)
    raise AssertionError(f"no pids line in {proc.tail_log()!r}")


@pytest.mark.parametrize("mode", ["polite", "stubborn"])
def test_stop_kills_whole_group(tmp_path, mode):
    proc = ManagedProcess("family").start([sys.executable, "-c", FAMILY, mode], log_path=tmp_path / "f.log")
    try:
        parent, child = read_pids(proc)  # the command and its child, under the supervisor (proc.pid)
        assert os.getpgid(parent) == os.getpgid(child) == proc.pgid != os.getpgid(0)
        assert set(proc.group_pids()) == {proc.pid, parent, child}
        t0 = time.monotonic()
        code = proc.stop(grace_s=1.0)
        elapsed = time.monotonic() - t0
    finally:
        proc.stop(grace_s=0.1)
    assert not pid_alive(parent) and not pid_alive(child)
    assert proc.group_pids() == []
    if mode == "stubborn":
        assert code == -signal.SIGKILL and elapsed >= 1.0  # it waited the grace period before SIGKILL
    else:
        assert code == -signal.SIGTERM  # stopped by SIGTERM, so never waited for SIGKILL


def test_stop_is_idempotent_and_safe_before_start(tmp_path):
    assert ManagedProcess("never").stop() is None
    proc = ManagedProcess("quick").start([sys.executable, "-c", "print('done')"], log_path=tmp_path / "q.log")
    deadline = time.monotonic() + 10
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.stop() == 0 and proc.stop() == 0
    assert "done" in proc.tail_log()


def test_context_manager_stops(tmp_path):
    with ManagedProcess("sleeper").start([sys.executable, "-c", "import time; time.sleep(600)"],
                                         log_path=tmp_path / "s.log") as proc:
        pid = proc.pid
        assert proc.alive()
    assert not pid_alive(pid)


def test_tail_log_returns_last_lines(tmp_path):
    code = "for i in range(5000): print('line', i)"
    with ManagedProcess("talker").start([sys.executable, "-c", code], log_path=tmp_path / "t.log") as proc:
        while proc.alive():
            time.sleep(0.02)
        lines = proc.tail_log(3).splitlines()
    assert lines == ["line 4997", "line 4998", "line 4999"]


def test_wait_http_ready_on_a_real_http_server(tmp_path):
    port = free_port()
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    with ProcessGroup(grace_s=2) as group:
        proc = group.start("http", cmd, log_path=tmp_path / "http.log")
        waited = wait_http_ready(proc, f"http://127.0.0.1:{port}/", timeout_s=30, interval_s=0.1)
        assert waited < 30
        pid = proc.pid
    assert not pid_alive(pid)


def test_crash_is_detected_fast_with_log_tail(tmp_path):
    code = "import sys; print('loading model'); print('FATAL: no such model', file=sys.stderr); sys.exit(3)"
    proc = ManagedProcess("crasher").start([sys.executable, "-c", code], log_path=tmp_path / "c.log")
    with pytest.raises(ServerStartError) as info:
        wait_http_ready(proc, f"http://127.0.0.1:{free_port()}/health", timeout_s=600, interval_s=0.05)
    message = str(info.value)  # the exit was detected, not the 600 s timeout
    assert "crasher exited with code 3" in message
    assert "FATAL: no such model" in message and "loading model" in message
    proc.stop()


def test_timeout_raises_with_log_tail(tmp_path):
    code = "print('still loading', flush=True); import time; time.sleep(600)"
    proc = ManagedProcess("slow").start([sys.executable, "-c", code], log_path=tmp_path / "s.log")
    try:
        wait_line(proc, "still loading")
        with pytest.raises(ServerStartError, match="(?s)not ready .* within 1 s.*still loading"):
            wait_http_ready(proc, f"http://127.0.0.1:{free_port()}/health", timeout_s=1, interval_s=0.1)
    finally:
        proc.stop()


def test_process_group_stops_in_reverse_order_even_on_error(tmp_path):
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: (print('bye', time.monotonic_ns(), flush=True), sys.exit(0))); print('up', flush=True); time.sleep(600)"
    procs = []
    with pytest.raises(RuntimeError, match="boom"), ProcessGroup(grace_s=5) as group:
        for i in range(3):
            procs.append(group.start(f"p{i}", [sys.executable, "-c", code], log_path=tmp_path / f"p{i}.log"))
        for p in procs:
            wait_line(p, "up")
        raise RuntimeError("boom")
    assert not any(p.alive() for p in procs)
    stopped = [int(p.tail_log().splitlines()[-1].split()[1]) for p in procs]
    assert stopped[2] < stopped[1] < stopped[0]


def test_sigkilled_group_leaves_no_shm_file_it_created(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    ours = shm / f"disagg-test-{uuid.uuid4().hex}"
    old = shm / f"disagg-test-old-{uuid.uuid4().hex}"
    old.write_bytes(b"x")  # existed before the start: must survive even though the child opens it
    code = textwrap.dedent(f"""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        a = open({str(ours)!r}, "wb"); b = open({str(old)!r}, "rb")
        print("ready", flush=True); time.sleep(600)
    """)
    proc = ManagedProcess("shm-user")
    try:
        proc.start([sys.executable, "-c", code], log_path=tmp_path / "shm.log")
        wait_line(proc, "ready")
        assert ours.exists()
        assert proc.stop(grace_s=0.5) == -signal.SIGKILL
        assert not ours.exists()
        assert old.exists()
    finally:
        proc.stop(grace_s=0.1)
        ours.unlink(missing_ok=True)
        old.unlink(missing_ok=True)


def test_sigterm_becomes_exception_and_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_as_exception():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigterm_whose_exception_python_dropped_is_raised_by_check():
    class SignalledInDel:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here, inside __del__: Python prints "Exception ignored", goes on

    with sigterm_as_exception() as received:
        received.check()  # nothing received yet
        obj = SignalledInDel()
        started = time.monotonic()
        del obj  # no exception gets out of this line
        assert time.monotonic() - started < 5
        with pytest.raises(Terminated, match="received SIGTERM"):
            received.check()


def test_harness_killed_with_sigterm_tears_children_down(tmp_path):
    """A whole harness process: SIGTERM to it stops the server it started (no orphan)."""
    port = free_port()
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from systems.launch.processes import ProcessGroup, sigterm_as_exception, wait_http_ready
        with sigterm_as_exception(), ProcessGroup(grace_s=5) as group:
            p = group.start("http", [sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1"],
                            log_path=Path({str(tmp_path / 'h.log')!r}))
            wait_http_ready(p, "http://127.0.0.1:{port}/", 30, 0.1)
            print("child", p.pid, flush=True)
            time.sleep(600)
    """)
    repo = Path(__file__).resolve().parents[2]
    harness = subprocess.Popen([sys.executable, "-c", script], cwd=repo, stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        line = harness.stdout.readline()
        assert line.startswith("child "), line
        child = int(line.split()[1])
        assert pid_alive(child)
        harness.send_signal(signal.SIGTERM)
        harness.wait(timeout=30)
        assert not pid_alive(child)
    finally:
        if harness.poll() is None:
            os.killpg(harness.pid, signal.SIGKILL)
            harness.wait()
