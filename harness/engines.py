"""The engine interface and the factory that picks a deployment by ``(engine, system)``.

A deployment is brought up once per serving job (``with open_deployment(cfg, folder) as d``), runs
one or more measured points (``d.run_point``) and is always torn down, even on Ctrl-C or an error.
Every point returns one ``RequestRecord`` per issued request. Asking for a combination this version
does not ship is an error that says so, never a silent fallback.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.records import RequestRecord
from harness.results import RunFolder
from workloads.base import WorkloadRequests

NOT_SHIPPED: dict[str, str] = {}


class EngineUnavailableError(RuntimeError):
    """The requested engine/system combination is not part of this version of the suite."""


class DeploymentError(RuntimeError):
    """A deployment failed while serving (a server died, a component stopped answering)."""


@dataclass(frozen=True)
class EngineResult:
    """Records of every issued request of one point, plus what the engine knows about it."""

    records: tuple[RequestRecord, ...]
    n_gpus: int = 1
    invalid_reasons: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)  # engine-side measurements (e.g. prefix hits)


class Deployment(Protocol):
    """A running system under test."""

    context_limit: int | None  # prompt + output tokens the engine accepts; None when unlimited (simulator)
    kv_block_size: int  # the engine's KV block, for predicting prefix hits

    def run_point(self, requests: WorkloadRequests, folder: RunFolder) -> EngineResult: ...

    def check_health(self) -> None:
        """Raise ``DeploymentError`` if a component died."""
        ...

    def describe(self) -> dict[str, Any]: ...


def open_deployment(cfg: Any, folder: RunFolder) -> AbstractContextManager[Deployment]:
    """Bring up the deployment named by ``cfg.engine.name`` and ``cfg.system.name``."""
    engine, system = cfg.engine.name, cfg.system.name
    if engine == "sim":
        from systems.sim.deployment import SimDeployment

        return SimDeployment(cfg, folder)
    if engine == "endpoint":
        from systems.endpoint import EndpointDeployment

        return EndpointDeployment(cfg, folder)
    if engine == "vllm" and system == "vllm_baseline":
        from systems.vllm_baseline import VllmBaselineDeployment

        return VllmBaselineDeployment(cfg, folder)
    if engine == "vllm":
        from systems.disagg_vllm import DisaggVllmDeployment

        return DisaggVllmDeployment(cfg, folder)
    if engine == "sglang":
        from systems.sglang_pd import SglangPDDeployment

        return SglangPDDeployment(cfg, folder)
    raise EngineUnavailableError(
        f"engine={engine}: {NOT_SHIPPED.get(engine, engine)} is not shipped in this version of the suite. "
        "What runs: engine=sim, engine=vllm and engine=sglang (GPU hosts) for every system, engine=endpoint "
        "engine.url=..., and job=workload.")
