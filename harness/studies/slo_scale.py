"""SLO attainment as every latency bound is scaled together, and the scale at which it crosses the target:
DistServe's "tighter SLO" measure (OSDI'24 §6.2, the lower row of Fig. 8).

DistServe's artifact (``evaluation/ae-scripts/e2e/_plot.py`` in LLMServe/DistServe, ``draw_slo_scale_plot``)
takes one run per system at a fixed per-GPU rate, multiplies the TTFT and TPOT bounds by each scale,
counts per request whether *both* hold (joint attainment over all requests), sorts the scales from large
to small and returns the first point where the attainment curve crosses the target, by linear
interpolation between the two scales around it (``find_intersection``); the reported improvement is
vLLM's crossing scale over DistServe's.

:func:`scale_rows` computes the attainment of one run at each scale (joint, TTFT alone, TPOT alone,
with the suite's SLO rule, :func:`harness.metrics.slo_mask`); :func:`crossing` finds the crossing the
same way. Where the artifact falls back to the largest scale when the curve never crosses, the crossing
here says how the measured scales bound it instead (``at_most``: the target is met at every scale, so
the crossing is at or below the smallest; ``above_range``: met at none, so it is above the largest).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.metrics import request_frame, slo_mask
from harness.slo import SLOConfig
from vocab.records import RequestRecord

BOUNDS = ("exact", "at_most", "above_range")


@dataclass(frozen=True)
class Crossing:
    """Where an attainment curve over SLO scales crosses the target, and how the measured scales bound it."""

    scale: float  # exact: the interpolated scale; at_most: the smallest scale; above_range: the largest
    bound: str  # one of BOUNDS
    lowest: float  # smallest scale measured
    highest: float  # largest scale measured

    @property
    def interval(self) -> tuple[float, float]:
        """The range the crossing can lie in."""
        if self.bound == "at_most":
            return 0.0, self.scale
        if self.bound == "above_range":
            return self.scale, math.inf
        return self.scale, self.scale

    def __str__(self) -> str:
        if self.bound == "at_most":
            return f"<={self.scale:.3g}"
        if self.bound == "above_range":
            return f">{self.scale:.3g}"
        return f"{self.scale:.3g}"


def crossing(scales: Sequence[float], attainment: Sequence[float], target: float) -> Crossing:
    """The scale at which ``attainment`` (one value per scale) crosses ``target``: scales sorted from large to
    small, the first pair whose attainments lie on opposite sides of the target (below vs at-or-above),
    linearly interpolated, as DistServe's ``find_intersection`` does."""
    if len(scales) != len(attainment) or not scales:
        raise ValueError(f"scales and attainment must be non-empty and equally long, got {len(scales)} and "
                         f"{len(attainment)}")
    pairs = sorted(zip((float(s) for s in scales), (float(a) for a in attainment), strict=True), key=lambda p: -p[0])
    xs = [p[0] for p in pairs]
    ys = [p[1] for p in pairs]
    lowest, highest = xs[-1], xs[0]
    for (x0, y0), (x1, y1) in zip(pairs, pairs[1:], strict=False):
        if (y0 < target) != (y1 < target):
            return Crossing((target - y0) * (x1 - x0) / (y1 - y0) + x0, "exact", lowest, highest)
    if all(y >= target for y in ys):
        return Crossing(lowest, "at_most", lowest, highest)
    return Crossing(highest, "above_range", lowest, highest)


def scale_rows(records: Iterable[RequestRecord], slo: SLOConfig, scales: Sequence[float]) -> list[dict[str, Any]]:
    """Per scale: the fraction of issued requests meeting the scaled TTFT and TPOT bounds together
    (``attainment``), the TTFT bound alone and the TPOT bound alone."""
    frame = request_frame(records)
    n = len(frame)
    rows = []
    for scale in scales:
        scaled = slo.scaled(float(scale))
        ttft_only = SLOConfig(name=scaled.name, ttft_ms=scaled.ttft_ms)
        tpot_only = SLOConfig(name=scaled.name, tpot_ms=scaled.tpot_ms)
        rows.append({"slo_scale": float(scale), "ttft_bound_ms": scaled.ttft_ms, "tpot_bound_ms": scaled.tpot_ms,
                     **{name: float(np.mean(slo_mask(frame, s))) if n else math.nan
                        for name, s in (("attainment", scaled), ("attainment_ttft", ttft_only),
                                        ("attainment_tpot", tpot_only))}})
    return rows


def crossing_table(scale_table: pd.DataFrame) -> pd.DataFrame:
    """One row per variant and load point of ``scale_table`` (the rows of :func:`scale_rows` with ``variant``,
    ``point``, ``per_gpu_rate`` and ``target`` columns): the crossing of the joint attainment and of each
    bound alone."""
    rows = []
    for (variant, point), part in scale_table.groupby(["variant", "point"], sort=False):
        target = float(part["target"].iloc[0])
        row: dict[str, Any] = {"variant": variant, "point": point, "per_gpu_rate": part["per_gpu_rate"].iloc[0],
                               "target": target}
        for column, prefix in (("attainment", ""), ("attainment_ttft", "ttft_"), ("attainment_tpot", "tpot_")):
            c = crossing(part["slo_scale"].tolist(), part[column].tolist(), target)
            row.update({f"{prefix}crossing_scale": c.scale, f"{prefix}bound": c.bound, f"{prefix}label": str(c)})
        row.update({"lowest_scale": float(part["slo_scale"].min()), "highest_scale": float(part["slo_scale"].max())})
        rows.append(row)
    return pd.DataFrame(rows)
