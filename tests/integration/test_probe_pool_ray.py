"""The probe pool on a real local Ray instance (``ray.init(address="local")``, 2 CPUs, stopped at the end):
tasks run in Ray workers and come back in input order, and the placement search through Ray writes the
same tables as in-process (only wall times differ)."""

from __future__ import annotations

import functools
import json
import logging
import operator
import os
from typing import Any

import pytest

from harness.probe_pool import RayPool
from harness.results import RunFolder
from harness.studies.variants import compose_variant

pytestmark = [pytest.mark.integration, pytest.mark.ray]


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray instance for this module (token authentication off: nothing is written to ~/.ray)."""
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    pool = RayPool({"address": "local", "num_cpus": 2, "include_dashboard": False})
    try:
        pool.connect()
        yield pool
    finally:
        pool.close()
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved


def test_ray_tasks_come_back_in_input_order(ray_local):
    items = list(range(8))
    assert ray_local.map(functools.partial(operator.mul, 3), items, desc="ray") == [3 * x for x in items]
    capped = RayPool(workers=1)  # joins the running instance; one task in flight at a time
    assert capped.map(functools.partial(operator.add, 1), items) == [x + 1 for x in items]


def without_wall(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_wall(v) for k, v in value.items() if "wall" not in k}
    if isinstance(value, list):
        return [without_wall(v) for v in value]
    return value


def test_placement_search_through_ray_is_the_same(ray_local, tmp_path, shared_traces, caplog):
    import dataclasses

    from harness.studies.placement_search import run_placement_search

    caplog.set_level(logging.INFO)
    cfg = compose_variant(["experiment=distserve_placement", f"data_dir={shared_traces}", "study.max_requests=40",
                           "study.params.esp=1.0"])
    metrics = {}
    for mode in ("none", "ray"):
        params = {**cfg.study.params, "parallel": mode}
        run = dataclasses.replace(cfg, study=dataclasses.replace(cfg.study, params=params))
        metrics[mode] = run_placement_search(run, RunFolder(tmp_path / mode)).metrics
    a, b = tmp_path / "none", tmp_path / "ray"
    assert (a / "study.csv").read_bytes() == (b / "study.csv").read_bytes()
    placement = [json.loads((x / "placement.json").read_text()) for x in (a, b)]
    assert without_wall(placement[0]) == without_wall(placement[1])
    assert without_wall(metrics["none"]) == without_wall(metrics["ray"])
    # the workers' log lines were replayed here, each with the pid of the Ray worker that wrote it
    pairs = [r for r in caplog.records if r.name == "harness.studies.placement_pairs"]
    assert {r.process for r in pairs} - {os.getpid()}
