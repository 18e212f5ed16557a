"""The simulator's event queue (systems/sim/events.py): events run in (time, priority, order scheduled), a run can
stop at a time and go on, and a stream of arrivals runs where the heap would have put it."""

from __future__ import annotations

from systems.sim.events import EventQueue


def test_events_run_by_time_then_priority_then_the_order_they_were_scheduled() -> None:
    loop, seen = EventQueue(), []
    for t, prio, name in [(2.0, 1, "a"), (1.0, 3, "b"), (2.0, 0, "c"), (2.0, 1, "d"), (0.5, 2, "e")]:
        loop.schedule(t, prio, lambda t, a: seen.append(a), name)
    loop.run()
    assert seen == ["e", "b", "c", "a", "d"] and loop.processed == 5 and loop.now == 2.0


def test_events_after_until_stay_queued_in_order() -> None:
    loop, seen = EventQueue(), []
    for t, prio in [(3.0, 1), (1.0, 0), (3.0, 0), (2.0, 2), (5.0, 0)]:
        loop.schedule(t, prio, lambda t, a: seen.append((t, a)), prio)
    loop.run(until=2.5)
    assert seen == [(1.0, 0), (2.0, 2)] and len(loop) == 3 and loop.now == 2.0
    loop.run(until=3.0, on_progress=lambda t: None, progress_every=1)
    assert seen[2:] == [(3.0, 0), (3.0, 1)] and len(loop) == 1
    loop.run()
    assert seen[4:] == [(5.0, 0)] and len(loop) == 0 and loop.processed == 5


def test_a_stream_runs_between_the_priorities_below_and_above_its_own() -> None:
    loop, seen = EventQueue(), []
    loop.schedule(1.0, 0, lambda t, a: seen.append(a), "low")
    loop.schedule(1.0, 3, lambda t, a: seen.append(a), "high")
    loop.schedule(0.5, 3, lambda t, a: seen.append(a), "early")
    loop.set_stream([1.0, 1.0, 4.0], 2, lambda t, a: seen.append(a), ["s0", "s1", "s2"])
    assert len(loop) == 6
    loop.run()
    assert seen == ["early", "low", "s0", "s1", "high", "s2"] and loop.processed == 6 and loop.now == 4.0
