"""DistServe's fitted latency model (OSDI'24, ``simdistserve/estimators/time_estimator.py``), A100-80GB only.

From ``distserve/profiler-a100-80g.{distserve,vllm}.json`` (``engine="distserve"`` or ``"vllm"``):

- prefill ms = ``(a + b * sum(l) + c * sum(l**2)) / pp + pp`` for a batch of prompt lengths ``l``
  (the ``+ pp`` ms is upstream's per-stage overhead; it is added for pp = 1 too, as upstream does);
- decode ms = ``a + b * sum(context + 1) + c * batch`` with the ``decoding_smallbs``
  coefficients when ``batch < decoding_large_small_bs_threshold`` (95) and ``decoding_largebs``
  otherwise. ``sum(context + 1)`` is ``sum_context + batch_size`` here: ``sum_context`` counts the
  tokens already in the KV cache, and upstream's list holds each request's length including the token
  being generated. Upstream divides this by ``pp`` for one pipeline stage; a token passes all ``pp``
  stages (simdistserve ``base/worker.py`` forwards every decode batch through each stage), so a decode
  step of a PP instance is the sum of its stages, the undivided time. DistServe's runs measure exactly
  that: the c21d12 runs (decode TP 1, PP 2) decode at the TP-1 step time of their whole batch
  (``python -m harness experiment=distserve_real_replay``; docs/simulator.md).
- ``adjust`` (``engine.profile_adjust``, fitted from measured runs): prefill times scaled by
  ``prefill_scale``; ``step_ms`` added to ``a`` and ``seq_ms`` to ``c`` of both decode fits.

Chunked prefill: the suite's ``sum_sq_tokens`` (``(p + c)**2 - p**2`` per chunk) stands in for
``sum(l**2)``, which it equals for whole prompts. KV capacity comes from ``distserve/max_num_tokens.csv``
for (model, tp, pp) when the file has the row (upstream measured it at its own memory settings, so
``gpu_memory_utilization`` does not apply), else it is computed as the roofline does.
"""

from __future__ import annotations

import csv
import functools
import json
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Optional

import numpy as np

from systems.config import HardwareConfig, ModelConfig
from systems.sim.perf.base import ArrayLike, InstanceShape, ShapedPerfModel
from systems.sim.perf.profiles import (
    DISTSERVE_JSON,
    DISTSERVE_MAX_TOKENS_CSV,
    ProfileNotFoundError,
    find_profile,
)
from systems.sim.perf.roofline import check_shape, kv_capacity_tokens_for

MODEL_NAMES = MappingProxyType({"opt_13b": "facebook/opt-13b", "opt_66b": "facebook/opt-66b",
                                "opt_175b": "facebook/opt-175b"})
HARDWARE = "a100_80gb"
ENGINES = tuple(DISTSERVE_JSON)


@dataclass(frozen=True)
class DistServeCoefficients:
    """One (model, TP) entry of a DistServe profile JSON; times in ms."""

    prefill: tuple[float, float, float]
    decode_small: tuple[float, float, float]
    decode_large: tuple[float, float, float]
    threshold: int


@functools.lru_cache(maxsize=8)
def load_coefficients(path: str) -> MappingProxyType[str, MappingProxyType[int, DistServeCoefficients]]:
    """Parse a profile JSON into ``{upstream model name: {tp: coefficients}}`` (read-only, cached per path)."""
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    out: dict[str, MappingProxyType[int, DistServeCoefficients]] = {}
    for model, per_tp in raw.items():
        out[model] = MappingProxyType({
            int(tp): DistServeCoefficients(tuple(v["prefill"]), tuple(v["decoding_smallbs"]),
                                           tuple(v["decoding_largebs"]), int(v["decoding_large_small_bs_threshold"]))
            for tp, v in per_tp.items()})
    return MappingProxyType(out)


def adjusted(c: DistServeCoefficients, prefill_scale: float, step_ms: float, seq_ms: float) -> DistServeCoefficients:
    """``c`` with its prefill scaled and ``step_ms`` per decode step and ``seq_ms`` per sequence added."""
    def decode(fit: tuple[float, float, float]) -> tuple[float, float, float]:
        return (fit[0] + step_ms, fit[1], fit[2] + seq_ms)

    return DistServeCoefficients(tuple(x * prefill_scale for x in c.prefill), decode(c.decode_small),
                                 decode(c.decode_large), c.threshold)


@functools.lru_cache(maxsize=4)
def load_max_num_tokens(path: str) -> MappingProxyType[tuple[str, int, int], int]:
    """``{(upstream model name, tp, pp): KV-cache tokens}`` from ``max_num_tokens.csv`` (cached per path)."""
    with open(path, encoding="utf-8", newline="") as fh:
        rows = {(r["model"], int(r["tp"]), int(r["pp"])): int(r["max_num_tokens"]) for r in csv.DictReader(fh)}
    return MappingProxyType(rows)


