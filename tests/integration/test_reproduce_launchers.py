"""``python -m harness.reproduce ... hydra/launcher=<cluster>`` gives what a local reproduction gives.

Two presets run locally, then as one sweep on a two-node loopback Ray cluster (``tests.clusters.ray_local``: a head
and a worker node) and on the single-node Slurm cluster of ``tests.clusters.slurm_local``: ``distserve_placement``,
whose probes go through the same launcher from within its job (``study.params.parallel=auto``), and
``mooncake_cache_hit``. Every table must be equal to the local run's, the requests files byte-identical, and the
report must grade the same claims the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from tests.clusters import ray_local
from tests.integration.launcher_fixtures import REPO, LocalCluster, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.integration  # runs the app and cluster daemons as processes

PRESETS = ("distserve_placement", "mooncake_cache_hit")
RUN_TIMEOUT_S = 900  # a bound for a stuck run, not a speed target


def reproduce(results: Path, *overrides: str, env: dict[str, str] | None = None) -> Path:
    proc = subprocess.run([sys.executable, "-m", "harness.reproduce", "--only", ",".join(PRESETS), "--results-dir",
                           str(results), *overrides], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, f"{overrides}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return results


def jobs(results: Path) -> dict[str, Path]:
    """Each experiment's job folder (exactly one each)."""
    found: dict[str, list[Path]] = {}
    for summary in results.rglob("summary.json"):
        data = json.loads(summary.read_text())
        assert data["status"] == "ok", (summary, data.get("reason"))
        found.setdefault(data["experiment"], []).append(summary.parent)
    assert sorted(found) == sorted(PRESETS) and all(len(v) == 1 for v in found.values()), found
    return {name: folders[0] for name, folders in found.items()}


def graded_claims(results: Path) -> list[str]:
    """The report's summary rows (claim, paper, ours, verdict) of the two presets."""
    return [line for line in (results / "REPORT.md").read_text().splitlines()
            if line.startswith("| [") and any(p in line for p in PRESETS)]


def assert_same_results(local: Path, other: Path, launcher: str) -> None:
    expected, got = jobs(local), jobs(other)
    for name, folder in expected.items():
        tables = sorted(p.name for p in folder.glob("*.csv"))
        assert tables and tables == sorted(p.name for p in got[name].glob("*.csv")), (launcher, name)
        for table in tables:
            pd.testing.assert_frame_equal(pd.read_csv(got[name] / table), pd.read_csv(folder / table),
                                          obj=f"{launcher}: {name}/{table}")
        for parquet in folder.glob("*.parquet"):
            assert (got[name] / parquet.name).read_bytes() == parquet.read_bytes(), (launcher, name, parquet.name)
    assert graded_claims(other) == graded_claims(local) and graded_claims(local)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reproduce(tmp_path_factory.mktemp("local"))


@pytest.mark.ray
def test_reproduce_on_a_two_node_ray_cluster_matches_local(local_run: Path, tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="rr-", dir="/tmp"))  # short: Ray's sockets live under it
    with ray_local.local_ray_cluster(folder, {"b": (1, {"host_b": 1}, {})}, head_cpus=1) as cluster:
        other = reproduce(tmp_path, "hydra/launcher=ray_cluster", env=cluster.client_env())
    sweeps = list((other / "reproduce").iterdir())
    assert len(sweeps) == 1 and (sweeps[0] / "sweep.csv").is_file()  # one sweep, the presets its jobs
    assert_same_results(local_run, other, "ray_cluster")


@pytest.mark.slurm
def test_reproduce_on_slurm_matches_local(local_run: Path, tmp_path: Path, slurm_cluster: LocalCluster) -> None:  # noqa: F811
    other = reproduce(tmp_path, "hydra/launcher=slurm_local", env=slurm_cluster.env)
    (sweep,) = list((other / "reproduce").iterdir())
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == len(PRESETS)  # each preset a Slurm job
    probe_jobs = list(other.rglob("probe_jobs/*/*_result.pkl"))
    assert probe_jobs, "the placement search's probes ran as Slurm jobs of their own"
    assert_same_results(local_run, other, "slurm_local")
