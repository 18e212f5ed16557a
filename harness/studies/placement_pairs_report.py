"""What the placement search writes when it runs simdistserve's pair search
(``study.params.method=simdistserve``, :mod:`harness.studies.placement_pairs`): one ``study.csv`` row per
pair and the ``placement.json`` fields of that method (chosen pair, tied pairs, the README's pair)."""

from __future__ import annotations

import math
from typing import Any, Optional

import pandas as pd

from harness.studies.placement_pairs import PairResult, PairSearchResult

# The configuration simdistserve/README.md reports for OPT-13B on one node of 4 A100s.
README_PAIR = {"prefill_tp": 2, "prefill_pp": 1, "decode_tp": 1, "decode_pp": 1}


def _key(result: PairResult) -> dict[str, int]:
    c = result.config
    return {"prefill_tp": c.prefill.tp, "prefill_pp": c.prefill.pp, "decode_tp": c.decode.tp, "decode_pp": c.decode.pp}


def pair_table(search: PairSearchResult) -> pd.DataFrame:
    """One row per pair, searched or skipped: its per-GPU rate, probes, whether it is chosen or tied."""
    tied = {id(r) for r in search.tied}
    rows: list[dict[str, Any]] = []
    for r in search.results:
        last = r.probes[-1] if r.probes else None
        rows.append({**_key(r), "gpus": r.config.n_gpus, "status": "searched", "per_gpu_rate": r.per_gpu_rate,
                     "rate_rps": r.rate_rps, "probes": len(r.probes), "chosen": r is search.best,
                     "tied": id(r) in tied,
                     "last_probe_per_gpu_rate": last.per_gpu_rate if last else math.nan,
                     "last_probe_ttft_quantile_ms": last.ttft_quantile_s * 1e3 if last else math.nan,
                     "last_probe_tpot_quantile_ms": last.tpot_quantile_s * 1e3 if last else math.nan, "note": ""})
    for pair, reason in search.skipped:
        rows.append({"prefill_tp": pair.prefill.tp, "prefill_pp": pair.prefill.pp, "decode_tp": pair.decode.tp,
                     "decode_pp": pair.decode.pp, "gpus": pair.n_gpus, "status": "skipped", "per_gpu_rate": math.nan,
                     "rate_rps": math.nan, "probes": 0, "chosen": False, "tied": False,
                     "last_probe_per_gpu_rate": math.nan, "last_probe_ttft_quantile_ms": math.nan,
                     "last_probe_tpot_quantile_ms": math.nan, "note": reason})
    return pd.DataFrame(rows)


def _describe(r: Optional[PairResult]) -> Optional[dict[str, Any]]:
    if r is None:
        return None
    return {**r.config.describe(), "rate_rps": r.rate_rps, "per_gpu_rate": r.per_gpu_rate}


def pair_report(search: PairSearchResult) -> dict[str, Any]:
    """The method's fields of ``placement.json``."""
    readme = next((r for r in search.results if _key(r) == README_PAIR), None)
    return {
        "algorithm": "simdistserve pair search (one prefill + one decode instance per configuration, "
                     "per-GPU rate bisected on a fixed grid)",
        "chosen": _describe(search.best),
        "per_gpu_goodput_rps": search.best.per_gpu_rate if search.best else None,
        "tied": [_describe(r) for r in search.tied],
        "readme_pair": {**README_PAIR, "searched": readme is not None,
                        "per_gpu_rate": readme.per_gpu_rate if readme else None,
                        "tied_with_best": readme is not None and readme in search.tied},
        "pairs": [{**_describe(r), "probes": [{"per_gpu_rate": p.per_gpu_rate,
                                               "ttft_quantile_ms": p.ttft_quantile_s * 1e3,
                                               "tpot_quantile_ms": p.tpot_quantile_s * 1e3, "passed": p.passed}
                                              for p in r.probes]} for r in search.results],
        "skipped": [{**pair.describe(), "reason": reason} for pair, reason in search.skipped],
        "pair_settings": {"max_per_gpu_rate": search.settings.max_per_gpu_rate, "esp": search.settings.esp,
                          "quantile": search.settings.quantile, "tpot_rule": search.settings.tpot_rule},
        "n_simulations": search.n_sims, "search_wall_s": search.wall_s,
    }
