"""The roofline's attention efficiency against a measured A100 attention profile, and the value fitted from it.

Reads Vidur's operator profile of FlashAttention prefill on an A100 (``vidur/legacy_oss_release_branch/a100/
attention.csv`` under ``../shared/perf_profiles``: Llama-2-70B geometry at TP 2, 32 query heads of 128 per GPU,
one sequence per row, a chunk of ``prefill_chunk_size`` new tokens over ``kv_cache_size`` tokens of prefix). For
each row the attention FLOPs the roofline counts (``4 * heads * head_dim`` per (query, key) pair, ``chunk * prefix
+ chunk^2 / 2`` pairs under the causal mask) over the measured time give the achieved fraction of the GPU's dense
BF16 peak. The fitted efficiency is their FLOP-weighted mean (total FLOPs over total time: the value under which the
roofline's attention time summed over the profiled grid equals the measured sum).

Prints, for a 512-token chunk over growing prefixes, the measured time beside the roofline's at the hardware's
``compute_efficiency`` (what attention was priced at before) and at the fitted value, then the fit itself.
``conf/hardware/a800_80gb.yaml``'s ``attention_efficiency`` is this fit (a test checks they agree)::

    .venv/bin/python -m benchmarks.attention_calibration [--profile PATH] [--hardware a800_80gb]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PROFILE = REPO.parent / "shared" / "perf_profiles" / "vidur" / "legacy_oss_release_branch" / "a100" / \
    "attention.csv"
TIME = "time_stats.attn_prefill.median"  # ms
NEEDED = ("n_q_head", "n_embd", "num_tensor_parallel_workers", "batch_size", "prefill_chunk_size", "kv_cache_size",
          "is_prefill", TIME)


def prefill_rows(profile: pd.DataFrame, peak_tflops: float) -> pd.DataFrame:
    """The profile's prefill rows with ``flops`` (the roofline's attention FLOPs per GPU), ``time_s`` and
    ``efficiency`` (achieved fraction of ``peak_tflops``). ``ValueError`` naming a missing column."""
    missing = [c for c in NEEDED if c not in profile]
    if missing:
        raise ValueError(f"attention profile: no column {', '.join(missing)}")
    rows = profile[profile["is_prefill"].astype(bool)].copy()
    heads = rows["n_q_head"] / rows["num_tensor_parallel_workers"]
    head_dim = rows["n_embd"] / rows["n_q_head"]
    chunk, prefix = rows["prefill_chunk_size"].astype(float), rows["kv_cache_size"].astype(float)
    pairs = rows["batch_size"] * chunk * (prefix + chunk / 2)
    rows["flops"] = 4 * heads * head_dim * pairs
    rows["time_s"] = rows[TIME] / 1e3
    rows = rows[rows["time_s"] > 0]
    rows["efficiency"] = rows["flops"] / rows["time_s"] / (peak_tflops * 1e12)
    return rows


def fitted_efficiency(rows: pd.DataFrame) -> float:
    """Total FLOPs over total time, as a fraction of the peak the rows were computed with."""
    return float((rows["efficiency"] * rows["time_s"]).sum() / rows["time_s"].sum())


def chunk_table(rows: pd.DataFrame, chunk: int, efficiencies: dict[str, float], peak_tflops: float) -> pd.DataFrame:
    """For one chunk size, per prefix: measured ms and the roofline's attention ms at each named efficiency."""
    part = rows[rows["prefill_chunk_size"] == chunk].sort_values("kv_cache_size")
    out = pd.DataFrame({"prefix": part["kv_cache_size"].astype(int), "measured_ms": part[TIME],
                        "achieved": part["efficiency"]})
    for name, eff in efficiencies.items():
        out[f"roofline_{name}_ms"] = part["flops"] / (peak_tflops * 1e12 * eff) * 1e3
    return out.reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    parser.add_argument("--hardware", default="a800_80gb", help="conf/hardware/<name>.yaml: peak and efficiencies")
    parser.add_argument("--chunk", type=int, default=512)
    args = parser.parse_args(argv)
    if not args.profile.is_file():
        print(f"attention profile not found: {args.profile}", file=sys.stderr)
        return 2
    hw = yaml.safe_load((REPO / "conf" / "hardware" / f"{args.hardware}.yaml").read_text())
    peak = float(hw["peak_tflops_bf16"])
    rows = prefill_rows(pd.read_csv(args.profile), peak)
    fit = fitted_efficiency(rows)
    efficiencies = {"compute_eff": float(hw["compute_efficiency"]), "fitted": fit}
    table = chunk_table(rows, args.chunk, efficiencies, peak)
    print(f"{args.profile} ({len(rows):,} prefill rows); {args.hardware}: peak {peak:g} TFLOPS, "
          f"compute_efficiency {hw['compute_efficiency']}, attention_efficiency {hw.get('attention_efficiency')}")
    print(f"\nattention of a {args.chunk}-token chunk over its prefix, one layer on one GPU (ms):")
    print(table.iloc[:: max(1, len(table) // 12)].round(4).to_string(index=False))
    ratio = table["roofline_compute_eff_ms"] / table["measured_ms"]
    print(f"\nroofline at compute_efficiency / measured, {args.chunk}-token chunks: median {ratio.median():.2f} "
          f"(range {ratio.min():.2f}-{ratio.max():.2f})")
    long = rows[rows["kv_cache_size"] >= 2048]
    print(f"achieved fraction of peak, all prefill rows: median {rows['efficiency'].median():.3f} "
          f"(p10 {rows['efficiency'].quantile(0.1):.3f}, p90 {rows['efficiency'].quantile(0.9):.3f}); "
          f"prefix >= 2,048 tokens: median {long['efficiency'].median():.3f}")
    print(f"fitted attention_efficiency (FLOP-weighted over all prefill rows): {fit:.3f} -> {round(fit, 2):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
