"""The host-load monitor (harness/host_load.py) on real processes: a busy process *outside* the harness's
process tree is counted as outside CPU, a busy child *inside* it (even in its own session) as job CPU; and
the accounting of appeared, vanished and reaped processes and of steal time on fixed snapshots.

How to start a process outside our tree: ``setsid`` or ``start_new_session`` is not enough, the new session's
leader is still our child (its parent chain reaches us). A helper process starts the spinner and exits at
once; the orphaned spinner is re-parented to init (or to a child subreaper above us), never to us. The test
checks that with the parent chain before relying on it. The spinner leads its own process group, which is
what ``finally`` kills (we cannot wait for it: it is no longer our child; its reaper collects it).

The host has 2 cores shared with other work, so these tests assert only what stays true under load: the
spinner shows up (outside or job) with at least the CPU it was seen to use, and a loose lower bound on the
outside share; never that anything else is small.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.host_load import (
    HostLoadMonitor,
    ProcSample,
    Snapshot,
    compare_snapshots,
    job_processes,
    parse_stat,
    read_processes,
)

SPIN = "while True: pass"
# starts the spinner in its own session, prints its pid and exits, leaving it an orphan
ORPHAN_HELPER = (
    "import subprocess, sys\n"
    f"p = subprocess.Popen([sys.executable, '-c', {SPIN!r}], start_new_session=True,\n"
    "                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print(p.pid, flush=True)\n"
)
PROC = Path("/proc")
needs_proc = pytest.mark.skipif(not (PROC / "self" / "stat").exists(), reason="needs Linux /proc")


def stat_of(pid: int) -> ProcSample:
    sample = parse_stat((PROC / str(pid) / "stat").read_text())
    assert sample is not None
    return sample


def ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        pid = stat_of(pid).ppid
        chain.append(pid)
    return chain


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def cpu_ticks(pid: int) -> int:
    return stat_of(pid).own_ticks


def measure_while_spinning(pid: int, seconds: float = 1.5) -> tuple[dict, float]:
    """The monitor's block over ``seconds``, and the CPU seconds ``pid`` was seen to use inside that span."""
    hz = os.sysconf("SC_CLK_TCK")
    with HostLoadMonitor() as monitor:
        before = cpu_ticks(pid)
        time.sleep(seconds)
        after = cpu_ticks(pid)
    return monitor.result(), (after - before) / hz


@pytest.mark.integration
@needs_proc
def test_orphaned_spinner_outside_the_tree_is_outside_cpu() -> None:
    helper = subprocess.run([sys.executable, "-c", ORPHAN_HELPER], stdout=subprocess.PIPE, text=True, timeout=60,
                            check=True)
    pid = int(helper.stdout.strip())
    try:
        assert os.getpid() not in ancestors(pid)  # re-parented away: not our descendant
        key = stat_of(pid).key
        assert key not in job_processes(read_processes(PROC), os.getpid())
        block, spun_s = measure_while_spinning(pid)
        assert spun_s > 0  # it ran
        assert block["outside_cpu_s"] >= spun_s - 0.05  # all of it counted outside (tick rounding aside)
        assert block["outside_cpu_share"] > 0.2  # loose: a spinning process gets far more of a core than this
        assert block["outside_cpu_share"] == pytest.approx(block["outside_cpu_s"] / block["wall_s"])
        assert block["wall_s"] >= 1.0
        top = block["top_outside"]
        assert len(top) <= 5 and all(len(entry) == 3 for entry in top)
        assert [entry[2] for entry in top] == sorted((entry[2] for entry in top), reverse=True)
    finally:
        kill_group(pid)  # it leads its own session and process group


@pytest.mark.integration
@needs_proc
def test_child_in_its_own_session_is_job_cpu_not_outside() -> None:
    child = subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert os.getpid() in ancestors(child.pid)
        assert stat_of(child.pid).key in job_processes(read_processes(PROC), os.getpid())
        block, spun_s = measure_while_spinning(child.pid)
        assert spun_s > 0
        assert block["job_cpu_s"] >= spun_s - 0.05  # counted as the job's
        assert child.pid not in [entry[1] for entry in block["top_outside"]]
    finally:
        kill_group(child.pid)
        child.wait(timeout=30)


