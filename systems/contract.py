"""The engine contract: what the harness asks of every deployment, simulated or real, and what it gets back.

A deployment is a context manager brought up once per serving job (``with open_deployment(cfg, folder)
as d``: the factory is ``harness.engines``), runs one or more measured points (``d.run_point``) and is
always torn down, even on Ctrl-C or an error. Every point returns one ``RequestRecord`` per issued
request. Deployments that serve over HTTP do not drive load themselves: the harness hands them a
:class:`LoadDriver` (the suite's load generator), so dependencies point one way, harness -> systems.

This module imports nothing from the factory, the harness's jobs or any deployment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol

from systems.config import HardwareConfig, ModelConfig, SystemConfig
from vocab.errors import UserError
from vocab.records import RecordFieldColumns, RequestRecord
from workloads.base import WorkloadRequests


class DeploymentError(UserError, RuntimeError):
    """A deployment cannot start or failed while serving (a server died, a component stopped answering)."""


@dataclass(frozen=True)
class EngineResult:
    """Records of every issued request of one point, plus what the engine knows about it.

    ``records`` is a tuple, or a sequence that makes them when first read (the simulator's). ``columns``:
    the same records as columns, when the engine holds them that way (the harness then reads them instead
    of the records)."""

    records: Sequence[RequestRecord]
    n_gpus: int = 1
    invalid_reasons: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)  # engine-side measurements (e.g. prefix hits)
    columns: Optional[RecordFieldColumns] = None


class JobFolder(Protocol):
    """Where a deployment keeps its files: the job's results folder (``harness.results.RunFolder``)."""

    @property
    def path(self) -> Path: ...

    def write_table(self, name: str, table: Any) -> Path:
        """Write a table (a pandas DataFrame) as ``name`` (.parquet or .csv)."""
        ...

    def write_point_rows(self, name: str, points: Sequence[tuple[int, Sequence[Mapping[str, Any]]]]) -> Path:
        """Write every point's rows (dicts) as one table, a ``point`` column first: the file of
        ``pd.concat`` over the points of ``pd.DataFrame(rows)`` with ``point`` inserted first."""
        ...


class SLOBounds(Protocol):
    """The latency bounds a scheduler may use for admission (``harness.slo.SLOConfig``), in ms."""

    @property
    def ttft_ms(self) -> Optional[float]: ...

    @property
    def tpot_ms(self) -> Optional[float]: ...

    @property
    def tbt_ms(self) -> Optional[float]: ...


class DeploymentConfig(Protocol):
    """The parts of the run configuration (``harness.config.Config``) a deployment reads."""

    @property
    def system(self) -> SystemConfig: ...

    @property
    def engine(self) -> Any: ...  # the engine's schema (systems.engine_config); each deployment narrows it

    @property
    def model(self) -> ModelConfig: ...

    @property
    def hardware(self) -> HardwareConfig: ...

    @property
    def slo(self) -> SLOBounds: ...

    @property
    def workload(self) -> Any: ...  # workloads.config.WorkloadConfig: every kind has a block_size

    @property
    def seed(self) -> int: ...


class Deployment(Protocol):
    """A running system under test."""

    context_limit: int | None  # prompt + output tokens the engine accepts; None when unlimited (simulator)
    kv_block_size: int  # the engine's KV block, for predicting prefix hits

    def __enter__(self) -> Deployment: ...

    def __exit__(self, *exc: object) -> Optional[bool]: ...

    def run_point(self, requests: WorkloadRequests, folder: JobFolder) -> EngineResult: ...

    def check_health(self) -> None:
        """Raise ``DeploymentError`` if a component died."""
        ...

    def describe(self) -> dict[str, Any]: ...


class LoadRun(Protocol):
    """What one load run returns (``harness.loadgen.LoadResult``)."""

    @property
    def records(self) -> tuple[RequestRecord, ...]: ...

    @property
    def invalid_reasons(self) -> tuple[str, ...]: ...

    @property
    def info(self) -> dict[str, Any]: ...


class LoadDriver(Protocol):
    """Sends a workload to an HTTP deployment: the harness's load generator, bound to the run's model,
    seed and ``engine.load`` settings (prompt tokens, limits, timeouts); the deployment only says where."""

    def run(self, requests: WorkloadRequests, base_url: str, served_model: Optional[str] = None,
            api_key: Optional[str] = None) -> LoadRun:
        """Issue ``requests`` on their schedule to the OpenAI-compatible server at ``base_url`` (model
        ``served_model``, default the run's model name); one record per request."""
        ...

    def warm_up(self, base_url: str, n: int, who: str) -> None:
        """``n`` closed-loop requests whose prompts no workload shares; ``DeploymentError`` naming ``who``
        when one fails."""
        ...
