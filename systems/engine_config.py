"""Schemas of the ``engine`` group: how a deployment runs. One schema per engine, on a shared base.

``engine=sim`` runs the discrete-event simulator; ``vllm``, ``sglang`` and ``endpoint`` drive real
servers through the suite's load generator, configured by ``engine.load``. Checks that several engines
share (positive sizes, fractions, the Mooncake-style scheduling knobs) live on :class:`EngineConfig`;
which systems and routers an engine runs is :mod:`systems.topology`'s business.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from systems.launch.hosting.rules import HostingRules, check_rules
from systems.launch.mooncake_store import MIN_SEGMENT_BYTES, parse_size
from systems.policies.pd import REJECTION_MODES
from systems.router.conductor_view import EstimateStart
from systems.sim.perf.peer_timing import ITERATION_OVERHEADS, TOKEN_PHASE_TIMINGS
from systems.topology import ENGINES
from vocab.errors import ConfigError

DEVICES = ("auto", "cpu", "gpu")
HOSTINGS = ("local", "ray")  # engine.hosting of engine=vllm
RAY_BINDS = ("node_ip", "loopback")
MIXED_POOLS = ("dedicated", "dynamic")  # engine.mixed_pool of engine=sim
KV_HANDOFFS = ("push", "pull")  # engine.kv_handoff of engine=sim
MIN_SAMPLE_INTERVAL_S = 1e-3  # engine.sample_interval_s: load samples at most every millisecond of simulated time


LISTENER_FLAGS = ("--host", "--port")


def check_extra_args(extra_args: Any) -> None:
    """``engine.extra_args`` is a list of strings that does not choose the servers' listeners: the deployment
    binds every server to the address its hosting gives it (127.0.0.1 locally) on a port it allocates, and a
    ``--host 0.0.0.0`` appended after that would silently expose the server on every interface."""
    if not isinstance(extra_args, list | tuple) or not all(isinstance(a, str) for a in extra_args):
        raise ConfigError(f"engine.extra_args: expected a list of strings, got {extra_args!r}")
    for arg in extra_args:
        flag = arg.split("=", 1)[0]
        if flag in LISTENER_FLAGS:
            raise ConfigError(f"engine.extra_args: {arg!r} is refused: the deployment chooses each server's "
                              f"address (127.0.0.1, or its node's with engine.hosting=ray) and port itself; "
                              f"remove {flag} from engine.extra_args")


def _positive(key: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(f"engine.{key}: must be > 0, got {value}")


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
            raise ConfigError(f"engine.load.warmup_requests: must be >= 0, got {self.warmup_requests}")


@dataclass
class EngineConfig:
    """Fields every engine has, and the checks several engines share."""

    name: str = MISSING
    description: str = ""
    cap_to_context: bool = True  # shorten prompts that do not fit the model's context (counted in the summary);
    #                              false on engine=sim: such requests fail

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise ConfigError(f"engine.name: expected one of {', '.join(ENGINES)}, got {self.name!r}")

    def _check_positive(self, *keys: str) -> None:
        """Each ``engine.<key>`` is > 0 (``None`` allowed: unset)."""
        for key in keys:
            value = getattr(self, key)
            if value is not None:
                _positive(key, value)

    def _check_fraction(self, key: str) -> None:
        """``engine.<key>`` is in (0, 1]."""
        value = getattr(self, key)
        if not 0 < value <= 1:
            raise ConfigError(f"engine.{key}: must be in (0, 1], got {value}")

    @staticmethod
    def _check_scheduling(rejection: str, kvcache_balancing_threshold: float, decode_load_threshold: float) -> None:
        """The Mooncake-style admission and cache-balancing knobs (engines that schedule disaggregated systems)."""
        if rejection not in REJECTION_MODES:
            raise ConfigError(f"engine.rejection: expected one of {', '.join(REJECTION_MODES)}, got {rejection!r}")
        if kvcache_balancing_threshold < 1:
            raise ConfigError(f"engine.kvcache_balancing_threshold: must be >= 1, got {kvcache_balancing_threshold}")
        if not (math.isfinite(decode_load_threshold) and decode_load_threshold > 0):
            raise ConfigError(f"engine.decode_load_threshold: must be a finite number > 0 (the average TBT ratio, "
                              f"estimated TBT / TBT SLO, above which the decode pool counts as overloaded; 1 is the "
                              f"TBT SLO itself), got {decode_load_threshold}")


@dataclass
class SimPoolConfig:
    """Shape of every instance of one role in the simulator: GPU type and parallelism."""

    hardware: Optional[str] = None  # a conf/hardware name; None: the run's hardware group
    tp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        if self.tp <= 0 or self.pp <= 0:
            raise ConfigError(f"engine.<pool>.tp/pp: must be > 0, got tp={self.tp} pp={self.pp}")


@dataclass
class ProfileAdjustConfig:
    """A correction fitted from measured runs on top of DistServe's profile (``engine.perf_model=distserve``):
    prefill times scaled, and a per-step and a per-sequence cost added to every decode step
    (``python -m harness experiment=distserve_real_replay`` fits them; docs/simulator.md)."""

    prefill_scale: float = 1.0
    step_ms: float = 0.0  # added to every decode step (iteration overhead outside the model's forward pass)
    seq_ms: float = 0.0  # added per sequence of a decode step (per-sequence scheduling, sampling, detokenising)

    def __post_init__(self) -> None:
        for key in ("prefill_scale", "step_ms", "seq_ms"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= (1e-3 if key == "prefill_scale" else 0.0)):
                raise ConfigError(f"engine.profile_adjust.{key}: expected a finite number "
                                  f"{'> 0' if key == 'prefill_scale' else '>= 0'}, got {value}")

    @property
    def identity(self) -> bool:
        return self.prefill_scale == 1.0 and self.step_ms == 0.0 and self.seq_ms == 0.0


@dataclass
class SimKVPoolConfig:
    """Mooncake's KV-cache pool in the simulator: node DRAM tier plus the other nodes' DRAM (remote tier).

    The HBM tier is every instance's own KV cache. ``dram_tokens_per_node: 0`` turns the pool off.
    """

    dram_tokens_per_node: int = 0
    dram_bandwidth_gbps: float = 25.0  # host DRAM -> HBM (PCIe Gen4 x16 per GPU, ~25 GB/s achievable); the Mooncake
    #                                    presets set 128 (FAST'25 Table 1, per node)
    remote_link: str = "rdma_800"  # how a node reads another node's DRAM (see systems/sim/links.py)
    replication_threshold: int = 0  # a block fetched remotely this many times is copied to the reader's DRAM (0: never)

    def __post_init__(self) -> None:
        if self.dram_tokens_per_node < 0:
            raise ConfigError(f"engine.kv_pool.dram_tokens_per_node: must be >= 0, got {self.dram_tokens_per_node}")
        _positive("kv_pool.dram_bandwidth_gbps", self.dram_bandwidth_gbps)
        if self.replication_threshold < 0:
            raise ConfigError(f"engine.kv_pool.replication_threshold: must be >= 0, got {self.replication_threshold}")


@dataclass
class SimEngineConfig(EngineConfig):
    """The discrete-event cluster simulator."""

    perf_model: str = "roofline"  # roofline | distserve | splitwise | fitted (engine.profile) (systems/sim/perf)
    profile: Optional[str] = None  # perf_model=fitted: path of the profile JSON a calibration wrote
    #                                (python -m harness experiment=calibrate_cpu); required then, refused otherwise
    profile_check: bool = True  # false: use a profile measured on another CPU model or with another model anyway
    #                             (the mismatch is logged)
    profiles_dir: Optional[str] = None  # public latency profiles; default search: $PERF_PROFILES_DIR, ./data/perf_profiles, ../shared/perf_profiles
    profile_adjust: ProfileAdjustConfig = field(default_factory=ProfileAdjustConfig)  # perf_model=distserve only
    iteration_overhead: str = "none"  # none | simdistserve: add DistServe's simulator's 2 ms + 1e-4 ms/token per iteration
    token_phase_timing: str = "ours"  # ours | splitwise_sim: decode steps looked up as splitwise-sim does (perf_model=splitwise)
    gpu_memory_utilization: float = 0.9
    colocated: SimPoolConfig = field(default_factory=SimPoolConfig)
    prefill: SimPoolConfig = field(default_factory=SimPoolConfig)
    decode: SimPoolConfig = field(default_factory=SimPoolConfig)
    mixed: SimPoolConfig = field(default_factory=SimPoolConfig)  # Splitwise's mixed pool (system.mixed_instances)
    chunked_prefill: bool = True  # colocated instances mix prefill chunks with decodes (vLLM v1); false: vLLM v0's
    #                               default scheduler (whole prompts; an iteration that prefills runs no decodes)
    whole_prompts: bool = False  # splitwise-sim's batching (needs chunked_prefill=false): no instance chunks a prompt,
    #                              prefill ones included; whole prompts FCFS within max_num_batched_tokens (the first
    #                              may exceed it), and running decodes join an iteration when all fit the budget
    max_num_batched_tokens: int = 8192  # tokens per iteration (prefill chunk budget)
    max_num_seqs: int = 256  # running sequences per instance
    kv_link: str = "rdma_200"  # prefill -> decode KV transfer link (systems/sim/links.py)
    kv_link_per_gpu: bool = False  # kv_link is each GPU's own NIC (DGX: one per GPU): an instance of n GPUs sends
    #                                over n of them at once; false: one kv_link per instance (a node's NICs)
    layerwise_transfer: bool = False  # overlap the KV transfer with the prefill, layer by layer (Splitwise)
    kv_handoff: str = "push"  # push: a finished prefill's KV moves to a decode instance at once (and waits there when
    #                           none has room); pull: DistServe's, the KV stays on the prefill instance (holding its
    #                           memory) until a decode instance has room for it (decoding_stage_scheduler.py)
    kv_pool: SimKVPoolConfig = field(default_factory=SimKVPoolConfig)
    rejection: str = "none"  # none | baseline (after prefill) | early | predictive
    decode_load_threshold: float = 1.0  # rejection: the decode pool is overloaded when its average TBT ratio
    #                                     (estimated TBT / TBT SLO over decode instances) exceeds this
    kvcache_balancing_threshold: float = 2.0
    mixed_overflow_queue_s: float = 1.0  # Splitwise: a prompt goes to the mixed pool when the prompt pool's queue is longer
    mixed_pool: str = "dedicated"  # Splitwise's mixed pool: dedicated (system.mixed_instances take overflow) | dynamic
    #                                (the paper's: prompt and token machines are lent to it when the other pool is
    #                                saturated and return once idle; systems/sim/simulation.py)
    mixed_prompt_queue_tokens: int = 8192  # dynamic: a prompt machine's queue is long beyond this many pending
    #                                        tokens (splitwise-sim mixed_pool.yml prompt_max_pending_batch_tokens)
    sample_interval_s: float = 10.0  # load time series (load.csv) sampling period in simulated seconds
    progress: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_positive("max_num_batched_tokens", "max_num_seqs")
        if not MIN_SAMPLE_INTERVAL_S <= self.sample_interval_s < math.inf:  # also refuses nan
            raise ConfigError(f"engine.sample_interval_s: must be a finite number >= {MIN_SAMPLE_INTERVAL_S:g} "
                              f"(simulated seconds between load samples), got {self.sample_interval_s}")
        self._check_fraction("gpu_memory_utilization")
        self._check_scheduling(self.rejection, self.kvcache_balancing_threshold, self.decode_load_threshold)
        self._check_peer_timing()
        self._check_profile()
        if self.kv_handoff not in KV_HANDOFFS:
            raise ConfigError(f"engine.kv_handoff: expected one of {', '.join(KV_HANDOFFS)}, got {self.kv_handoff!r}")
        if not self.profile_adjust.identity and self.perf_model != "distserve":
            raise ConfigError(f"engine.profile_adjust: corrects DistServe's profile (engine.perf_model=distserve); "
                              f"this run uses engine.perf_model={self.perf_model}")
        if self.mixed_pool not in MIXED_POOLS:
            raise ConfigError(f"engine.mixed_pool: expected one of {', '.join(MIXED_POOLS)}, got {self.mixed_pool!r}")
        self._check_positive("mixed_prompt_queue_tokens")
        if self.whole_prompts and self.chunked_prefill:
            raise ConfigError("engine.whole_prompts: never chunks prompts, so it needs engine.chunked_prefill=false")

    def _check_peer_timing(self) -> None:
        """The peer simulators' timing options (systems/sim/perf/peer_timing.py)."""
        if self.iteration_overhead not in ITERATION_OVERHEADS:
            raise ConfigError(f"engine.iteration_overhead: expected one of {', '.join(ITERATION_OVERHEADS)}, "
                              f"got {self.iteration_overhead!r}")
        if self.token_phase_timing not in TOKEN_PHASE_TIMINGS:
            raise ConfigError(f"engine.token_phase_timing: expected one of {', '.join(TOKEN_PHASE_TIMINGS)}, "
                              f"got {self.token_phase_timing!r}")
        if self.token_phase_timing == "splitwise_sim" and self.perf_model != "splitwise":
            raise ConfigError("engine.token_phase_timing=splitwise_sim looks decode steps up in splitwise-sim's "
                              "perf_model.csv, which only engine.perf_model=splitwise reads; got "
                              f"engine.perf_model={self.perf_model}")

    def _check_profile(self) -> None:
        """``engine.profile`` goes with ``engine.perf_model=fitted`` and only with it (the file is read and
        checked when the cluster is planned, systems/sim/simulated_deployment.py)."""
        if self.perf_model == "fitted" and not self.profile:
            raise ConfigError("engine.profile: engine.perf_model=fitted needs the path of a profile JSON "
                              "(written by python -m harness experiment=calibrate_cpu); got none")
        if self.perf_model != "fitted" and self.profile:
            raise ConfigError(f"engine.profile: only engine.perf_model=fitted reads a profile; got "
                              f"engine.profile={self.profile} with engine.perf_model={self.perf_model}")
        if self.kv_link == "profile" and self.perf_model != "fitted":
            raise ConfigError(f"engine.kv_link: 'profile' is the fitted KV transfer of engine.profile, which needs "
                              f"engine.perf_model=fitted; got engine.perf_model={self.perf_model}")

    def pool(self, role: str) -> SimPoolConfig:
        """The shape of every instance of ``role`` (``colocated``, ``prefill``, ``decode`` or ``mixed``)."""
        return getattr(self, role)


