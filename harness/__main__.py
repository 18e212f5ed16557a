"""``python -m harness``: the Hydra entry point (composition root of every run)."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from harness.app import context_from_hydra, run_job
from harness.config import ConfigError, register_configs
from harness.engines import DeploymentError, EngineUnavailableError
from systems.launch.ports import PortInUseError
from systems.launch.processes import ServerStartError
from workloads.errors import WorkloadError

# Failures with a message that says what is wrong: printed without a traceback, exit code 2.
USER_ERRORS = (ConfigError, WorkloadError, EngineUnavailableError, DeploymentError, ServerStartError, PortInUseError)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        run_job(cfg, context_from_hydra(cfg))
    except USER_ERRORS as exc:
        # Bad input: a message naming the key, file or line; non-zero exit; no traceback.
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    register_configs()
    main()
