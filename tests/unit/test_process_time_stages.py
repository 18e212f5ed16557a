"""The stage timer of ``benchmarks.process_time_bench``: a stage's nested stages are taken out of it,
and a stage run in another thread (a background write) is counted apart from the main thread's stages,
with that thread's own CPU time; the turn-by-turn ratios divide each turn's peer time by ours."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from benchmarks.process_time_bench import IN_A_THREAD, StageTimer


def _busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_nested_stages_are_taken_out_of_the_outer_one() -> None:
    timer = StageTimer()
    ns = SimpleNamespace(inner=lambda: _busy(0.05))
    ns.outer = lambda: (_busy(0.02), ns.inner())
    timer.wrap(ns, "inner", "inner")
    timer.wrap(ns, "outer", "outer")
    ns.outer()
    inner_wall, inner_cpu = timer.totals["inner"]
    outer_wall, outer_cpu = timer.totals["outer"]
    assert inner_cpu >= 0.05 and outer_cpu >= 0.02
    assert outer_cpu < 0.05  # the inner stage's 50 ms are not counted twice


def test_a_stage_in_another_thread_is_counted_apart_with_its_own_cpu() -> None:
    timer = StageTimer()
    ns = SimpleNamespace(write=lambda seconds: _busy(seconds))
    timer.wrap(ns, "write", "tables")
    worker = threading.Thread(target=ns.write, args=(0.06,))
    worker.start()
    ns.write(0.01)
    worker.join()
    assert set(timer.totals) == {"tables", f"tables{IN_A_THREAD}"}
    assert timer.totals[f"tables{IN_A_THREAD}"][1] >= 0.06
    assert timer.totals["tables"][1] < 0.06  # the thread's CPU is not the main thread's


def test_paired_ratios_divide_each_turns_peer_by_ours() -> None:
    from benchmarks.process_time_bench import paired_ratios

    ours = [{"wall_s": 2.0}, {"wall_s": 1.0}]
    theirs = [{"wall_s": 16.0}, {"wall_s": 9.0}]
    assert paired_ratios(ours, theirs) == [8.0, 9.0]
