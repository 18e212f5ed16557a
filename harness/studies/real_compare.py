"""``job=compare``: the same workload served by several real deployments, one after another, in one job.

Each ``study.variants`` entry is a list of Hydra overrides (on top of the job's own command line), run as
a complete serving job (``job=serve``) in ``variants/<label>/``: bring-up, warm-up, the measured point,
tear-down. Only one deployment is up at a time, so a 24 GiB CPU host never runs more than one system's
instances. The job writes ``study.csv`` (one row per variant: latency, goodput, hit rates, KV transfer,
price and power, validity) and ``requests.parquet`` (every record, labelled), from which
``figures/disagg_compare.py`` draws the comparison. Every variant's workload is built before the first
deployment comes up, so a bad workload fails the job before any server starts. A variant that fails keeps
its own failed ``summary.json``, appears in ``study.csv`` with ``status: failed`` and its reason, and fails
the job. A variant that ran but is invalid (``harness/validity.py``) keeps ``status: ok`` with ``valid``
false and its reasons in ``validity_reasons``; the job's validity block holds every variant's block and is
valid only when all variants are.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from harness.config import Config
from harness.engines import open_deployment
from harness.jobs import JobResult
from harness.results import RunFolder
from harness.serve_job import PHASES, plan_serve, run_serve
from harness.studies.variants import compose_variant, describe_variant, job_overrides
from harness.validity import block_reasons, combine_validity
from systems.contract import Deployment
from systems.topology import topology_of
from vocab.errors import ConfigError
from vocab.records import RunSummary
from vocab.result_files import REQUESTS_FILE, STUDY_FILE, VARIANTS_DIR

log = logging.getLogger(__name__)

_KEPT = ("mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
         "p90_tpot_ms", "p99_tpot_ms", "goodput_rps", "slo_attainment", "request_throughput_rps",
         "output_throughput_tps", "n_issued", "n_ok", "n_failed", "n_rejected", "offered_rate_rps", "valid",
         *PHASES)
# engine-side numbers (the summary's ``engine_*`` columns) the comparison keeps, without the prefix
_ENGINE_KEPT = ("local_hit_rate", "pool_hit_rate", "prefill_compute_saved", "prefill_prompt_tokens",
                "prefill_computed_tokens", "kv_load_fallbacks", "router_to_mixed", "router_rejected",
                "deployment_price_per_hour_usd", "deployment_power_w", "prefix_hit_rate", "prefix_cache_queries",
                "prefix_cache_hits")


class CompareFailed(RuntimeError):
    """One or more variants of a comparison failed (their folders hold the reasons)."""


def failed_validity(reason: str) -> dict[str, Any]:
    """The validity block of a variant that did not complete: invalid, with the failure as its reason."""
    return {"valid": False, "reasons": [f"variant failed: {reason}"]}


def compare_validity(validities: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The job's validity block: valid only when every variant is; each variant's block (and reasons,
    prefixed with its label) kept under ``variants``."""
    return combine_validity(validities, kind="variants")


