"""The searches give the same tables whether their probes run in-process or in joblib worker processes
(study.params.parallel): the placement search (both methods) and the Splitwise provisioning study on
small cases. Only wall-time fields may differ. Slow: worker processes start (imports) in seconds."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.results import RunFolder
from harness.studies.variants import compose_variant

PROVISIONING = "experiment=splitwise_provisioning"
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def without_wall(value: Any) -> Any:
    """``value`` without the keys that hold wall times (NaN made comparable)."""
    if isinstance(value, dict):
        return {k: without_wall(v) for k, v in value.items() if "wall" not in k}
    if isinstance(value, list):
        return [without_wall(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def table_bytes(path: Path) -> bytes:
    """The CSV at ``path`` rewritten without its wall-time columns."""
    frame = pd.read_csv(path)
    return frame.drop(columns=[c for c in frame.columns if "wall" in c]).to_csv(index=False).encode()


def assert_same_tables(a: Path, b: Path, names: tuple[str, ...]) -> None:
    for name in names:
        fa, fb = pd.read_csv(a / name), pd.read_csv(b / name)
        assert list(fa.columns) == list(fb.columns) and len(fa) > 0
        differing = [c for c in fa.columns if not fa[c].equals(fb[c])]
        assert all("wall" in c for c in differing), f"{name}: {differing} differ"
        assert table_bytes(a / name) == table_bytes(b / name)


def with_parallel(cfg, **params):
    return dataclasses.replace(cfg, study=dataclasses.replace(cfg.study, params={**cfg.study.params, **params}))


@pytest.mark.parametrize("method", ["simdistserve", "alg1"])
def test_placement_search_is_the_same_in_worker_processes(tmp_path, shared_traces, method):
    from harness.studies.placement_search import run_placement_search
    from vocab.result_files import PLACEMENT_FILE, STUDY_FILE

    extra = ["study.params.method=alg1", "~study.params.sensitivity", "study.params.verify=point",
             "study.max_requests=60"] if method == "alg1" else ["study.max_requests=40", "study.params.esp=1.0"]
    cfg = compose_variant(["experiment=distserve_placement", f"data_dir={shared_traces}", *extra])
    results = {}
    for mode in ("none", "joblib"):
        folder = tmp_path / mode
        results[mode] = run_placement_search(with_parallel(cfg, parallel=mode, parallel_workers=2), RunFolder(folder))
    a, b = tmp_path / "none", tmp_path / "joblib"
    assert (a / STUDY_FILE).read_bytes() == (b / STUDY_FILE).read_bytes()  # no wall times in this table
    ra, rb = (json.loads((x / PLACEMENT_FILE).read_text()) for x in (a, b))
    assert without_wall(ra) == without_wall(rb) and "parallel" not in ra["params"]
    assert without_wall(results["none"].metrics) == without_wall(results["joblib"].metrics)
    assert results["joblib"].metrics["n_simulations"] > 0


def test_provisioning_is_the_same_in_worker_processes(tmp_path):
    from harness.studies.splitwise_provisioning import run_splitwise_provisioning

    cfg = compose_variant([PROVISIONING, "study.max_requests=40"])
    variants = {"baseline_a100": [PROVISIONING, "system=vllm_baseline", "engine.colocated.hardware=a100_80gb"],
                "splitwise_ha": [PROVISIONING, "system=splitwise", "engine.prefill.hardware=h100_80gb",
                                 "engine.decode.hardware=a100_80gb"]}
    params = {"traces": ["azure_code", "azure_conv"], "budgets": ["power", "cost"], "budget_machines": 6,
              "budget_hardware": "a100_80gb", "bisect_steps": 2, "max_expand": 4,
              "scenarios": {"timing": {"overrides": ["engine.token_phase_timing=splitwise_sim"],
                                       "budgets": ["power"], "traces": ["azure_code"]}}}
    cfg = dataclasses.replace(cfg, study=dataclasses.replace(cfg.study, variants=variants, params=params))
    results = {}
    for mode in ("none", "joblib"):
        results[mode] = run_splitwise_provisioning(with_parallel(cfg, parallel=mode, parallel_workers=2),
                                                   RunFolder(tmp_path / mode))
    a, b = tmp_path / "none", tmp_path / "joblib"
    assert_same_tables(a, b, ("study.csv", "probes.csv", "sensitivity.csv"))
    study = pd.read_csv(a / "study.csv")
    assert set(study["design"]) == set(variants) and set(study["trace"]) == {"azure_code", "azure_conv"}
    # two splits per Splitwise design and budget: the second is searched from the first's best (pruning on)
    sizes = study.groupby(["design"]).size()
    assert sizes["splitwise_ha"] == 2 * 2 * 2 and sizes["baseline_a100"] == 2 * 2
    assert study["chosen"].sum() == 8 and len(pd.read_csv(a / "probes.csv")) == results["none"].metrics["n_simulations"]
    assert pd.read_parquet(a / "requests.parquet").equals(pd.read_parquet(b / "requests.parquet"))
    assert without_wall(results["none"].metrics) == without_wall(results["joblib"].metrics)
    assert results["none"].validity == results["joblib"].validity
