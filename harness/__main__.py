"""``python -m harness``: the Hydra entry point (composition root of every run)."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from harness.app import context_from_hydra, run_job
from harness.config import ConfigError, register_configs
from harness.engines import EngineUnavailableError
from workloads.errors import WorkloadError

USER_ERRORS = (ConfigError, WorkloadError, EngineUnavailableError)


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
