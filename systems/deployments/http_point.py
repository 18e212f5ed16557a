"""One measured point against an OpenAI-compatible URL: a ``/metrics`` scrape before and after, the
harness's load driver in between, and vLLM's prefix-cache counters of the point. Shared by every HTTP
deployment."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, Optional

from systems.contract import EngineResult, LoadDriver
from systems.launch.processes import http_get
from systems.launch.prometheus import VllmCacheMetrics, delta
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)


def scrape(url: str, timeout_s: float = 10.0) -> Optional[VllmCacheMetrics]:
    """vLLM cache counters at ``url`` (a ``/metrics`` endpoint); None when unreachable."""
    try:
        status, body = http_get(url, timeout_s=timeout_s)
    except OSError as exc:
        log.warning("cannot scrape %s: %s", url, exc)
        return None
    if status != 200:
        log.warning("cannot scrape %s: HTTP %d", url, status)
        return None
    return VllmCacheMetrics.from_text(body.decode("utf-8", errors="replace"))


def scrape_all(urls: Mapping[str, str]) -> dict[str, Optional[VllmCacheMetrics]]:
    return {name: scrape(url) for name, url in urls.items()}


def cache_info(before: Mapping[str, Optional[VllmCacheMetrics]],
               after: Mapping[str, Optional[VllmCacheMetrics]]) -> dict[str, Any]:
    """Prefix-cache counters accumulated during the point, summed over instances, plus per instance."""
    info: dict[str, Any] = {}
    queries = hits = ext_queries = ext_hits = 0.0
    usage_max = 0.0
    complete = True
    for name in before:
        b, a = before[name], after.get(name)
        if b is None or a is None:
            complete = False
            continue
        d = delta(b, a)
        queries += d.prefix_cache_queries
        hits += d.prefix_cache_hits
        ext_queries += d.external_prefix_cache_queries
        ext_hits += d.external_prefix_cache_hits
        usage_max = max(usage_max, a.kv_cache_usage)
        info[f"{name}_prefix_hit_rate"] = d.hit_rate
        info[f"{name}_prefix_cache_queries"] = d.prefix_cache_queries
    if not before or not complete:
        info["metrics_scraped"] = False
        return info
    info.update({
        "metrics_scraped": True,
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "prefix_hit_rate": hits / queries if queries else math.nan,
        "external_prefix_cache_hits": ext_hits,
        "external_prefix_hit_rate": ext_hits / ext_queries if ext_queries else math.nan,
        "kv_cache_usage_at_end": usage_max,
    })
    return info


def run_http_point(driver: LoadDriver, requests: WorkloadRequests, base_url: str, metrics_urls: Mapping[str, str],
                   n_gpus: int, served_model: Optional[str] = None, api_key: Optional[str] = None) -> EngineResult:
    """Replay ``requests`` against ``base_url`` and return its records with the engines' cache counters."""
    before = scrape_all(metrics_urls)
    result = driver.run(requests, base_url, served_model, api_key)
    after = scrape_all(metrics_urls)
    info = {**cache_info(before, after), **{f"loadgen_{k}": v for k, v in result.info.items()
                                            if isinstance(v, int | float | str | bool)}}
    return EngineResult(records=result.records, n_gpus=n_gpus, invalid_reasons=result.invalid_reasons, info=info)
