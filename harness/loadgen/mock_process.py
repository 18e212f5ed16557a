"""Start the mock server as a child process (own process group, optionally pinned to a CPU); always stopped.

``with mock_server_process(ttft_ms=5, itl_ms=2) as server: ...`` yields the server's ``url``
(``http://127.0.0.1:PORT``) and ``pid``; on exit the process group gets SIGTERM, then SIGKILL if it lingers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import NamedTuple, Optional

START_TIMEOUT_S = 30.0


class MockProcess(NamedTuple):
    url: str
    pid: int


def _stop_group(proc: subprocess.Popen[str], timeout_s: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout_s)


@contextlib.contextmanager
def mock_server_process(
    *,
    ttft_ms: float = 10.0,
    itl_ms: float = 5.0,
    cpu: Optional[int] = None,
    spin_us: float = 0.0,
    extra_args: tuple[str, ...] = (),
    python: str = sys.executable,
) -> Iterator[MockProcess]:
    """Run ``python -m harness.loadgen.mock_server`` on a free loopback port; yield its URL and pid."""
    cmd = [python, "-m", "harness.loadgen.mock_server", "--port", "0", "--ttft-ms", str(ttft_ms),
           "--itl-ms", str(itl_ms), "--spin-us", str(spin_us), *extra_args]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        line = ""
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("listening on ") or not line:
                break
        if not line.startswith("listening on "):
            raise RuntimeError(f"mock server did not start (exit code {proc.poll()}, said {line!r})")
        yield MockProcess(line.split("listening on ", 1)[1].strip(), proc.pid)
    finally:
        _stop_group(proc)
        if proc.stdout is not None:
            proc.stdout.close()
