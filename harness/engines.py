"""The engine interface (simulator or real deployment) and the factory that picks one by name.

An engine takes the workload's fixed requests and schedule and returns one ``RequestRecord`` per
issued request. Engines are added by later parts of the suite; asking for one that this version does
not ship is an error that says so, never a silent fallback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.records import RequestRecord
from harness.results import RunFolder
from workloads.base import WorkloadRequests

AVAILABLE_ENGINES: dict[str, str] = {
    "sim": "the discrete-event cluster simulator (issue #4)",
    "vllm": "real vLLM deployments (issue #3)",
    "sglang": "SGLang launch on GPU hosts (issue #5)",
    "endpoint": "replay against a running OpenAI-compatible service (issue #3)",
}


class EngineUnavailableError(RuntimeError):
    """The requested engine is not part of this version of the suite."""


@dataclass(frozen=True)
class EngineResult:
    """Records of every issued request plus what the engine knows about validity and resources."""

    records: tuple[RequestRecord, ...]
    n_gpus: int = 1
    invalid_reasons: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)


class Engine(Protocol):
    """Runs a workload against a deployment."""

    def run(self, requests: WorkloadRequests, folder: RunFolder) -> EngineResult: ...


def build_engine(cfg: Any) -> Engine:
    """Return the engine named by ``cfg.engine.name`` for ``cfg.system``."""
    name = cfg.engine.name
    raise EngineUnavailableError(
        f"engine={name}: {AVAILABLE_ENGINES.get(name, name)} is not shipped in this version of the suite. "
        "What runs today: `python -m harness experiment=mooncake_cache_hit` (the prefix-cache study) and "
        "`python -m harness job=workload workload=...` (materialise and describe a workload)."
    )
