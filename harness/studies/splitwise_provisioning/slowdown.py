"""The Splitwise SLO: each request's slowdown against the same request served alone on the reference
machine, judged at p50/p90/p99 against Splitwise's bounds (Table VI)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

import numpy as np
import pandas as pd

from harness.config import Config
from harness.metrics import percentiles
from harness.studies.splitwise_provisioning.params import (
    FAILED_SLOWDOWN,
    SLOWDOWN_METRICS,
    ProvisioningParams,
)
from systems.hardware_catalog import load_hardware
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.registry import build_perf_model
from systems.sim.simulated_deployment import peer_timing_params
from vocab.errors import ConfigError


class UncontendedReference:
    """Latencies of each request served alone on the reference pool (see the module docstring)."""

    def __init__(self, perf: PerfModel) -> None:
        self.perf = perf
        self._prefill_ms: dict[int, float] = {}

    def ttft_ms(self, input_length: np.ndarray) -> np.ndarray:
        out = np.empty(len(input_length))
        for i, n in enumerate(np.asarray(input_length, dtype=np.int64).tolist()):
            if n not in self._prefill_ms:
                self._prefill_ms[n] = 1e3 * self.perf.prefill_time_s(float(n), float(n) ** 2, 1)
            out[i] = self._prefill_ms[n]
        return out

    def tbt_ms(self, input_length: np.ndarray, output_length: np.ndarray) -> np.ndarray:
        context = np.asarray(input_length, dtype=float) + np.asarray(output_length, dtype=float) / 2
        return 1e3 * np.asarray(self.perf.decode_step_time_s(np.ones_like(context), context), dtype=float)

    def latencies_ms(self, input_length: np.ndarray, output_length: np.ndarray) -> dict[str, np.ndarray]:
        ttft = self.ttft_ms(input_length)
        tbt = self.tbt_ms(input_length, output_length)
        e2e = ttft + tbt * np.maximum(np.asarray(output_length, dtype=float) - 1, 0)
        return {"ttft": ttft, "tbt": tbt, "e2e": e2e}


def reference_model(cfg: Config, params: ProvisioningParams) -> UncontendedReference:
    hw = load_hardware(params.reference_hardware)
    shape = InstanceShape(hw.name, params.reference_tp)
    try:
        perf = build_perf_model(cfg.engine.perf_model, cfg.model, hw, shape, profiles_dir=cfg.engine.profiles_dir,
                                gpu_memory_utilization=cfg.engine.gpu_memory_utilization, **peer_timing_params(cfg))
    except ValueError as exc:
        raise ConfigError(f"study.params.reference_hardware ({cfg.engine.perf_model} model): {exc}") from exc
    return UncontendedReference(perf)


def slowdown_percentiles(frame: pd.DataFrame, reference: UncontendedReference,
                         quantiles: Sequence[float]) -> dict[str, Optional[float]]:
    """``p<q>_<metric>_slowdown`` of every request in ``frame`` (a ``request_frame``)."""
    ok = frame["status"].to_numpy() == "ok"
    ref = reference.latencies_ms(frame["input_length"].to_numpy(), frame["output_length"].to_numpy())
    measured = {"ttft": frame["ttft_ms"].to_numpy(dtype=float), "tbt": frame["tpot_ms"].to_numpy(dtype=float),
                "e2e": frame["e2e_ms"].to_numpy(dtype=float)}
    out: dict[str, Optional[float]] = {}
    for metric in SLOWDOWN_METRICS:
        with np.errstate(divide="ignore", invalid="ignore"):
            slow = measured[metric] / ref[metric]
        slow = np.where(ok, slow, FAILED_SLOWDOWN)  # NaN TBT of one-token requests stays out (dropped)
        for q, value in zip(quantiles, percentiles(slow, quantiles), strict=True):
            out[f"p{q:g}_{metric}_slowdown"] = value
    return out


def meets_slowdowns(values: Mapping[str, Optional[float]], params: ProvisioningParams) -> bool:
    """All bounds hold (an undefined percentile, e.g. no multi-token request, holds vacuously)."""
    for metric, bounds in params.slowdown_bounds.items():
        for q, bound in zip(params.quantiles, bounds, strict=True):
            value = values.get(f"p{q:g}_{metric}_slowdown")
            if value is not None and value > bound:
                return False
    return True
