"""``job=sim_study``: pick the simulator study named by ``study.kind``."""

from __future__ import annotations

from harness.config import Config
from harness.jobs import JobResult
from harness.results import RunFolder


def run_sim_study(cfg: Config, folder: RunFolder) -> JobResult:
    kind = cfg.study.kind
    if kind == "sim_sweep":
        from harness.studies.sim_sweep import run_sim_sweep

        return run_sim_sweep(cfg, folder)
    if kind == "real_replay":
        from harness.studies.real_replay import run_real_replay

        return run_real_replay(cfg, folder)
    if kind == "splitwise_provisioning":
        from harness.studies.splitwise_provisioning import run_splitwise_provisioning

        return run_splitwise_provisioning(cfg, folder)
    from harness.studies.placement_search import run_placement_search

    return run_placement_search(cfg, folder)