@dataclass
class RealEngineConfig(EngineConfig):
    """Engines that serve real requests over HTTP."""

    load: LoadConfig = field(default_factory=LoadConfig)
    reset_prefix_cache: bool = True  # after warm-up, before every measured point


@dataclass
class VllmRoleConfig:
    """Resources of every vLLM instance of one role in a disaggregated deployment."""

    cores: Optional[str] = None  # CPU: VLLM_CPU_OMP_THREADS_BIND, e.g. "0" or "0-1"; None: the default layout
    nice: Optional[int] = None  # CPU: the instances' nice value; None: engine.server_nice
    hardware: Optional[str] = None  # a conf/hardware name for the price/power table; None: the run's hardware
    tensor_parallel_size: Optional[int] = None  # GPU: per-instance TP of this role; None: engine.tensor_parallel_size
    devices: Optional[list[int]] = None  # GPU: device ids this role's instances take in turn, tp at a time (e.g.
    #                                      the H100s of a mixed host); None: the next free ids
    cpu_kvcache_space_gib: Optional[int] = None  # CPU: KV cache per instance of this role; None: engine.cpu_kvcache_space_gib

    def __post_init__(self) -> None:
        for key in ("tensor_parallel_size", "cpu_kvcache_space_gib"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"engine.<role>.{key}: must be >= 1, got {value}")


