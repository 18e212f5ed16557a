"""``python -m harness``: the Hydra entry point (composition root of every run).

A :class:`~harness.errors.UserError` (bad config, missing or malformed file, a deployment that cannot
start) is printed as one line naming the file, line or key, with exit status 2 and no traceback; the
job folder keeps its ``summary.json`` with ``status: failed`` and the reason. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from harness.app import context_from_hydra, run_job
from harness.config import register_configs
from harness.errors import UserError


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        run_job(cfg, context_from_hydra(cfg))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    register_configs()
    main()
