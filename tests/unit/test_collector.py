"""The collector pause of a measured point (harness/collector.py): inside it the cyclic collector is off,
on leaving it the objects still alive are frozen and the collector runs again; ``thaw`` hands them back;
a collector that was already off stays off and nothing is frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from harness.collector import collector_paused, thaw


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    was_enabled = gc.isenabled()
    frozen = gc.get_freeze_count()
    gc.unfreeze()  # start from an empty permanent generation
    yield
    gc.unfreeze()
    if frozen:
        gc.freeze()
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


def test_the_pause_freezes_what_survives_it_and_thaw_gives_it_back() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]  # tracked objects that outlive the block
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(kept)
    walked = {id(o) for o in gc.get_objects()}  # the generations the collector walks (not the frozen one)
    assert all(gc.is_tracked(o) and id(o) not in walked for o in kept)
    thaw()
    assert gc.get_freeze_count() == 0


def test_cyclic_garbage_made_in_the_pause_is_collected_after_thaw() -> None:
    gc.enable()

    class Node:
        pass

    with collector_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    del a, b
    assert gc.collect() == 0  # frozen: the collector does not see it
    thaw()
    assert gc.collect() >= 2


def test_a_collector_that_was_off_stays_off_and_nothing_is_frozen() -> None:
    gc.disable()
    with collector_paused():
        kept = [[i] for i in range(100)]
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert kept


def test_the_collector_runs_again_after_an_error_in_the_pause() -> None:
    gc.enable()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("the point failed")
    assert gc.isenabled()