@dataclass
class VllmKVPoolConfig:
    """The Mooncake Store pool of ``system=mooncake``: ``mooncake_master`` plus pool nodes (on 127.0.0.1, or on
    the Ray nodes ``engine.hosting_rules`` choose)."""

    pool_nodes: int = 1  # processes that contribute DRAM to the pool (0: the prefill instances do, embedded)
    segment_size: str = "256MB"  # per pool node
    instance_segment_size: str = "256MB"  # per prefill instance when pool_nodes is 0 (embedded mode)
    local_buffer_size: str = "64MB"
    lookup_async: bool = True  # the store lookup never blocks the engine (decoding goes on when the master is down)
    load_failure_policy: str = "recompute"  # recompute | fail: what a prefill does when a pool read fails
    master_binary: str = "mooncake_master"  # found next to the Python interpreter or on PATH
    query_timeout_s: float = 0.5  # the router's existence check gives up after this
    master_rpc_timeout_s: float = 2.0  # every client's call to mooncake_master gives up after this (Mooncake: 30 s)
    master_connect_timeout_s: float = 1.0  # and its connection attempts (Mooncake: 30 s each, 3 attempts)
    master_args: list[str] = field(default_factory=list)  # extra mooncake_master flags, e.g. [--eviction_ratio=0]

    def __post_init__(self) -> None:
        if self.pool_nodes < 0:
            raise ConfigError(f"engine.kv_pool.pool_nodes: must be >= 0, got {self.pool_nodes}")
        if self.load_failure_policy not in ("recompute", "fail"):
            raise ConfigError(f"engine.kv_pool.load_failure_policy: expected recompute or fail, got "
                              f"{self.load_failure_policy!r}")
        _positive("kv_pool.query_timeout_s", self.query_timeout_s)
        _positive("kv_pool.master_rpc_timeout_s", self.master_rpc_timeout_s)
        _positive("kv_pool.master_connect_timeout_s", self.master_connect_timeout_s)
        for key in ("segment_size", "instance_segment_size"):
            try:
                size = parse_size(getattr(self, key))
            except ValueError as exc:
                raise ConfigError(f"engine.kv_pool.{key}: {exc}") from exc
            if size < MIN_SEGMENT_BYTES:
                raise ConfigError(f"engine.kv_pool.{key}: Mooncake needs at least 16MB per segment, "
                                  f"got {getattr(self, key)}")


