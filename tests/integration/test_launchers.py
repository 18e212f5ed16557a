"""The sweep launchers of ``conf/hydra/launcher/`` give what a plain local multirun gives.

One small simulator sweep (two jobs) runs once with Hydra's basic launcher; then the same command with
``hydra/launcher=parallel`` (joblib), ``slurm_local`` (submitit on the single-node cluster of
``tests.clusters.slurm_local``) and ``ray_cluster`` (the Hydra Ray launcher attached to the loopback head
of ``tests.clusters.ray_local``). Each must leave the same job folders relative to the sweep folder, the
same files in each, every job ``ok``, the same ``config.yaml`` (up to the results folder) and byte-identical
``requests.parquet``. The folder naming is the project's (``hydra.sweep.subdir``), whatever it is: only the
two runs are compared. The clusters come from session fixtures (``launcher_fixtures.py``) that bring them up
once and always take them down.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.launcher_fixtures import LocalCluster, cluster_cli, ray_cluster, slurm_cluster  # noqa: F401
from tests.integration.test_cli import run_harness

pytestmark = pytest.mark.integration  # runs the app and cluster daemons as processes

EXPERIMENT = "lsweep"
SWEEP = ["-m", "engine=sim", "model=llama3_8b", "hardware=a100_80gb", "workload=shared_prefix",
         "workload.num_groups=4", "workload.prompts_per_group=25", "workload.arrival.rate_rps=8",
         "slo=distserve_chatbot_13b", "engine.progress=false", "system=distserve,mooncake",
         f"experiment_name={EXPERIMENT}"]
LAUNCHER_ONLY = frozenset({".submitit"})  # submitit's pickles and Slurm logs, beside the job folders
RUN_TIMEOUT_S = 600  # a bound for a stuck run, not a speed target


def sweep(results: Path, launcher: str | None = None, env: dict[str, str] | None = None) -> Path:
    """Run the sweep into ``results`` (optionally through ``hydra/launcher=<launcher>``); its sweep folder."""
    args = [*SWEEP, *([f"hydra/launcher={launcher}"] if launcher else [])]
    proc = run_harness(args, results, env=env, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, f"{launcher or 'basic'} launcher:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return results / EXPERIMENT


def job_folders(sweep_dir: Path) -> dict[str, set[str]]:
    """Each job folder (one holding ``summary.json``) relative to the sweep folder, with the files in it."""
    jobs = {}
    for summary in sweep_dir.rglob("summary.json"):
        job = summary.parent
        rel = job.relative_to(sweep_dir)
        if rel.parts and rel.parts[0] in LAUNCHER_ONLY:
            continue
        jobs[str(rel)] = {str(p.relative_to(job)) for p in job.rglob("*") if p.is_file()}
    return jobs


def top_level(sweep_dir: Path) -> set[str]:
    return {p.name for p in sweep_dir.iterdir()} - LAUNCHER_ONLY


def assert_same_sweep(local: Path, other: Path, launcher: str) -> None:
    expected, got = job_folders(local), job_folders(other)
    assert len(expected) == 2, expected
    assert set(got) == set(expected), f"{launcher}: job folders {sorted(got)} != local {sorted(expected)}"
    assert top_level(other) == top_level(local), launcher
    for job, files in expected.items():
        assert got[job] == files, f"{launcher}: {job}: files differ: {sorted(got[job] ^ files)}"
        summary = json.loads((other / job / "summary.json").read_text())
        assert summary["status"] == "ok", (launcher, job, summary.get("reason"))
        for name in ("config.yaml", "requests.parquet"):
            assert (other / job / name).is_file(), (launcher, job, name)
        assert (other / job / "requests.parquet").read_bytes() == (local / job / "requests.parquet").read_bytes(), \
            f"{launcher}: {job}: records differ from the local run"
        local_cfg = (local / job / "config.yaml").read_text().replace(str(local.parent), "<results>")
        other_cfg = (other / job / "config.yaml").read_text().replace(str(other.parent), "<results>")
        assert other_cfg == local_cfg, f"{launcher}: {job}: config.yaml differs from the local run"


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep through Hydra's basic launcher: the reference."""
    return sweep(tmp_path_factory.mktemp("basic"))


def test_parallel_launcher_matches_local(local_sweep: Path, tmp_path: Path) -> None:
    assert_same_sweep(local_sweep, sweep(tmp_path, "parallel"), "parallel")


@pytest.mark.slurm
def test_slurm_launcher_matches_local(local_sweep: Path, tmp_path: Path, slurm_cluster: LocalCluster) -> None:  # noqa: F811
    other = sweep(tmp_path, "slurm_local", env=slurm_cluster.env)
    assert_same_sweep(local_sweep, other, "slurm_local")
    # one Slurm job per sweep job, each with its submitit result beside the job folders
    assert len(list((other / ".submitit").glob("*/*_result.pkl"))) == 2


@pytest.mark.slurm
def test_slurm_up_is_idempotent(slurm_cluster: LocalCluster) -> None:  # noqa: F811
    before = {p.name: p.read_text() for p in (slurm_cluster.directory / "pids").glob("*.json")}
    again = cluster_cli("tests.clusters.slurm_local", "up", "--dir", str(slurm_cluster.directory))
    assert again.returncode == 0, again.stderr
    assert "already up, nothing started" in again.stdout
    after = {p.name: p.read_text() for p in (slurm_cluster.directory / "pids").glob("*.json")}
    assert after == before and len(before) == 3  # munged, slurmctld, slurmd: the same processes
    status = cluster_cli("tests.clusters.slurm_local", "status", "--dir", str(slurm_cluster.directory))
    assert status.returncode == 0 and "idle" in status.stdout, status.stdout + status.stderr


@pytest.mark.ray
def test_ray_launcher_matches_local(local_sweep: Path, tmp_path: Path, ray_cluster: LocalCluster) -> None:  # noqa: F811
    assert_same_sweep(local_sweep, sweep(tmp_path, "ray_cluster", env=ray_cluster.env), "ray_cluster")


@pytest.mark.ray
def test_ray_up_is_idempotent(ray_cluster: LocalCluster) -> None:  # noqa: F811
    before = (ray_cluster.directory / "pids" / "ray_head.json").read_text()
    again = cluster_cli("tests.clusters.ray_local", "up", "--dir", str(ray_cluster.directory))
    assert again.returncode == 0, again.stderr
    assert "already up, nothing started" in again.stdout
    assert (ray_cluster.directory / "pids" / "ray_head.json").read_text() == before
    assert f"RAY_ADDRESS={ray_cluster.env['RAY_ADDRESS']}" in again.stdout
