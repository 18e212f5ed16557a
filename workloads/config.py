"""Structured-config schemas of the workloads (Hydra/OmegaConf), checked in ``__post_init__``.

OmegaConf rejects unknown keys, wrong types and missing (``???``) values while composing; the checks here
cover what a type cannot say (positive sizes, known kinds, values required by another value). They run
whenever a dataclass is constructed, including inside ``OmegaConf.to_object``, and raise
:class:`~workloads.errors.WorkloadConfigError` whose message starts with the offending key.
A ``???`` value is left to OmegaConf (and to :func:`missing_keys`), never checked here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from omegaconf import MISSING

from workloads.errors import WorkloadConfigError

ARRIVAL_KINDS = ("trace", "poisson", "gamma", "closed_loop")
# Accepted ranges of the arrival process's numbers. Outside them a schedule is absurd (a trace replayed
# 1e308 times slower has arrival times of inf; a rate of 1e-300 req/s puts the second request beyond the
# age of the universe), and the run would never end rather than fail.
RATE_RPS_RANGE = (1e-4, 1e7)  # requests per second (one per 2.8 hours .. ten million per second)
TIME_SCALE_RANGE = (1e-6, 1e4)  # trace replay: 1e6 times faster .. 1e4 times slower
CV_RANGE = (1e-3, 1e2)  # gamma coefficient of variation
# Token counts of one request (prompt or output), in traces and in configs: beyond any model's context. A
# larger count is a corrupt value, and would make the loaders build millions of hash ids for one request.
MAX_REQUEST_TOKENS = 10**7
MAX_GENERATED_REQUESTS = 10**7  # shared_prefix: num_groups x prompts_per_group x turns
WORKLOAD_KINDS = ("mooncake_trace", "azure_trace", "shared_prefix", "sharegpt_lengths", "distserve_requests")


def _is_missing(value: Any) -> bool:
    return isinstance(value, str) and value == MISSING


def _fail(key: str, problem: str) -> None:
    raise WorkloadConfigError(f"workload.{key}: {problem}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_int(key: str, value: Any, minimum: int, maximum: Optional[int] = None) -> None:
    if _is_missing(value):
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        _fail(key, f"must be an integer {bound}, got {value!r}")
    if maximum is not None and value > maximum:
        _fail(key, f"must be an integer in [{minimum}, {maximum}], got {value!r}")


def _check_positive(key: str, value: Any) -> None:
    if _is_missing(value):
        return
    if not _is_number(value) or value <= 0:
        _fail(key, f"must be a finite number > 0, got {value!r}")


def _check_range(key: str, value: Any, bounds: tuple[float, float]) -> None:
    """``value`` is a finite number within ``bounds`` (inclusive)."""
    if _is_missing(value):
        return
    low, high = bounds
    if not _is_number(value) or not low <= value <= high:
        _fail(key, f"must be a finite number in [{low:g}, {high:g}], got {value!r}")


def missing_keys(cfg: Any, prefix: str = "workload") -> list[str]:
    """Dotted keys of every field of a (nested) config dataclass still set to ``???``."""
    found: list[str] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}.{f.name}"
        if _is_missing(value):
            found.append(key)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            found.extend(missing_keys(value, key))
    return found


@dataclass
class ArrivalConfig:
    """When requests are issued: trace replay, an open-loop process, or a closed loop."""

    kind: str = "trace"  # trace | poisson | gamma | closed_loop
    rate_rps: Optional[float] = None  # required for poisson and gamma
    cv: float = 1.0  # gamma coefficient of variation (burstiness); 1.0 == Poisson
    time_scale: float = 1.0  # trace replay: scheduled = trace_time * time_scale (0.5 replays 2x faster)
    concurrency: Optional[int] = None  # required for closed_loop
    seed: int = 0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`WorkloadConfigError` naming the first invalid ``workload.arrival.*`` key."""
        if self.kind not in ARRIVAL_KINDS:
            _fail("arrival.kind", f"expected one of {', '.join(ARRIVAL_KINDS)}, got {self.kind!r}")
        if self.kind in ("poisson", "gamma"):
            if self.rate_rps is None or _is_missing(self.rate_rps):
                _fail(
                    "arrival.rate_rps",
                    f"required when arrival.kind={self.kind} (e.g. workload.arrival.rate_rps=2.0)",
                )
            _check_range("arrival.rate_rps", self.rate_rps, RATE_RPS_RANGE)
        elif self.rate_rps is not None:
            _check_range("arrival.rate_rps", self.rate_rps, RATE_RPS_RANGE)
        _check_range("arrival.cv", self.cv, CV_RANGE)
        _check_range("arrival.time_scale", self.time_scale, TIME_SCALE_RANGE)
        if self.kind == "closed_loop" and self.concurrency is None:
            _fail(
                "arrival.concurrency",
                "required when arrival.kind=closed_loop (e.g. workload.arrival.concurrency=8)",
            )
        if self.concurrency is not None:
            _check_int("arrival.concurrency", self.concurrency, 1)
        _check_int("arrival.seed", self.seed, 0)


