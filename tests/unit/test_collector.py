"""The collector pause of a measured point (harness/collector.py): inside it the cyclic collector is off,
on leaving it the objects still alive are frozen and the collector runs again; ``release_frozen`` hands them
back and frees the cyclic garbage among them; a collector that was already off stays off and nothing is
frozen; run after run, a serving job's frozen garbage does not pile up; ``python -m harness`` keeps the
collector off only until its job starts."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from harness.collector import collector_paused, release_frozen


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


def test_the_pause_freezes_what_survives_it_and_release_gives_it_back() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]  # tracked objects that outlive the block
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(kept)
    walked = {id(o) for o in gc.get_objects()}  # the generations the collector walks (not the frozen one)
    assert all(gc.is_tracked(o) and id(o) not in walked for o in kept)
    release_frozen()
    assert gc.get_freeze_count() == 0


class Node:
    """An object of a reference cycle (reference counting alone never frees one)."""

    def __init__(self) -> None:
        self.other: Node | None = None


def test_cyclic_garbage_made_in_the_pause_is_freed_by_release() -> None:
    gc.enable()
    with collector_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
    del a, b
    assert gc.collect() == 0  # frozen: the collector does not see it
    release_frozen()
    assert not [o for o in gc.get_objects() if type(o) is Node]  # type(): isinstance would ask every object (some warn)


def test_serving_job_after_serving_job_leaves_no_frozen_garbage(tmp_path) -> None:
    """run_serve (as a comparison or a sweep runs it, one after the other in one process) releases what its
    points froze: the simulated cluster's cycles of one run are gone before the next, instead of piling up."""
    from harness.config import compose_config, validate
    from harness.results import RunFolder
    from harness.serve_job import run_serve
    from systems.sim.cluster import Cluster

    gc.enable()
    overrides = ["workload=shared_prefix", "workload.num_groups=2", "workload.prompts_per_group=5",
                 "workload.output_len=8", "figures=false"]
    cfg = validate(compose_config(overrides))
    for i in range(3):
        run_serve(cfg, RunFolder(tmp_path / str(i)))
    assert gc.get_freeze_count() == 0
    assert not [o for o in gc.get_objects() if type(o) is Cluster]


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


def test_importing_the_entry_point_leaves_the_collector_alone() -> None:
    """``harness/__main__.py`` pauses the collector only when run as ``python -m harness``."""
    gc.enable()
    import harness.__main__  # noqa: F401

    assert gc.isenabled()


def test_python_m_harness_runs_its_job_with_the_collector_on(tmp_path) -> None:
    """Paused for the imports and the composition, the collector runs again once the job starts: a shim
    (``sitecustomize``) records, at exit, whether it ran and whether it was on."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    shim = tmp_path / "shim"
    shim.mkdir()
    out = tmp_path / "gc.json"
    (shim / "sitecustomize.py").write_text(
        "import atexit, gc, json\n"
        "seen = []\n"
        "gc.callbacks.append(lambda phase, info: seen.append(info['generation']) if phase == 'stop' else None)\n"
        f"atexit.register(lambda: open({str(out)!r}, 'w').write(json.dumps("
        "{'enabled': gc.isenabled(), 'collections': len(seen)})))\n")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "harness", "job=workload", f"hydra.run.dir={tmp_path / 'job'}"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(out.read_text(encoding="utf-8"))
    assert seen["enabled"] is True
    assert seen["collections"] > 0  # the job ran with it on
