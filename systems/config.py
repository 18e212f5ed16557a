"""Schemas of what is deployed: the system (roles, instance counts, router), the model and the hardware.

Hydra composes the ``system``, ``model`` and ``hardware`` groups onto these dataclasses (see
``harness.config``); the rules that tie a system to its roles, routers and engines are in
:mod:`systems.topology`. Figures for models come from their public configs and for hardware from vendor
data sheets (cited in each YAML).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from omegaconf import MISSING

from systems.topology import ROLES, SYSTEM_NAMES
from vocab.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # the Hydra config tree these schemas describe


@dataclass
class SystemConfig:
    """Which deployment design runs, and how many instances of each role it has."""

    name: str = MISSING
    description: str = ""
    colocated_instances: int = 0  # vLLM-style instances doing prefill and decode
    prefill_instances: int = 0
    decode_instances: int = 0
    mixed_instances: int = 0  # Splitwise's mixed pool: instances that run both phases and take overflow
    router: str = "round_robin"  # routing policy (systems/topology.py lists the names each system takes)
    gpu_budget: Optional[int] = None  # GPUs (CPU hosts: instances) the deployment may use, checked for every engine
    #                                   with the config (systems/gpu_budget.py says how each engine counts); None: unlimited
    prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.name not in SYSTEM_NAMES:
            raise ConfigError(f"system.name: expected one of {', '.join(SYSTEM_NAMES)}, got {self.name!r}")
        for role in ROLES:
            if self.count(role) < 0:
                raise ConfigError(f"system.{role}_instances: must be >= 0, got {self.count(role)}")
        if self.gpu_budget is not None and self.gpu_budget < 1:
            raise ConfigError(f"system.gpu_budget: must be >= 1 or null (no limit), got {self.gpu_budget}")

    def count(self, role: str) -> int:
        """Instances of ``role`` (``colocated``, ``prefill``, ``decode`` or ``mixed``)."""
        return int(getattr(self, f"{role}_instances"))

    @property
    def n_instances(self) -> int:
        return sum(self.count(role) for role in ROLES)


@dataclass
class ModelConfig:
    """Model shape (enough for KV sizing and performance models) and where its weights live."""

    name: str = MISSING
    path: Optional[str] = None  # local checkpoint folder (synthetic models: where the build is cached)
    synthetic: bool = False  # True: built locally with random weights and a local tokenizer (tiny_llama)
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_attention_heads: int = MISSING
    num_kv_heads: int = MISSING
    head_dim: int = MISSING
    intermediate_size: int = MISSING
    vocab_size: int = MISSING
    max_model_len: int = MISSING
    params_billion: float = MISSING
    kv_dtype_bytes: int = 2
    special_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for key in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
                    "vocab_size", "max_model_len", "kv_dtype_bytes"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"model.{key}: must be > 0, got {getattr(self, key)}")
        if self.num_attention_heads % self.num_kv_heads:
            raise ConfigError("model.num_kv_heads: must divide model.num_attention_heads")

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer and KV head (GQA-aware)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes


@dataclass
class HardwareConfig:
    """One accelerator (or CPU host) type. Figures come from vendor data sheets (cited in the YAML).

    The efficiency, latency and overhead keys feed the simulator's roofline model
    (``systems/sim/perf/roofline.py``); the YAML states where each number comes from.
    """

    name: str = MISSING
    kind: str = "gpu"  # gpu | cpu
    peak_tflops_bf16: float = MISSING  # dense
    mem_bandwidth_gbps: float = MISSING  # GB/s
    mem_gib: float = MISSING
    devices_per_node: int = 1
    power_w: Optional[float] = None  # per device (TDP, or the cap of a power-capped part)
    price_per_hour_usd: Optional[float] = None  # per device
    interconnect_gbps: Optional[float] = None  # intra-node GB/s per device, bidirectional (as data sheets quote)
    compute_efficiency: float = 0.6  # achievable fraction of peak_tflops_bf16 in dense GEMMs
    attention_efficiency: Optional[float] = None  # the same for attention (FlashAttention); null: compute_efficiency
    memory_efficiency: float = 0.8  # achievable fraction of mem_bandwidth_gbps when streaming weights/KV
    interconnect_efficiency: float = 0.7  # achievable fraction of interconnect_gbps in an all-reduce
    allreduce_latency_us: float = 10.0  # fixed cost of one all-reduce per log2(tp) step
    iteration_overhead_ms: float = 0.0  # fixed cost of one engine iteration (scheduling, launches, sampling)

    def __post_init__(self) -> None:
        if self.kind not in ("gpu", "cpu"):
            raise ConfigError(f"hardware.kind: expected gpu or cpu, got {self.kind!r}")
        for key in ("peak_tflops_bf16", "mem_bandwidth_gbps", "mem_gib", "devices_per_node"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"hardware.{key}: must be > 0, got {getattr(self, key)}")
        for key in ("power_w", "price_per_hour_usd", "interconnect_gbps"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ConfigError(f"hardware.{key}: must be > 0 or null, got {value}")
        for key in ("compute_efficiency", "memory_efficiency", "interconnect_efficiency", "attention_efficiency"):
            value = getattr(self, key)
            if value is None and key == "attention_efficiency":
                continue
            if not 0 < value <= 1:
                raise ConfigError(f"hardware.{key}: must be in (0, 1] (a fraction of the peak), got {value}")
        for key in ("allreduce_latency_us", "iteration_overhead_ms"):
            if getattr(self, key) < 0:
                raise ConfigError(f"hardware.{key}: must be >= 0, got {getattr(self, key)}")