def _synthetic_arrival_default() -> ArrivalConfig:
    """Poisson arrivals with the rate still to be given (``workload.arrival.rate_rps=...``).

    Built without running the rate check, so that the schema itself can be created; the check runs when
    the config is instantiated (``OmegaConf.to_object``) or when the workload is built.
    """
    arrival = ArrivalConfig()
    arrival.kind = "poisson"
    return arrival


@dataclass
class WorkloadConfig:
    """Fields common to every workload."""

    KIND: ClassVar[Optional[str]] = None  # the ``kind`` a subclass accepts; None: any known kind

    name: str = MISSING
    kind: str = MISSING  # mooncake_trace | azure_trace | shared_prefix | sharegpt_lengths
    max_requests: Optional[int] = None  # keep the first N requests
    block_tokens: Optional[int] = (
        None  # token-synthesis scale: each hash block becomes this many tokens (512 -> 16)
    )
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)

    def __post_init__(self) -> None:
        if not _is_missing(self.name) and (not isinstance(self.name, str) or not self.name):
            _fail("name", f"must be a non-empty string, got {self.name!r}")
        if not _is_missing(self.kind):
            if self.kind not in WORKLOAD_KINDS:
                _fail("kind", f"expected one of {', '.join(WORKLOAD_KINDS)}, got {self.kind!r}")
            if self.KIND is not None and self.kind != self.KIND:
                _fail("kind", f"{type(self).__name__} is the schema of kind {self.KIND!r}, got {self.kind!r}")
        if self.max_requests is not None:
            _check_int("max_requests", self.max_requests, 1)
        if self.block_tokens is not None:
            _check_int("block_tokens", self.block_tokens, 1, MAX_REQUEST_TOKENS)


@dataclass
class TraceFileConfig(WorkloadConfig):
    """Fields shared by the workloads replayed from a trace file."""

    file: str = MISSING  # relative to the data directory, e.g. mooncake_fast25/conversation_trace.jsonl
    block_size: int = 512  # tokens per hash block
    output_length: Optional[int] = None  # every request's output set to this many tokens (e.g. 1: prefill only,
    #                                      Mooncake FAST'25 §5.3.2); null: the lengths the trace records

    def __post_init__(self) -> None:
        super().__post_init__()
        if not _is_missing(self.file) and (not isinstance(self.file, str) or not self.file):
            _fail("file", f"must be a non-empty path, got {self.file!r}")
        _check_int("block_size", self.block_size, 1, MAX_REQUEST_TOKENS)
        if self.output_length is not None:
            _check_int("output_length", self.output_length, 1, MAX_REQUEST_TOKENS)


@dataclass
class MooncakeTraceConfig(TraceFileConfig):
    """Replay of a Mooncake FAST'25 JSONL trace."""

    KIND: ClassVar[Optional[str]] = "mooncake_trace"

    strict: bool = True  # False: skip bad rows, count them


@dataclass
class AzureTraceConfig(TraceFileConfig):
    """Replay of an Azure LLM inference trace 2023 CSV (no prefix information; block_size is the
    granularity of the never-shared synthetic hash ids)."""

    KIND: ClassVar[Optional[str]] = "azure_trace"


@dataclass
class ShareGPTLengthsConfig(TraceFileConfig):
    """Request lengths of ShareGPT conversations (no text, no timestamps), filtered as DistServe prepares
    ShareGPT (``evaluation/2-benchmark-serving/0-prepare-dataset.py`` in LLMServe/DistServe) and sampled at
    random like its benchmark client; arrivals come from a process (Poisson by default)."""

    KIND: ClassVar[Optional[str]] = "sharegpt_lengths"

    arrival: ArrivalConfig = field(default_factory=_synthetic_arrival_default)
    max_total_tokens: Optional[int] = 2048  # keep rows with prompt + output < this (OPT's context); null: all
    min_tokens: int = 4  # drop rows whose prompt and output are both shorter than this (DistServe's pruning)
    sample_seed: Optional[int] = 0  # shuffle the kept rows with this seed (a random sample); null: file order

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_total_tokens is not None:
            _check_int("max_total_tokens", self.max_total_tokens, 2)
        _check_int("min_tokens", self.min_tokens, 0)
        if self.sample_seed is not None:
            _check_int("sample_seed", self.sample_seed, 0)
        if isinstance(self.arrival, ArrivalConfig):
            if self.arrival.kind == "trace":
                _fail("arrival.kind", "'trace' needs trace timestamps, and sharegpt_lengths has none; use poisson, "
                      "gamma or closed_loop (e.g. workload.arrival.kind=poisson workload.arrival.rate_rps=2.0)")
            self.arrival.validate()