def test_unreadable_proc_gives_nans_and_never_raises(tmp_path: Path) -> None:
    with HostLoadMonitor(proc=tmp_path / "no_proc_here") as monitor:
        pass
    block = monitor.result()
    assert set(block) == {"wall_s", "outside_cpu_s", "outside_cpu_share", "steal_share", "job_cpu_s", "top_outside"}
    for key in ("outside_cpu_s", "outside_cpu_share", "steal_share", "job_cpu_s"):
        assert math.isnan(block[key]), key
    assert block["top_outside"] == [] and block["wall_s"] >= 0


def test_steal_share_from_the_cpu_line(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 50 800 0 0 0 50 0 0\ncpu0 1 2 3\n")
    with HostLoadMonitor(proc=tmp_path) as monitor:
        stat.write_text("cpu  200 0 100 1500 0 0 0 200 0 0\ncpu0 1 2 3\n")  # 1000 ticks, 150 of them stolen
    block = monitor.result()
    assert block["steal_share"] == pytest.approx(0.15)
    assert math.isnan(block["outside_cpu_share"])  # no process could be read


def test_stat_line_with_a_command_name_holding_spaces_and_parentheses() -> None:
    rest = " ".join(["S", "7", *["0"] * 9, "30", "12", "5", "6", *["0"] * 4, "4242", "0"])
    sample = parse_stat(f"123 (my (odd) name) {rest}\n")
    assert sample == ProcSample(pid=123, ppid=7, comm="my (odd) name", start_ticks=4242, own_ticks=42,
                                reaped_ticks=11)
    assert parse_stat("garbage") is None


def proc(pid: int, ppid: int, own: int, reaped: int = 0, start: int = 1, comm: str = "p") -> ProcSample:
    return ProcSample(pid=pid, ppid=ppid, comm=comm, start_ticks=start, own_ticks=own, reaped_ticks=reaped)


def snapshot(at: float, root: int, *samples: ProcSample) -> Snapshot:
    procs = {s.key: s for s in samples}
    return Snapshot(at=at, procs=procs, job=job_processes(procs, root))


def test_appeared_vanished_reaped_and_reused_pids_are_counted_once() -> None:
    """Root 10 (the harness) with server 11 in its own session and its worker 12; outside: init 1, a
    ``make`` 20 that reaped a compiler 21 alive at the start (it had used 50 ticks by then, 80 at its end)
    and others born and gone in between (40 ticks), a newcomer 30, and pid 40 reused by a new process."""
    first = snapshot(0.0, 10,
                     proc(1, 0, 0), proc(10, 1, 100), proc(11, 10, 1000), proc(12, 11, 10),
                     proc(20, 1, 5, reaped=0, comm="make"), proc(21, 20, 50, comm="cc1"),
                     proc(40, 1, 70, start=1, comm="old"))
    last = snapshot(2.0, 10,
                    proc(1, 0, 0), proc(10, 1, 110), proc(11, 10, 1100), proc(12, 11, 30),
                    proc(20, 1, 7, reaped=80 + 40, comm="make"), proc(30, 1, 25, comm="new"),
                    proc(40, 1, 9, start=500, comm="reused"))
    block = compare_snapshots(first, last, clock_ticks=100)
    # job: 10 + 100 + 20 ticks; outside: make 2 own + (120 - 50) reaped, new 25, reused 9 (the old one vanished)
    assert block["job_cpu_s"] == pytest.approx(1.30)
    assert block["outside_cpu_s"] == pytest.approx((2 + 70 + 25 + 9) / 100)
    assert block["outside_cpu_share"] == pytest.approx(1.06 / 2.0)
    assert block["wall_s"] == pytest.approx(2.0)
    assert block["top_outside"] == [["make", 20, 0.72], ["new", 30, 0.25], ["reused", 40, 0.09]]


def test_job_membership_holds_when_either_snapshot_sees_the_chain() -> None:
    """A job process orphaned between the snapshots (its parent 11 exited) stays the job's."""
    first = snapshot(0.0, 10, proc(1, 0, 0), proc(10, 1, 0), proc(11, 10, 0), proc(12, 11, 0))
    last = snapshot(1.0, 10, proc(1, 0, 0), proc(10, 1, 0), proc(12, 1, 300))
    block = compare_snapshots(first, last, clock_ticks=100)
    assert block["job_cpu_s"] == pytest.approx(3.0) and block["outside_cpu_s"] == 0.0
    assert block["top_outside"] == []
