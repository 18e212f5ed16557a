"""Session fixtures for the launcher tests: a single-node Slurm cluster and a loopback Ray head, brought up
through the project's own commands (``python -m tests.clusters.slurm_local|ray_local up``) in private
folders on free ports, so they never touch a cluster a person runs on this machine, and always taken down
(``down``, which stops exactly the recorded process groups) when the session ends, also after a failure.

Imported by ``tests/integration/test_launchers.py``; a fixture is only set up when a test asks for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from systems.launch import ports
from tests.clusters import ray_local, slurm_local

REPO = Path(__file__).resolve().parents[2]
UP_TIMEOUT_S = 600  # a bound for a stuck command, not a speed target: bring-up on 2 busy cores takes 5-60 s


@dataclass(frozen=True)
class LocalCluster:
    """A cluster a fixture brought up: its folder and the environment a harness run needs to use it."""

    directory: Path
    env: dict[str, str]


def cluster_cli(module: str, *args: str, timeout: float = UP_TIMEOUT_S) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` from the repository root."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _port_pair() -> int:
    """A free port whose successor is free too (slurmctld and slurmd)."""
    for _ in range(50):
        port = ports.free_port()
        if ports.port_is_free(port + 1):
            return port
    raise RuntimeError("no two free consecutive ports on 127.0.0.1")


def _bring_up(module: str, directory: Path, port: int) -> None:
    up = cluster_cli(module, "up", "--dir", str(directory), "--port", str(port))
    if up.returncode != 0:
        pytest.fail(f"`python -m {module} up` failed ({up.returncode}):\n{up.stdout[-2000:]}\n{up.stderr[-4000:]}")


def _take_down(module: str, directory: Path) -> None:
    down = cluster_cli(module, "down", "--dir", str(directory))
    if down.returncode != 0:
        pytest.fail(f"`python -m {module} down` failed ({down.returncode}):\n{down.stderr[-4000:]}")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalCluster]:
    """A single-node Slurm cluster (partition ``local``) for ``hydra/launcher=slurm_local``."""
    # /tmp, not pytest's 0700 tmp_path: munged requires every folder above its socket to be executable by all
    directory = Path(tempfile.mkdtemp(prefix="dbslurm-"))
    os.chmod(directory, 0o755)
    try:
        _bring_up("tests.clusters.slurm_local", directory, _port_pair())
        cluster = slurm_local.load_cluster(directory)
        assert cluster is not None
        yield LocalCluster(directory, cluster.client_env())
    finally:
        _take_down("tests.clusters.slurm_local", directory)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LocalCluster]:
    """A Ray head on 127.0.0.1 for ``hydra/launcher=ray_cluster`` (a short folder: Ray's sockets live in it)."""
    directory = Path(tempfile.mkdtemp(prefix="dbray-"))
    try:
        _bring_up("tests.clusters.ray_local", directory, ports.free_port())
        cluster = ray_local.load_cluster(directory)
        assert cluster is not None
        yield LocalCluster(directory, cluster.client_env())
    finally:
        _take_down("tests.clusters.ray_local", directory)