def _row(label: str, vcfg: Config, metrics: dict[str, Any], requests: pd.DataFrame,
         validity: dict[str, Any] | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"variant": label, "status": "ok", "reason": "", **describe_variant(vcfg)}
    row.update({k: metrics.get(k) for k in _KEPT})
    if validity is not None:
        row["valid"] = bool(validity.get("valid", False))
        row["validity_reasons"] = "; ".join(block_reasons(validity)) if not row["valid"] else ""
    # host interference and overload of the measured point(s) (harness/host_load.py; the worst point of a sweep)
    parts = [validity or {}, *((validity or {}).get("points") or [])]
    hosts = [p.get("host_load") or {} for p in parts]
    overloads = [p.get("overload") or {} for p in parts if (p.get("overload") or {}).get("checked")]
    for column in ("outside_cpu_share", "steal_share"):
        values = [float(h[column]) for h in hosts if isinstance(h.get(column), (int, float)) and h[column] == h[column]]
        row[column] = max(values) if values else math.nan
    row["overloaded"] = any(bool(o.get("overloaded")) for o in overloads) if overloads else None
    row.update({k: metrics.get(f"engine_{k}") for k in _ENGINE_KEPT})
    if row["local_hit_rate"] is None and row["prefix_hit_rate"] is not None:  # colocated: every hit is local
        row["local_hit_rate"], row["pool_hit_rate"] = row["prefix_hit_rate"], 0.0
        queries, hits = row["prefix_cache_queries"] or 0.0, row["prefix_cache_hits"] or 0.0
        row["prefill_prompt_tokens"], row["prefill_computed_tokens"] = queries, queries - hits
        row["prefill_compute_saved"] = hits / queries if queries else None
    colocated = not topology_of(vcfg.system.name).disaggregated
    if row["deployment_price_per_hour_usd"] is None and colocated:  # every instance on the run's hardware
        hw, n = vcfg.hardware, vcfg.system.n_instances
        row["deployment_price_per_hour_usd"] = hw.price_per_hour_usd * n if hw.price_per_hour_usd else None
        row["deployment_power_w"] = hw.power_w * n if hw.power_w else None
    tok_s = metrics.get("output_throughput_tps") or math.nan
    price, power = row["deployment_price_per_hour_usd"], row["deployment_power_w"]
    row["tokens_per_usd"] = tok_s * 3600.0 / price if price else math.nan
    row["tokens_per_joule"] = tok_s / power if power else math.nan
    extras = [json.loads(e) if isinstance(e, str) else e for e in requests["extra"]] if "extra" in requests else []
    extras = [e for e in extras if isinstance(e, dict)]
    for key in ("kv_transfer_s", "kv_transfer_bytes", "prefill_s", "decode_s"):
        values = [e[key] for e in extras if key in e]
        row[f"mean_{key}"] = float(np.mean(values)) if values else math.nan
    return row


def run_compare(cfg: Config, folder: RunFolder,
                deployment_factory: Callable[[Any, RunFolder], Deployment] = open_deployment) -> JobResult:
    """Serve the workload with every variant in turn and tabulate them (see the module docstring)."""
    variants = dict(cfg.study.variants)
    if not variants:
        raise ConfigError("study.variants: job=compare needs at least one variant (label: [overrides])")
    base = [o for o in job_overrides() if not o.startswith("job=")]
    composed = {label: compose_variant([*base, *overrides, "job=serve"]) for label, overrides in variants.items()}
    # every workload is built (and checked) before the first deployment comes up
    plans = {label: plan_serve(vcfg) for label, vcfg in composed.items()}
    rows, frames, failed = [], [], []
    validities: dict[str, dict[str, Any]] = {}
    for label, vcfg in composed.items():
        sub = RunFolder(folder.path / VARIANTS_DIR / label)
        sub.path.mkdir(parents=True, exist_ok=True)
        log.info("variant %s: system=%s engine=%s", label, vcfg.system.name, vcfg.engine.name)
        try:
            result = run_serve(vcfg, sub, deployment_factory, plans.pop(label))
        except Exception as exc:  # keep going: the other systems still get measured
            log.exception("variant %s failed", label)
            reason = f"{type(exc).__name__}: {exc}"
            sub.write_summary(RunSummary(status="failed", experiment=cfg.experiment_name, job=label, kind="serve",
                                         reason=reason))
            rows.append({"variant": label, "status": "failed", "reason": reason, **describe_variant(vcfg),
                         "valid": False, "validity_reasons": f"variant failed: {reason}"})
            validities[label] = failed_validity(reason)
            failed.append(label)
            continue
        requests = pd.read_parquet(sub.file(REQUESTS_FILE))
        validities[label] = result.validity
        rows.append(_row(label, vcfg, result.metrics, requests, result.validity))
        requests.insert(0, "variant", label)
        frames.append(requests)
    table = pd.DataFrame(rows)
    folder.write_table(STUDY_FILE, table)
    if frames:
        folder.write_table(REQUESTS_FILE, pd.concat(frames, ignore_index=True))
    if failed:
        raise CompareFailed(f"variants failed: {', '.join(failed)} (see {VARIANTS_DIR}/<label>/summary.json)")
    validity = compare_validity(validities)
    return JobResult(metrics={"variants": len(rows)}, validity=validity,
                     files={"study": STUDY_FILE, "requests": REQUESTS_FILE}, tables={"study": table})