@dataclass
class DistServeRequestsConfig(TraceFileConfig):
    """The DistServe authors' OPT-13B ShareGPT requests (``distserve_opt13b_a100/workload/``): one run's file
    replayed with its arrivals (``arrival.kind=trace``), or a folder's files pooled as a length source with a
    synthetic arrival process (Poisson by default), shuffled by ``sample_seed`` so the first N are a sample."""

    KIND: ClassVar[Optional[str]] = "distserve_requests"

    arrival: ArrivalConfig = field(default_factory=_synthetic_arrival_default)
    sample_seed: Optional[int] = 0  # a pooled folder is shuffled with this seed; null: file order

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sample_seed is not None:
            _check_int("sample_seed", self.sample_seed, 0)
        if isinstance(self.arrival, ArrivalConfig):
            self.arrival.validate()


@dataclass
class SharedPrefixConfig(WorkloadConfig):
    """Synthetic groups of sessions that share a system prompt, optionally multi-turn and Zipf-skewed."""

    KIND: ClassVar[Optional[str]] = "shared_prefix"

    arrival: ArrivalConfig = field(default_factory=_synthetic_arrival_default)
    num_groups: int = 8
    prompts_per_group: int = 16  # sessions per group (exact when zipf_alpha == 0)
    shared_prefix_len: int = 1024  # tokens
    question_len: int = 128  # tokens per turn
    output_len: int = 64  # tokens per turn (answer), also the history added to the next turn
    turns: int = 1  # turns per session (multi-turn: each turn's prompt contains all previous turns)
    zipf_alpha: float = 0.0  # > 0: group of each session drawn from Zipf(alpha) over groups
    block_size: int = 16  # hash-block granularity; all token lengths must be multiples of it
    max_input_len: Optional[int] = None  # error (not drop) if a prompt would exceed it
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("num_groups", "prompts_per_group", "turns"):
            _check_int(key, getattr(self, key), 1, MAX_GENERATED_REQUESTS)
        for key in ("block_size", "question_len", "output_len"):
            _check_int(key, getattr(self, key), 1, MAX_REQUEST_TOKENS)
        _check_int("shared_prefix_len", self.shared_prefix_len, 0, MAX_REQUEST_TOKENS)
        _check_int("seed", self.seed, 0)
        if self.max_input_len is not None:
            _check_int("max_input_len", self.max_input_len, 1)
        counts = (self.num_groups, self.prompts_per_group, self.turns)
        if not any(_is_missing(c) for c in counts) and math.prod(counts) > MAX_GENERATED_REQUESTS:
            _fail("num_groups", f"num_groups x prompts_per_group x turns = {math.prod(counts)} requests, more than "
                  f"{MAX_GENERATED_REQUESTS}")
        if not _is_missing(self.turns) and not any(_is_missing(getattr(self, k)) for k in
                                                   ("shared_prefix_len", "question_len", "output_len")):
            longest = self.shared_prefix_len + (self.turns - 1) * (self.question_len + self.output_len) + self.question_len
            if longest > MAX_REQUEST_TOKENS:
                _fail("turns", f"the last turn's prompt would be {longest} tokens (shared_prefix_len + (turns - 1) x "
                      f"(question_len + output_len) + question_len), more than {MAX_REQUEST_TOKENS}")
        if not _is_missing(self.zipf_alpha) and (not _is_number(self.zipf_alpha) or self.zipf_alpha < 0):
            _fail("zipf_alpha", f"must be a finite number >= 0, got {self.zipf_alpha!r}")
        # Lengths that become prompt content must fill whole blocks. The answer is prompt content only
        # from the second turn on.
        multi_turn = isinstance(self.turns, int) and self.turns > 1
        multiples = ["shared_prefix_len", "question_len"] + (["output_len"] if multi_turn else [])
        for key in multiples:
            value = getattr(self, key)
            if _is_missing(value) or not isinstance(self.block_size, int) or self.block_size < 1:
                continue
            if value % self.block_size:
                _fail(key, f"must be a multiple of workload.block_size={self.block_size}, got {value}")
        if isinstance(self.arrival, ArrivalConfig):
            if self.arrival.kind == "trace":
                _fail(
                    "arrival.kind",
                    "'trace' needs trace timestamps, and shared_prefix is a synthetic workload; "
                    "use poisson, gamma or closed_loop (e.g. workload.arrival.kind=poisson workload.arrival.rate_rps=2.0)",
                )
            self.arrival.validate()
