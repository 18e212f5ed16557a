"""What a simulation is given and what it gives back: the pools, links and policies of one deployment
(:class:`DeploymentSetup`, built from a config by :mod:`systems.sim.simulated_deployment`) and one run's requests, load
samples and counters (:class:`SimRun`). Plain dataclasses, kept out of the compiled core
(:mod:`systems.compiled_core`): studies pickle them to worker processes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from systems.config import HardwareConfig
from systems.policies.base import RoutingPolicy
from systems.policies.pd import PDScheduler
from systems.sim.links import LinkSpec
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.request import SimRequest
from vocab.records import RequestRecord


@dataclass(frozen=True)
class PoolSetup:
    """``count`` identical instances of one role."""

    role: str
    count: int
    shape: InstanceShape
    perf: PerfModel
    hardware: HardwareConfig

    @property
    def n_gpus(self) -> int:
        return self.count * self.shape.n_gpus


@dataclass(frozen=True)
class KVPoolSetup:
    """Mooncake's DRAM tiers (see the module docstring); ``dram_tokens_per_node == 0``: no pool."""

    dram_tokens_per_node: int = 0
    dram_bandwidth_gbps: float = 25.0
    remote_link: Optional[LinkSpec] = None
    replication_threshold: int = 0


@dataclass(frozen=True)
class DeploymentSetup:
    """Everything the simulator needs to run one deployment (built from a config by ``systems.sim.simulated_deployment``)."""

    system: str
    pools: tuple[PoolSetup, ...]
    kv_link: LinkSpec
    router: RoutingPolicy | None = None  # colocated systems
    scheduler: PDScheduler | None = None  # disaggregated systems
    prefix_caching: bool = True
    chunked_prefill: bool = True
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    layerwise_transfer: bool = False
    kv_handoff: str = "push"  # push: KV moves at prefill end; pull: it stays on the prefill instance until a decode has room
    num_layers: int = 80
    kv_pool: KVPoolSetup = field(default_factory=KVPoolSetup)
    rejection: str = "none"  # "baseline" is applied here, after prefill; the rest by the scheduler
    tbt_slo_s: Optional[float] = None
    decode_load_threshold: float = 1.0  # decode rejection: the pool is overloaded above this average TBT ratio
    max_model_len: Optional[int] = None
    mixed_overflow_queue_s: float = 1.0
    sample_interval_s: float = 10.0
    kv_link_per_gpu: bool = False  # kv_link is each GPU's NIC: an instance of n GPUs sends over n at once
    whole_prompts: bool = False  # no instance chunks prompts (prefill ones too); decodes join iterations that fit
    mixed_pool: str = "dedicated"  # dedicated (the mixed instances) | dynamic (machines lent; module docstring)
    mixed_prompt_queue_tokens: int = 8192  # dynamic: a prompt machine's queue is long beyond this

    @property
    def n_gpus(self) -> int:
        return sum(p.n_gpus for p in self.pools)

    def pool(self, role: str) -> Optional[PoolSetup]:
        return next((p for p in self.pools if p.role == role and p.count > 0), None)


@dataclass
class SimRun:
    """What one simulation produced."""

    requests: list[SimRequest]
    load_samples: list[dict[str, Any]]
    info: dict[str, Any]

    def records(self) -> tuple[RequestRecord, ...]:
        """One ``RequestRecord`` per request, in request order."""
        return tuple(r.to_record() for r in self.requests)
