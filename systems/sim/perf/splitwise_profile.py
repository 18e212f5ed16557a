"""Splitwise's measured profile (ISCA'24; splitwise-sim ``data/perf_model.csv``) as a performance model.

The CSV holds vLLM-era runs of llama2-70b (TP 2/4/8) and bloom-176b (TP 8) on a100-80gb, h100-80gb
and h100-80gb-pcap. Its design is a cross around (prompt 512, batch 1, 128 output tokens): a prompt
sweep (128-8192) at batch 1, a batch sweep (1-64) at prompt 512, and an output-length sweep
(128-8192) at batch 1; most points are measured 5 times.

Assumptions (stated, not upstream's exact predictor):

- Cleaning: a (prompt, batch) configuration whose median prefill time is below half the largest
  median of a configuration with fewer total prompt tokens is dropped from both phases as a failed
  run (the TP-2 batch-64 rows: 794 ms against 6,633 ms at batch 32 on a100-80gb). Logged at INFO.
- Prefill: the median prompt time per total prompt tokens (``prompt_size * batch_size``, merging
  configurations, as splitwise-sim does), made non-decreasing (running maximum), interpolated
  piecewise-linearly on ``sum_tokens`` and extrapolated linearly beyond both ends (floored at 0).
  ``sum_sq_tokens`` is not used: the profile cannot separate attention from linear cost.
- Decode: ``f(batch) + s * (sum_context - batch * c_ref)``, bilinear in (batch, mean context).
  ``f`` is the batch sweep (median per batch, non-decreasing, piecewise-linear, extrapolated
  linearly), measured at mean context ``c_ref = 512 + 128 / 2`` tokens per sequence; ``s`` (ms per
  context token per sequence) is the least-squares slope of the batch-1 medians against their mean
  context (``prompt_size + token_size / 2``), floored at 0. It is exact at the batch-sweep points.
- Mixed iterations follow splitwise-sim: the prefill time of ``sum_tokens + batch_size`` tokens, x 1.1.
- Power: ``power_samples`` returns the normalised ``peak_power`` / ``average_power`` medians where the
  CSV has them (only a100-80gb rows are non-zero). They cover whole runs (prompt and tokens), so no
  per-phase power is derived from them.
- PP is not in the profile (pp must be 1); the KV capacity is computed as the roofline does.
"""

from __future__ import annotations

import bisect
import csv
import functools
import logging
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple, Optional

import numpy as np

from systems.config import HardwareConfig, ModelConfig
from systems.sim.perf.base import ArrayLike, InstanceShape, ShapedPerfModel
from systems.sim.perf.profiles import SPLITWISE_CSV, find_profile
from systems.sim.perf.roofline import check_shape, kv_capacity_tokens_for

logger = logging.getLogger(__name__)

MODEL_NAMES = MappingProxyType({"llama2_70b": "llama2-70b", "bloom_176b": "bloom-176b"})
HARDWARE_NAMES = MappingProxyType({"a100_80gb": "a100-80gb", "h100_80gb": "h100-80gb",
                                   "h100_80gb_pcap": "h100-80gb-pcap"})
MIXED_FACTOR = 1.1  # splitwise-sim's factor for an iteration mixing prompts and tokens
MEMO_LIMIT = 100_000  # prefill times remembered per model (token counts: a bounded set in practice)
OUTLIER_FRACTION = 0.5


class ProfileRow(NamedTuple):
    model: str
    hardware: str
    tp: int
    prompt_size: int
    batch_size: int
    token_size: int
    peak_power: float
    average_power: float
    prompt_ms: float
    token_ms: float


@functools.lru_cache(maxsize=4)
def load_rows(path: str) -> tuple[ProfileRow, ...]:
    """All rows of ``perf_model.csv`` (cached per path; the tuple is immutable)."""
    with open(path, encoding="utf-8", newline="") as fh:
        return tuple(ProfileRow(r["model"], r["hardware"], int(r["tensor_parallel"]), int(r["prompt_size"]),
                                int(r["batch_size"]), int(r["token_size"]), float(r["peak_power"]),
                                float(r["average_power"]), float(r["prompt_time"]), float(r["token_time"]))
                     for r in csv.DictReader(fh))


@dataclass(frozen=True)
class SplitwiseGrid:
    """The cleaned grid points of one (model, hardware, tp); times in ms."""

    prefill_tokens: tuple[float, ...]
    prefill_ms: tuple[float, ...]
    decode_batch: tuple[float, ...]
    decode_ms: tuple[float, ...]
    context_ref: float  # mean context per sequence of the batch sweep
    context_slope_ms: float  # ms per context token per sequence
    batch1_context: tuple[float, ...]  # batch-1 mean contexts and their median token times (for checks)
    batch1_ms: tuple[float, ...]
    dropped: tuple[tuple[int, int], ...]  # (prompt_size, batch_size) configurations dropped as failed runs


