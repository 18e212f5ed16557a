"""``system.gpu_budget``: the devices a deployment needs, counted once for every engine, and the check.

The count is the one the results are normalised by (``n_gpus`` of a run), made from the config alone:

* ``engine=sim``: per role, instances x ``engine.<role>.tp`` x ``engine.<role>.pp`` (devices of each
  pool's hardware);
* ``engine=vllm`` on GPUs: per role, instances x the role's tensor-parallel size
  (``engine.<role>.tensor_parallel_size``, else ``engine.tensor_parallel_size``);
* ``engine=vllm`` on a CPU host: one device per instance (a vLLM CPU instance uses no GPU; each instance
  counts as one device of the run's hardware, e.g. ``hardware=cpu_core``, as its price and power are
  counted). ``engine.device=auto`` is resolved as the deployment resolves it (GPU when one is visible);
* ``engine=sglang``: servers (prefill + decode, or colocated) x ``engine.tensor_parallel_size``;
* ``engine=endpoint``: ``engine.n_gpus``, the GPUs behind the service as the user declares them.

:func:`check_gpu_budget` runs while the config is validated (``harness.config.check_config``), so a
deployment over budget fails before any work with a :class:`~vocab.errors.ConfigError` naming
``system.gpu_budget``, the count and how it was made. The simulator calls it again for configs that
studies build in code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from systems.topology import ROLES, topology_of
from vocab.errors import ConfigError


@dataclass(frozen=True)
class DeviceCount:
    """The devices a deployment needs and how they were counted."""

    devices: int
    unit: str  # "GPU" or "CPU device"
    how: str  # e.g. "engine=vllm on gpu: 2 prefill x tp2 + 1 decode x tp1"


def _sim_count(system: Any, engine: Any) -> DeviceCount:
    parts, total = [], 0
    for role in ROLES:
        n = system.count(role)
        if n:
            pool = engine.pool(role)
            total += n * int(pool.tp) * int(pool.pp)
            parts.append(f"{n} {role} x tp{pool.tp} x pp{pool.pp}")
    return DeviceCount(total, "GPU", f"engine=sim: {' + '.join(parts) or 'no instances'}")


def _vllm_device(engine: Any) -> str:
    if engine.device != "auto":
        return str(engine.device)
    from systems.launch.model_path import resolve_device  # as the deployment resolves it

    return resolve_device("auto")


def _vllm_count(system: Any, engine: Any, hardware: Any) -> DeviceCount:
    device = _vllm_device(engine)
    roles = ["colocated"] if not topology_of(system.name).disaggregated else ["prefill", "decode", "mixed"]
    parts, total = [], 0
    for role in roles:
        n = system.count(role)
        if not n:
            continue
        if device != "gpu":
            total += n
            parts.append(f"{n} {role} instance(s) x 1")
            continue
        role_tp = engine.role(role).tensor_parallel_size if role != "colocated" else None
        tp = int(role_tp or engine.tensor_parallel_size)
        total += n * tp
        parts.append(f"{n} {role} x tp{tp}")
    where = ("gpu" if device == "gpu" else
             f"cpu, one device of hardware={getattr(hardware, 'name', '?')} per instance, no GPU used")
    auto = " (engine.device=auto)" if engine.device == "auto" else ""
    return DeviceCount(total, "GPU" if device == "gpu" else "CPU device",
                       f"engine=vllm on {where}{auto}: {' + '.join(parts) or 'no instances'}")


def _sglang_count(system: Any, engine: Any) -> DeviceCount:
    if topology_of(system.name).disaggregated:
        servers = {"prefill": system.count("prefill"), "decode": system.count("decode")}
    else:
        servers = {"colocated": system.count("colocated")}
    tp = int(engine.tensor_parallel_size)
    total = sum(servers.values()) * tp
    parts = " + ".join(f"{n} {role}" for role, n in servers.items() if n) or "no"
    return DeviceCount(total, "GPU", f"engine=sglang: ({parts}) server(s) x engine.tensor_parallel_size={tp}")


def deployment_devices(system: Any, engine: Any, hardware: Any = None) -> DeviceCount:
    """The devices the deployment of ``system`` on ``engine`` needs (see the module docstring)."""
    name = engine.name
    if name == "sim":
        return _sim_count(system, engine)
    if name == "vllm":
        return _vllm_count(system, engine, hardware)
    if name == "sglang":
        return _sglang_count(system, engine)
    if name == "endpoint":
        n = int(engine.n_gpus)
        return DeviceCount(n, "GPU", f"engine=endpoint: engine.n_gpus={n}, the GPUs behind the service")
    raise ConfigError(f"engine.name: no GPU count for engine={name!r}")


def check_gpu_budget(system: Any, engine: Any, hardware: Any = None) -> DeviceCount:
    """The device count; ``ConfigError`` naming ``system.gpu_budget`` when it exceeds the budget."""
    budget = system.gpu_budget
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise ConfigError(f"system.gpu_budget: must be an integer >= 1 or null (no limit), got {budget!r}")
    count = deployment_devices(system, engine, hardware)
    if budget is not None and count.devices > budget:
        raise ConfigError(f"system.gpu_budget={budget}: the deployment needs {count.devices} {count.unit}s "
                          f"({count.how}), more than the budget")
    return count
