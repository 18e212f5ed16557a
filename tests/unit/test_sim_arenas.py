"""Python's arenas on huge pages while a simulation runs (systems/sim/arenas.py, systems/sim/_arenas.c): the
allocator is installed for the block only, once when nested, and objects made on either side of it live and
die as usual."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from systems.sim import arenas, native

pytestmark = pytest.mark.skipif(not arenas.available(), reason="the compiled core's _arenas extension is not in use")


def test_arenas_come_from_huge_page_regions_inside_the_block_only() -> None:
    ext = arenas._ARENAS
    assert ext is not None
    before = ext.stats()
    assert not before["installed"]
    kept_outside = [[i] for i in range(50_000)]
    with arenas.huge_page_arenas():
        assert ext.stats()["installed"]
        with arenas.huge_page_arenas():  # nested: installed once, still installed after the inner block
            pass
        assert ext.stats()["installed"]
        made_inside = [[i, str(i)] for i in range(400_000)]  # far more than one 1 MiB arena
        del kept_outside[::2]  # objects of the previous allocator's arenas are freed under ours
    after = ext.stats()
    assert not after["installed"]
    assert after["arenas"] - before["arenas"] >= 10 and after["regions"] > before["regions"]
    assert made_inside[399_999] == [399_999, "399999"] and kept_outside[-1] == [49_999]
    del made_inside  # arenas of ours freed by the previous allocator
    assert [[i] for i in range(100_000)][-1] == [99_999]


def test_the_switch_leaves_the_allocator_alone() -> None:
    """``DISAGG_SIM_HUGE_PAGES=0`` (a child process: the variable is read at each block)."""
    code = ("from systems.sim import arenas\n"
            "with arenas.huge_page_arenas():\n"
            "    print(arenas.available(), arenas._ARENAS.stats()['installed'])\n")
    env_off = {"DISAGG_SIM_HUGE_PAGES": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**_env(), **env_off}).stdout.split()
    assert out == ["False", "False"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != native.ENV_SWITCH}