@dataclass
class VllmEngineConfig(RealEngineConfig):
    """vLLM servers started by the suite (vllm-cpu on CPU hosts, vllm on GPU hosts), on 127.0.0.1 or, with
    ``hosting=ray``, on a Ray cluster's nodes (:mod:`systems.launch.hosting`)."""

    device: str = "auto"  # auto: gpu when CUDA is visible, else cpu
    startup_timeout_s: float = 600.0
    max_model_len: Optional[int] = None  # default: model.max_model_len
    max_num_seqs: int = 64
    cpu_kvcache_space_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE per instance
    pin_cores: bool = True  # CPU: instance i bound to core i mod n_cores (VLLM_CPU_OMP_THREADS_BIND)
    server_nice: int = 10  # CPU: ready servers run at this nice value so the load generator and router,
    #                        which share the cores, send on time (0 disables)
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    kv_block_size: int = 128  # the engine's KV block (128 on vllm-cpu); cache-aware routing hashes in these
    extra_args: list[str] = field(default_factory=list)  # appended to every server command line
    # -- disaggregated systems (distserve, mooncake, splitwise) --------------------------------------------
    kv_connector: str = "auto"  # auto | mooncake | nixl: the prefill->decode connector (auto: mooncake)
    kv_protocol: str = "auto"  # auto: tcp on CPU hosts, rdma on GPU hosts (Mooncake transfer engine)
    kv_transfer_stall_s: int = 10  # a Mooncake transfer that makes no progress this long fails (Mooncake: 30 s)
    kv_unclaimed_s: int = 120  # a prefill frees KV its decode never pulled (a dead decode) after this (vLLM: 480 s)
    max_instances: int = 5  # CPU: vLLM instances one deployment may start (about 3 GiB each)
    prefill: VllmRoleConfig = field(default_factory=VllmRoleConfig)
    decode: VllmRoleConfig = field(default_factory=VllmRoleConfig)
    mixed: VllmRoleConfig = field(default_factory=VllmRoleConfig)  # Splitwise's mixed pool
    kv_pool: VllmKVPoolConfig = field(default_factory=VllmKVPoolConfig)
    rejection: str = "none"  # none | baseline | early | predictive (the router answers 429)
    decode_load_threshold: float = 1.0  # rejection: the decode pool is overloaded above this average TBT ratio
    kvcache_balancing_threshold: float = 2.0  # Conductor: fetch from the pool when it holds this many times the local match
    mixed_overflow_outstanding: int = 2  # Splitwise: prompts go to the mixed pool when every prompt instance has this many in flight
    router_estimates: EstimateStart = field(default_factory=EstimateStart)  # the router's cost model, refined online
    # -- where the servers run (systems/launch/hosting/, docs/cluster.md) ----------------------------------
    hosting: str = "local"  # local: this host | ray: the nodes of the Ray cluster at ray_address
    ray_address: Optional[str] = None  # host:port of the Ray head; None: $RAY_ADDRESS
    ray_bind: str = "node_ip"  # node_ip: servers bind their node's Ray address | loopback: 127.0.0.1
    ray_connect_timeout_s: float = 120.0  # joining the cluster, and each server's actor starting on its node
    hosting_rules: HostingRules = field(default_factory=HostingRules)  # per role: resources, labels, spread

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hosting not in HOSTINGS:
            raise ConfigError(f"engine.hosting: expected one of {', '.join(HOSTINGS)}, got {self.hosting!r}")
        if self.ray_bind not in RAY_BINDS:
            raise ConfigError(f"engine.ray_bind: expected one of {', '.join(RAY_BINDS)}, got {self.ray_bind!r}")
        check_rules(self.hosting_rules)
        if self.hosting == "ray":
            for role in ("prefill", "decode", "mixed"):
                if self.role(role).devices:
                    raise ConfigError(f"engine.{role}.devices: GPU ids are chosen by Ray with engine.hosting=ray "
                                      f"(each instance gets its TP degree in GPUs on its node); remove "
                                      f"engine.{role}.devices or use engine.hosting=local")
        if self.device not in DEVICES:
            raise ConfigError(f"engine.device: expected one of {', '.join(DEVICES)}, got {self.device!r}")
        self._check_positive("startup_timeout_s", "max_num_seqs", "cpu_kvcache_space_gib", "tensor_parallel_size",
                             "kv_block_size", "max_model_len", "max_instances", "mixed_overflow_outstanding")
        self._check_fraction("gpu_memory_utilization")
        self._check_scheduling(self.rejection, self.kvcache_balancing_threshold, self.decode_load_threshold)
        if self.kv_connector not in ("auto", "mooncake", "nixl"):
            raise ConfigError(f"engine.kv_connector: expected auto, mooncake or nixl, got {self.kv_connector!r}")
        _positive("kv_transfer_stall_s", self.kv_transfer_stall_s)
        _positive("kv_unclaimed_s", self.kv_unclaimed_s)
        check_extra_args(self.extra_args)
        if self.kv_protocol not in ("auto", "tcp", "rdma"):
            raise ConfigError(f"engine.kv_protocol: expected auto, tcp or rdma, got {self.kv_protocol!r}")

    def role(self, role: str) -> VllmRoleConfig:
        """The resources of every instance of ``role`` (``prefill``, ``decode`` or ``mixed``)."""
        return getattr(self, role)


