"""The load generator as the engine contract's :class:`~systems.contract.LoadDriver`: what HTTP
deployments are handed to send their warm-up and their measured workloads.

It binds the run's model (for prompt tokens and the served name), seed and ``engine.load`` settings
(limits, timeouts), so a deployment only says where to send. Warm-up prompts use hash ids no workload
uses, so they never warm a prefix a measured request will ask for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from harness.loadgen import LoadGenOptions, LoadResult, TargetConfig, run_load
from harness.prompts import build_prompts
from systems.config import ModelConfig
from systems.contract import DeploymentError
from systems.engine_config import LoadConfig
from vocab.records import RequestSpec
from workloads.arrivals import ArrivalSchedule
from workloads.base import WorkloadRequests

WARMUP_HASH_BASE = 1 << 50  # warm-up prompts use hash ids no workload uses
WARMUP_PROMPT_TOKENS = 96


def warmup_specs(n: int, block_size: int = 16) -> list[RequestSpec]:
    """``n`` short requests whose blocks appear in no workload (hash ids from ``WARMUP_HASH_BASE``)."""
    blocks = WARMUP_PROMPT_TOKENS // block_size
    return [RequestSpec(request_id=i, arrival_s=0.0, input_length=WARMUP_PROMPT_TOKENS, output_length=4,
                        hash_ids=tuple(WARMUP_HASH_BASE + i * blocks + b for b in range(blocks)),
                        block_size=block_size) for i in range(n)]


@dataclass(frozen=True)
class LoadGenDriver:
    """Sends workloads with the suite's load generator (``harness.loadgen``)."""

    model: ModelConfig
    seed: int
    load: LoadConfig

    def run(self, requests: WorkloadRequests, base_url: str, served_model: Optional[str] = None,
            api_key: Optional[str] = None) -> LoadResult:
        target = TargetConfig(base_url=base_url, model=served_model or self.model.name, api_key=api_key,
                              request_timeout_s=self.load.request_timeout_s)
        prompts = build_prompts(requests.specs, self.model, seed=self.seed)
        options = LoadGenOptions(max_outstanding=self.load.max_outstanding, progress=self.load.progress,
                                 n_processes=self.load.processes, drain_timeout_s=self.load.request_timeout_s)
        return run_load(requests.specs, requests.schedule, prompts, target, options)

    def warm_up(self, base_url: str, n: int, who: str) -> None:
        if n <= 0:
            return
        specs = warmup_specs(n)
        target = TargetConfig(base_url=base_url, model=self.model.name)
        schedule = ArrivalSchedule(mode="closed", concurrency=1, offered_rate_rps=float("nan"), duration_s=0.0)
        result = run_load(specs, schedule, build_prompts(specs, self.model, self.seed), target,
                          LoadGenOptions(progress=False))
        failed = [r for r in result.records if r.status != "ok"]
        if failed:
            raise DeploymentError(f"{who}: warm-up request failed: {failed[0].error}")
