"""Workloads: trace loaders (Mooncake JSONL, Azure CSV, ShareGPT lengths, DistServe's measured A100 runs), the
shared-prefix generator, arrival processes and token synthesis. Build one with :func:`build_workload` and call ``.requests()``."""

from workloads.arrivals import ArrivalSchedule, RngStream, arrival_times, assign_arrivals, rng_stream
from workloads.azure_trace import AzureTraceWorkload, load_azure_trace, parse_timestamp_ticks
from workloads.base import (
    LoadedRequests,
    PrefixHitStats,
    Workload,
    WorkloadRequests,
    describe_specs,
    prefix_hit_stats,
)
from workloads.config import (
    ARRIVAL_KINDS,
    WORKLOAD_KINDS,
    ArrivalConfig,
    AzureTraceConfig,
    DistServeRequestsConfig,
    MooncakeTraceConfig,
    SharedPrefixConfig,
    ShareGPTLengthsConfig,
    WorkloadConfig,
)
from workloads.datadir import UPSTREAM_SOURCES, resolve_trace_path, search_dirs
from workloads.distserve_runs import DistServeRequestsWorkload, load_distserve_requests, read_measured_run
from workloads.errors import TraceFormatError, TraceNotFoundError, WorkloadConfigError, WorkloadError
from workloads.mooncake_trace import MooncakeTraceWorkload, load_mooncake_trace
from workloads.registry import (
    WORKLOAD_CLASSES,
    build_workload,
    known_kinds,
    to_workload_config,
    workload_class,
)
from workloads.shared_prefix import SharedPrefixWorkload, generate_shared_prefix
from workloads.sharegpt_lengths import ShareGPTLengthsWorkload, load_sharegpt_lengths
from workloads.tokens import VocabSpec, prompt_token_ids, scale_blocks

__all__ = [
    "ARRIVAL_KINDS",
    "UPSTREAM_SOURCES",
    "WORKLOAD_CLASSES",
    "WORKLOAD_KINDS",
    "ArrivalConfig",
    "ArrivalSchedule",
    "AzureTraceConfig",
    "AzureTraceWorkload",
    "LoadedRequests",
    "MooncakeTraceConfig",
    "MooncakeTraceWorkload",
    "PrefixHitStats",
    "RngStream",
    "ShareGPTLengthsConfig",
    "ShareGPTLengthsWorkload",
    "SharedPrefixConfig",
    "SharedPrefixWorkload",
    "TraceFormatError",
    "TraceNotFoundError",
    "VocabSpec",
    "Workload",
    "WorkloadConfig",
    "WorkloadConfigError",
    "WorkloadError",
    "WorkloadRequests",
    "arrival_times",
    "assign_arrivals",
    "build_workload",
    "describe_specs",
    "generate_shared_prefix",
    "known_kinds",
    "load_azure_trace",
    "load_mooncake_trace",
    "load_sharegpt_lengths",
    "DistServeRequestsConfig",
    "DistServeRequestsWorkload",
    "load_distserve_requests",
    "read_measured_run",
    "parse_timestamp_ticks",
    "prefix_hit_stats",
    "prompt_token_ids",
    "resolve_trace_path",
    "rng_stream",
    "scale_blocks",
    "search_dirs",
    "to_workload_config",
    "workload_class",
]