_SGLANG_SIZE_RE = re.compile(r"^\s*\d+\s*(b|kb|mb|gb|tb)?\s*$", re.IGNORECASE)
_SGLANG_CHOICES = {
    "transfer_backend": ("mooncake", "nixl"),
    "transfer_protocol": ("rdma", "tcp"),
    "router_policy": ("random", "round_robin", "cache_aware", "power_of_two"),
    "hicache.storage_backend": ("mooncake", "file"),
    "hicache.write_policy": ("write_through", "write_back", "write_through_selective"),
    "hicache.mem_layout": ("layer_first", "page_first", "page_first_direct"),
    "hicache.io_backend": ("kernel", "direct"),
    "hicache.prefetch_policy": ("best_effort", "wait_complete", "timeout"),
    "hicache.protocol": ("rdma", "tcp"),
}


def _sglang_choice(key: str, value: Optional[str], nullable: bool = False) -> None:
    if nullable and value is None:
        return
    allowed = _SGLANG_CHOICES[key]
    if value not in allowed:
        extra = " or null" if nullable else ""
        raise ConfigError(f"engine.{key}: expected one of {', '.join(allowed)}{extra}, got {value!r}")


@dataclass
class SglangHiCacheConfig:
    """SGLang HiCache: GPU KV (L1) + host memory (L2) + a storage backend (L3), e.g. Mooncake Store.

    With ``storage_backend: mooncake`` the deployment starts ``mooncake_master`` on 127.0.0.1 and every
    server contributes ``global_segment_size`` of its host memory to the shared pool.
    """

    enabled: bool = False
    ratio: float = 2.0  # host KV pool / GPU KV pool (must be > 1)
    storage_backend: Optional[str] = "mooncake"  # mooncake | file | null (L1 + L2 only)
    write_policy: str = "write_through"  # write_through | write_back | write_through_selective
    mem_layout: str = "page_first"  # layer_first | page_first | page_first_direct
    io_backend: str = "kernel"  # kernel | direct
    prefetch_policy: str = "best_effort"  # best_effort | wait_complete | timeout
    decode_offload: bool = False  # PD: decode servers offload finished KV to the L3 store too
    global_segment_size: str = "4gb"  # Mooncake: host memory each server adds to the pool (bytes or <n>gb/mb)
    protocol: Optional[str] = None  # Mooncake: rdma | tcp; null: engine.transfer_protocol
    device: Optional[str] = None  # Mooncake RDMA device(s); null: engine.ib_device

    def __post_init__(self) -> None:
        if not self.ratio > 1:
            raise ConfigError(f"engine.hicache.ratio: must be > 1 (host pool larger than the GPU pool), "
                                    f"got {self.ratio}")
        _sglang_choice("hicache.storage_backend", self.storage_backend, nullable=True)
        for key in ("write_policy", "mem_layout", "io_backend", "prefetch_policy"):
            _sglang_choice(f"hicache.{key}", getattr(self, key))
        _sglang_choice("hicache.protocol", self.protocol, nullable=True)
        size = str(self.global_segment_size)
        if not _SGLANG_SIZE_RE.match(size) or not any(c in "123456789" for c in size):
            raise ConfigError(f"engine.hicache.global_segment_size: expected bytes > 0 or '<n>gb' / '<n>mb', "
                                    f"got {self.global_segment_size!r}")
        if self.decode_offload and self.storage_backend is None:
            raise ConfigError("engine.hicache.decode_offload: decode servers offload to an L3 store; "
                                    "set engine.hicache.storage_backend (mooncake or file)")