def _medians(pairs: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    groups: dict[float, list[float]] = defaultdict(list)
    for x, y in pairs:
        groups[x].append(y)
    xs = sorted(groups)
    return xs, [statistics.median(groups[x]) for x in xs]


def _failed_configs(rows: list[ProfileRow]) -> set[tuple[int, int]]:
    per_cfg: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in rows:
        per_cfg[(r.prompt_size, r.batch_size)].append(r.prompt_ms)
    med = {cfg: statistics.median(v) for cfg, v in per_cfg.items()}
    failed = set()
    for cfg, m in med.items():
        smaller = [v for c, v in med.items() if c[0] * c[1] < cfg[0] * cfg[1]]
        if smaller and m < OUTLIER_FRACTION * max(smaller):
            failed.add(cfg)
    return failed


def build_grid(rows: tuple[ProfileRow, ...], model: str, hardware: str, tp: int) -> SplitwiseGrid:
    """The grid of one (upstream model name, upstream hardware name, tp); ``ValueError`` if it has no rows."""
    sub = [r for r in rows if (r.model, r.hardware, r.tp) == (model, hardware, tp)]
    if not sub:
        have = sorted({(r.model, r.hardware, r.tp) for r in rows})
        listing = ", ".join(f"{m}/{h}/tp{t}" for m, h, t in have)
        raise ValueError(f"{SPLITWISE_CSV} has no rows for {model} on {hardware} at tp={tp}; it has {listing}")
    failed = _failed_configs(sub)
    if failed:
        logger.info("splitwise profile %s/%s/tp%d: dropping failed runs (prompt, batch) %s",
                    model, hardware, tp, sorted(failed))
    ok = [r for r in sub if (r.prompt_size, r.batch_size) not in failed]
    p_x, p_y = _medians([(float(r.prompt_size * r.batch_size), r.prompt_ms) for r in ok])
    ref = statistics.mode([(r.prompt_size, r.token_size) for r in ok if r.batch_size > 1])
    d_x, d_y = _medians([(float(r.batch_size), r.token_ms) for r in ok if (r.prompt_size, r.token_size) == ref])
    c_x, c_y = _medians([(r.prompt_size + r.token_size / 2, r.token_ms) for r in ok if r.batch_size == 1])
    slope = float(np.polyfit(c_x, c_y, 1)[0]) if len(c_x) > 1 else 0.0
    return SplitwiseGrid(tuple(p_x), tuple(np.maximum.accumulate(p_y).tolist()), tuple(d_x),
                         tuple(np.maximum.accumulate(d_y).tolist()), ref[0] + ref[1] / 2, max(slope, 0.0),
                         tuple(c_x), tuple(c_y), tuple(sorted(failed)))


def _interp(x: float, xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """Piecewise-linear through (xs, ys), extended linearly by the end segments."""
    if len(xs) == 1:
        return ys[0]
    i = min(max(bisect.bisect_right(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _interp_array(x: np.ndarray, xs: tuple[float, ...], ys: tuple[float, ...]) -> np.ndarray:
    if len(xs) == 1:
        return np.full_like(x, ys[0], dtype=float)
    xa, ya = np.asarray(xs), np.asarray(ys)
    i = np.clip(np.searchsorted(xa, x, side="right"), 1, len(xa) - 1)
    x0, x1, y0, y1 = xa[i - 1], xa[i], ya[i - 1], ya[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class SplitwiseProfileModel(ShapedPerfModel):
    """Interpolation of splitwise-sim's measured profile (see the module docstring for the assumptions)."""

    name = "splitwise"

    def __init__(self, model: ModelConfig, hw: HardwareConfig, shape: InstanceShape,
                 profiles_dir: Optional[str | os.PathLike[str]] = None, gpu_memory_utilization: float = 0.9,
                 activation_reserve_gib: float = 1.5) -> None:
        if model.name not in MODEL_NAMES:
            raise ValueError(f"the Splitwise profile covers models {', '.join(MODEL_NAMES)}, not {model.name!r}")
        if hw.name not in HARDWARE_NAMES:
            raise ValueError(f"the Splitwise profile covers hardware {', '.join(HARDWARE_NAMES)}, not {hw.name!r}")
        if shape.pp != 1:
            raise ValueError(f"the Splitwise profile has no pipeline parallelism (pp must be 1, got pp={shape.pp})")
        check_shape(model, hw, shape)
        rows = load_rows(str(find_profile(SPLITWISE_CSV, profiles_dir)))
        self.grid = build_grid(rows, MODEL_NAMES[model.name], HARDWARE_NAMES[hw.name], shape.tp)
        self._rows = tuple(r for r in rows if (r.model, r.hardware, r.tp) ==
                           (MODEL_NAMES[model.name], HARDWARE_NAMES[hw.name], shape.tp))
        super().__init__(model, hw, shape)
        self._kv_capacity = kv_capacity_tokens_for(model, hw, shape, gpu_memory_utilization, activation_reserve_gib)
        # memos of pure functions of one number (same inputs, same floats): the simulator asks again and again
        self._prefill_memo: dict[float, float] = {}
        self._segment_base_memo: dict[int, float] = {}

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float = 0.0, n_seqs: int = 1) -> float:
        if sum_tokens <= 0:
            return 0.0
        plain = type(sum_tokens) is int or type(sum_tokens) is float  # a NumPy number returns a NumPy float
        t = self._prefill_memo.get(sum_tokens) if plain else None
        if t is None:
            t = max(_interp(sum_tokens, self.grid.prefill_tokens, self.grid.prefill_ms), 0.0) / 1e3
            if plain and len(self._prefill_memo) < MEMO_LIMIT:
                self._prefill_memo[sum_tokens] = t
        return t

    def decode_step_time_s(self, batch_size: ArrayLike, sum_context: ArrayLike) -> ArrayLike:
        g = self.grid
        if not isinstance(batch_size, np.ndarray) and isinstance(sum_context, np.ndarray):
            # one batch size over a stretch of steps (the simulator's decode segments): interpolate once
            base = self._segment_base_memo.get(batch_size) if type(batch_size) is int else None
            if base is None:
                base = _interp(batch_size, g.decode_batch, g.decode_ms) - g.context_slope_ms * batch_size * g.context_ref
                if type(batch_size) is int:
                    self._segment_base_memo[batch_size] = base
            return np.maximum(base + g.context_slope_ms * sum_context, 0.0) / 1e3
        if isinstance(batch_size, np.ndarray) or isinstance(sum_context, np.ndarray):
            bs, ctx = np.broadcast_arrays(np.asarray(batch_size, dtype=float), np.asarray(sum_context, dtype=float))
            ms = _interp_array(bs, g.decode_batch, g.decode_ms) + g.context_slope_ms * (ctx - bs * g.context_ref)
            return np.maximum(ms, 0.0) / 1e3
        ms = _interp(batch_size, g.decode_batch, g.decode_ms) + g.context_slope_ms * (
            sum_context - batch_size * g.context_ref)
        return max(ms, 0.0) / 1e3

    def _segment_ends(self, batch_size: int, context: int, n: int, now: float) -> list[float] | None:
        # the segment path above, one float at a time: max(base + slope * ctx, 0) / 1e3, summed
        g = self.grid
        base = self._segment_base_memo.get(batch_size)
        if base is None:
            base = _interp(batch_size, g.decode_batch, g.decode_ms) - g.context_slope_ms * batch_size * g.context_ref
            self._segment_base_memo[batch_size] = base
        slope = g.context_slope_ms
        b = float(batch_size)
        out = []
        c = float(context)
        acc = 0.0
        for _ in range(n):
            ms = base + slope * c
            acc += (ms if ms >= 0.0 or ms != ms else 0.0) / 1e3  # np.maximum(ms, 0.0) (NaN wins)
            out.append(acc + now)
            c += b
        return out

    def decode_monotone_in_context(self) -> bool:
        # max(interp(batch) + slope * (context - batch * ref), 0) / 1e3
        return self.grid.context_slope_ms >= 0

    def mixed_step_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int,
                          batch_size: int, sum_context: float) -> float:
        """splitwise-sim's rule: the prefill time of all the iteration's tokens, times 1.1."""
        if sum_tokens <= 0:
            return float(self.decode_step_time_s(batch_size, sum_context))
        return self.prefill_time_s(sum_tokens + batch_size, sum_sq_tokens, n_seqs) * MIXED_FACTOR

    def measured_points(self) -> tuple[tuple[int, int, int, float, float], ...]:
        """``(prompt_size, batch_size, token_size, prompt_ms, token_ms)`` medians per measured configuration.

        Failed runs (see the module docstring) are left out. Mean decode context per sequence is
        ``prompt_size + token_size / 2``.
        """
        groups: dict[tuple[int, int, int], list[tuple[float, float]]] = defaultdict(list)
        for r in self._rows:
            if (r.prompt_size, r.batch_size) not in self.grid.dropped:
                groups[(r.prompt_size, r.batch_size, r.token_size)].append((r.prompt_ms, r.token_ms))
        return tuple((*cfg, statistics.median(p for p, _ in v), statistics.median(t for _, t in v))
                     for cfg, v in sorted(groups.items()))

    def power_samples(self) -> tuple[tuple[int, int, int, float, float], ...]:
        """``(prompt_size, batch_size, token_size, peak_power, average_power)`` medians where measured.

        The power columns are normalised (0-1, apparently to the device's rated power) and cover a
        whole run; rows with zeros (not measured) are left out, so only a100-80gb has samples.
        """
        groups: dict[tuple[int, int, int], list[tuple[float, float]]] = defaultdict(list)
        for r in self._rows:
            if r.peak_power > 0 or r.average_power > 0:
                groups[(r.prompt_size, r.batch_size, r.token_size)].append((r.peak_power, r.average_power))
        return tuple((*cfg, statistics.median(p for p, _ in v), statistics.median(a for _, a in v))
                     for cfg, v in sorted(groups.items()))

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "hardware": self.hw.name, "tp": self.shape.tp,
                "dropped_configs": list(self.grid.dropped), "context_slope_ms": self.grid.context_slope_ms}