class DistServeFitModel(ShapedPerfModel):
    """DistServe's fitted prefill/decode latencies for OPT-13B/66B on A100-80GB (see the module docstring)."""

    name = "distserve"

    def __init__(self, model: ModelConfig, hw: HardwareConfig, shape: InstanceShape,
                 profiles_dir: Optional[str | os.PathLike[str]] = None, engine: str = "distserve",
                 gpu_memory_utilization: float = 0.9, activation_reserve_gib: float = 1.5,
                 adjust: Optional[tuple[float, float, float]] = None) -> None:
        if engine not in ENGINES:
            raise ValueError(f"distserve engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        if model.name not in MODEL_NAMES:
            raise ValueError(f"the DistServe profiles cover models {', '.join(MODEL_NAMES)}, not {model.name!r}")
        if hw.name != HARDWARE:
            raise ValueError(f"the DistServe profiles were measured on {HARDWARE}, not {hw.name!r}")
        check_shape(model, hw, shape)
        coeffs = load_coefficients(str(find_profile(DISTSERVE_JSON[engine], profiles_dir)))
        upstream = MODEL_NAMES[model.name]
        per_tp = coeffs.get(upstream)
        if per_tp is None:
            have = ", ".join(f"{m} (tp {', '.join(map(str, sorted(t)))})" for m, t in coeffs.items())
            raise ValueError(f"{DISTSERVE_JSON[engine]} has no entry for {upstream}; it has {have}")
        if shape.tp not in per_tp:
            raise ValueError(f"{DISTSERVE_JSON[engine]} has {upstream} at tp {', '.join(map(str, sorted(per_tp)))}, "
                             f"not tp={shape.tp}")
        self.engine = engine
        super().__init__(model, hw, shape)
        self._c = per_tp[shape.tp] if adjust is None else adjusted(per_tp[shape.tp], *adjust)
        self.adjust = adjust
        self._pp = shape.pp
        self._kv_capacity = self._capacity(upstream, profiles_dir, gpu_memory_utilization, activation_reserve_gib)

    def _capacity(self, upstream: str, profiles_dir, util: float, reserve: float) -> int:
        try:
            table = load_max_num_tokens(str(find_profile(DISTSERVE_MAX_TOKENS_CSV, profiles_dir)))
        except ProfileNotFoundError:
            table = MappingProxyType({})
        tokens = table.get((upstream, self.shape.tp, self.shape.pp))
        if tokens is not None:
            return tokens
        return kv_capacity_tokens_for(self.model, self.hw, self.shape, util, reserve)

    @property
    def threshold(self) -> int:
        return self._c.threshold

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        if sum_tokens <= 0:
            return 0.0
        a, b, c = self._c.prefill
        return ((a + b * sum_tokens + c * sum_sq_tokens) / self._pp + self._pp) / 1e3

    def decode_step_time_s(self, batch_size: ArrayLike, sum_context: ArrayLike) -> ArrayLike:
        if not isinstance(batch_size, np.ndarray) and isinstance(sum_context, np.ndarray):
            # one batch size over a stretch of steps (the simulator's decode segments)
            a, b, c = self._c.decode_small if batch_size < self._c.threshold else self._c.decode_large
            return (a + b * (sum_context + batch_size) + c * batch_size) / 1e3
        if isinstance(batch_size, np.ndarray) or isinstance(sum_context, np.ndarray):
            bs, ctx = np.broadcast_arrays(np.asarray(batch_size, dtype=float), np.asarray(sum_context, dtype=float))
            small = bs < self._c.threshold
            a, b, c = (np.where(small, s, lg) for s, lg in zip(self._c.decode_small, self._c.decode_large, strict=True))
            return (a + b * (ctx + bs) + c * bs) / 1e3
        a, b, c = self._c.decode_small if batch_size < self._c.threshold else self._c.decode_large
        return (a + b * (sum_context + batch_size) + c * batch_size) / 1e3

    def _segment_ends(self, batch_size: int, context: int, n: int, now: float) -> list[float] | None:
        # the segment path above, one float at a time, summed
        a, b, c = self._c.decode_small if batch_size < self._c.threshold else self._c.decode_large
        cb = c * batch_size
        bs = float(batch_size)
        out = []
        ctx = float(context)
        acc = 0.0
        for _ in range(n):
            acc += (a + b * (ctx + bs) + cb) / 1e3
            out.append(acc + now)
            ctx += bs
        return out

    def decode_monotone_in_context(self) -> bool:
        # (a + b * (context + batch) + c * batch) / 1e3: non-decreasing in the context when b >= 0
        return self._c.decode_small[1] >= 0 and self._c.decode_large[1] >= 0

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "engine": self.engine, "tp": self.shape.tp, "pp": self.shape.pp,
                "source": DISTSERVE_JSON[self.engine], **({"adjust": list(self.adjust)} if self.adjust else {})}