@dataclass
class SglangEngineConfig(RealEngineConfig):
    """SGLang servers (GPU hosts only): PD disaggregation over Mooncake or NIXL behind ``sglang_router``,
    or colocated servers; optional HiCache with Mooncake Store as L3. See docs/sglang.md."""

    startup_timeout_s: float = 900.0
    tensor_parallel_size: int = 1  # GPUs per server; server i gets its own block of tp GPUs
    transfer_backend: str = "mooncake"  # PD KV transfer: mooncake | nixl
    transfer_protocol: str = "rdma"  # Mooncake transfer engine: rdma | tcp (tcp: hosts without RDMA NICs)
    ib_device: Optional[str] = None  # --disaggregation-ib-device, e.g. mlx5_0; null: Mooncake auto-detects
    mem_fraction_static: Optional[float] = None  # null: SGLang's default for the GPU
    page_size: int = 64  # KV page in tokens (equal on prefill and decode; HiCache guides use 64)
    context_length: Optional[int] = None  # null: model.max_model_len
    chunked_prefill_size: Optional[int] = None  # null: SGLang's default; -1 disables chunked prefill
    max_running_requests: Optional[int] = None  # null: SGLang sizes it from the KV pool
    bootstrap_port_base: Optional[int] = None  # prefill i bootstraps on base + i; null: free ports
    router_policy: Optional[str] = None  # random | round_robin | cache_aware | power_of_two; null: from system.router
    hicache: SglangHiCacheConfig = field(default_factory=SglangHiCacheConfig)
    kv_block_size: Optional[int] = None  # cache-aware routing / hit prediction block; null: page_size
    extra_args: list[str] = field(default_factory=list)  # appended to every server command line

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_positive("startup_timeout_s", "tensor_parallel_size", "page_size", "context_length",
                             "max_running_requests", "kv_block_size")
        _sglang_choice("transfer_backend", self.transfer_backend)
        _sglang_choice("transfer_protocol", self.transfer_protocol)
        _sglang_choice("router_policy", self.router_policy, nullable=True)
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static < 1:
            raise ConfigError(f"engine.mem_fraction_static: must be in (0, 1) or null, got {self.mem_fraction_static}")
        if self.chunked_prefill_size is not None and self.chunked_prefill_size != -1 and self.chunked_prefill_size < 1:
            raise ConfigError(f"engine.chunked_prefill_size: must be >= 1, -1 (disabled) or null, "
                              f"got {self.chunked_prefill_size}")
        if self.bootstrap_port_base is not None and not 1024 <= self.bootstrap_port_base <= 65000:
            raise ConfigError(f"engine.bootstrap_port_base: must be in 1024..65000 or null, got {self.bootstrap_port_base}")
        if self.ib_device is not None and self.transfer_backend != "mooncake":
            raise ConfigError("engine.ib_device: applies to engine.transfer_backend=mooncake only "
                              "(NIXL picks devices through UCX_NET_DEVICES)")
        check_extra_args(self.extra_args)


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
            raise ConfigError(f"engine.url: expected an http(s) URL, got {self.url!r}")
        self._check_positive("n_gpus")


ENGINE_SCHEMAS = {
    "_schema_sim": SimEngineConfig,
    "_schema_vllm": VllmEngineConfig,
    "_schema_sglang": SglangEngineConfig,
    "_schema_endpoint": EndpointEngineConfig,
}
