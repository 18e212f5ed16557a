"""SGLang command lines and environments: PD-disaggregated servers, the ``sglang_router`` and HiCache
with Mooncake Store as its L3 tier. Pure functions over frozen specs, so everything here is testable
without a GPU and without SGLang installed; ``systems/deployments/sglang.py`` runs what these build.

What is built (flag names checked against SGLang's sources and docs, see "Sources" below):

- ``server_command(spec)``: ``python -m sglang.launch_server --model-path M --served-model-name N
  --host 127.0.0.1 --port P --tp-size T ...``; a prefill or decode server adds ``--disaggregation-mode
  prefill|decode --disaggregation-transfer-backend mooncake|nixl [--disaggregation-ib-device D]``, and a
  prefill server ``--disaggregation-bootstrap-port B``. HiCache adds ``--enable-hierarchical-cache
  --hicache-ratio R --hicache-write-policy W --hicache-io-backend IO --hicache-mem-layout L
  [--hicache-storage-backend mooncake|file --hicache-storage-prefetch-policy F]``; on a decode server
  HiCache is SGLang's async KV offload to the L3 store (``--disaggregation-decode-enable-offload-kvcache``
  plus the storage flags, no ``--enable-hierarchical-cache``), as SGLang's HiCache guide documents.
- ``router_command(...)``: ``python -m sglang_router.launch_router --pd-disaggregation --prefill URL
  BOOTSTRAP_PORT ... --decode URL ... --policy P --host 127.0.0.1 --port P`` (or ``--worker-urls`` for
  colocated servers).
- the Mooncake Store master it needs is started with :func:`systems.launch.mooncake_store.mooncake_master_command`
  (shared with ``engine=vllm``).
- ``mooncake_store_env(...)``: the variables SGLang's Mooncake store backend reads
  (``MOONCAKE_MASTER``, ``MOONCAKE_TE_META_DATA_SERVER``, ``MOONCAKE_GLOBAL_SEGMENT_SIZE``,
  ``MOONCAKE_PROTOCOL``, ``MOONCAKE_DEVICE``, ``MOONCAKE_LOCAL_HOSTNAME``).
- ``server_env(spec, run_dir)``: ``CUDA_VISIBLE_DEVICES``, every cache and temporary file inside
  ``run_dir/<name>/``, Hugging Face offline, ``SGLANG_HOST_IP=127.0.0.1``.

What binds where. Every HTTP endpoint the suite starts listens on 127.0.0.1: the servers (``--host``),
the router (``--host``, and its Prometheus exporter through ``--prometheus-host``), the master's RPC
server (``--rpc_address``). The PD bootstrap server of a prefill server binds ``--host`` in current
SGLang (``CommonKVBootstrapServer`` in ``disaggregation/common/conn.py``; SGLang releases before 0.5
bound it to all interfaces). The KV manager's ZMQ socket and the Mooncake transfer engine's handshake
address follow ``SGLANG_HOST_IP``, which ``server_env`` sets to 127.0.0.1. What cannot be held to
loopback from the outside:

- the Mooncake transfer engine's own listeners (its P2P-handshake RPC port and, with
  ``protocol=tcp``, the TCP transport's data port) are opened by the C++ engine on all interfaces;
  with ``protocol=rdma`` the KV bytes move over the RDMA NIC, not a socket at all;
- nothing of ``mooncake_master``: its RPC server and its metrics server are given 127.0.0.1
  (``--rpc_address``, ``--metrics_host``) and its HTTP metadata server is off;
- ``torch.distributed``'s TCP store and NCCL's bootstrap sockets of a ``tp > 1`` server
  (``--nccl-port``) bind all interfaces, as in every multi-GPU PyTorch job.

Run it on a host whose firewall keeps those ports private, as for any multi-process GPU job.

Sources (SGLang ``sgl-project/sglang`` main as of 0.5.x; router ``sgl-router`` 0.2.x; Mooncake
``kvcache-ai/Mooncake`` main):

- server flags: ``docs/advanced_features/server_arguments.md`` and ``python/sglang/srt/server_args.py``
  (``--disaggregation-*``, ``--hicache-*``, ``--tp-size``, ``--base-gpu-id``, ``--page-size``,
  ``--mem-fraction-static``, ``--chunked-prefill-size``, ``--max-running-requests``,
  ``--context-length``, ``--random-seed``, ``--nccl-port``, ``--enable-metrics``,
  ``--enable-cache-report``, ``--disable-radix-cache``); https://docs.sglang.io/advanced_features/server_arguments.html
- PD usage: ``docs/advanced_features/pd_disaggregation.md`` (https://docs.sglang.io/advanced_features/pd_disaggregation.html)
- HiCache, incl. decode offload in PD: ``docs/advanced_features/hicache_best_practices.md``
- Mooncake store env: ``python/sglang/srt/mem_cache/storage/mooncake_store/README.md`` and
  ``mooncake_store.py`` / ``python/sglang/srt/environ.py``; transfer protocol:
  ``python/sglang/srt/distributed/device_communicators/mooncake_transfer_engine.py`` (``MOONCAKE_PROTOCOL``,
  ``MC_FORCE_TCP``)
- router flags: ``sgl-router/py_src/sglang_router/router_args.py`` and ``docs/advanced_features/router.md``
- ``mooncake_master`` flags: ``mooncake-store/src/master.cpp`` (``rpc_address``, ``rpc_port``,
  ``metrics_host``, ``metrics_port``, ``enable_http_metadata_server``); its ``/metrics`` page:
  ``mooncake-store/src/rpc_service.cpp``
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from systems.launch.mooncake_store import P2P_HANDSHAKE
from systems.launch.ports import LOOPBACK

logger = logging.getLogger(__name__)

SERVER_MODULE = "sglang.launch_server"
ROUTER_MODULE = "sglang_router.launch_router"
ROLES = ("prefill", "decode", "colocated")
TRANSFER_BACKENDS = ("mooncake", "nixl")
TRANSFER_PROTOCOLS = ("rdma", "tcp")
ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
HICACHE_STORAGE_BACKENDS = ("mooncake", "file")
HICACHE_WRITE_POLICIES = ("write_through", "write_back", "write_through_selective")
HICACHE_MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
HICACHE_IO_BACKENDS = ("kernel", "direct")
HICACHE_PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
DEFAULT_GLOBAL_SEGMENT_BYTES = 4 << 30  # SGLang's MOONCAKE_GLOBAL_SEGMENT_SIZE default ("4gb")

# ZMQ ipc:// paths SGLang creates with tempfile are limited to 107 bytes; keep TMPDIR short.
_MAX_TMP_DIR_LEN = 80
_SIZE_RE = re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb|tb)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}


def _check_port(owner: str, key: str, port: int) -> None:
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"{owner}: {key} must be a port in 1..65535, got {port!r}")


def parse_size_bytes(value: int | str) -> int:
    """Bytes from an int or a string like ``"4gb"``, ``"512mb"``, ``"1073741824"`` (binary units)."""
    if isinstance(value, bool):
        raise ValueError(f"size: expected bytes or '<n>gb', got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE_RE.match(str(value))
        if not match:
            raise ValueError(f"size: expected bytes or '<n>kb|mb|gb|tb', got {value!r}")
        unit = match.group(2).lower() if match.group(2) else None
        size = int(match.group(1)) * _SIZE_UNITS[unit]
    if size <= 0:
        raise ValueError(f"size: must be > 0 bytes, got {value!r}")
    return size


# ----------------------------------------------------------------------------- Mooncake Store


@dataclass(frozen=True)
class MooncakeStoreSpec:
    """Where an SGLang server finds Mooncake Store (HiCache's L3 tier) and what it contributes to it."""

    master_addr: str  # host:port of mooncake_master's RPC server
    metadata_server: str = P2P_HANDSHAKE  # or an http://.../metadata URL
    global_segment_size: int = DEFAULT_GLOBAL_SEGMENT_BYTES  # bytes this server adds to the pool
    protocol: str = "rdma"  # rdma | tcp
    device: str = ""  # RDMA device(s), e.g. "mlx5_0,mlx5_1"; "" lets Mooncake pick
    local_hostname: str = LOOPBACK
    master_metrics_port: Optional[int] = None

    def __post_init__(self) -> None:
        host, sep, port = self.master_addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"mooncake_store: master_addr must be host:port, got {self.master_addr!r}")
        _check_port("mooncake", "master_addr port", int(port))
        if self.protocol not in TRANSFER_PROTOCOLS:
            raise ValueError(f"mooncake_store: protocol must be one of {', '.join(TRANSFER_PROTOCOLS)}, "
                             f"got {self.protocol!r}")
        if not isinstance(self.global_segment_size, int) or self.global_segment_size <= 0:
            raise ValueError(f"mooncake_store: global_segment_size must be > 0 bytes, got {self.global_segment_size!r}")
        if not self.metadata_server:
            raise ValueError("mooncake_store: metadata_server must be P2PHANDSHAKE or a metadata URL, got ''")
        if self.master_metrics_port is not None:
            _check_port("mooncake", "master_metrics_port", self.master_metrics_port)


def mooncake_store_env(master_addr: str, metadata_server: str = P2P_HANDSHAKE,
                       global_segment_size: int | str = DEFAULT_GLOBAL_SEGMENT_BYTES, protocol: str = "rdma",
                       device: Optional[str] = None, *, local_hostname: str = LOOPBACK,
                       master_metrics_port: Optional[int] = None) -> dict[str, str]:
    """The environment SGLang's Mooncake store backend reads (``MooncakeStoreConfig.load_from_env``).

    ``global_segment_size`` is written as plain bytes, which every SGLang version parses.
    """
    spec = MooncakeStoreSpec(master_addr=master_addr, metadata_server=metadata_server,
                             global_segment_size=parse_size_bytes(global_segment_size), protocol=protocol,
                             device=device or "", local_hostname=local_hostname,
                             master_metrics_port=master_metrics_port)
    return _mooncake_store_env(spec)


def _mooncake_store_env(spec: MooncakeStoreSpec) -> dict[str, str]:
    env = {
        "MOONCAKE_MASTER": spec.master_addr,
        "MOONCAKE_TE_META_DATA_SERVER": spec.metadata_server,
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": str(spec.global_segment_size),
        "MOONCAKE_PROTOCOL": spec.protocol,
        "MOONCAKE_DEVICE": spec.device,
        "MOONCAKE_LOCAL_HOSTNAME": spec.local_hostname,
    }
    if spec.master_metrics_port is not None:
        env["MOONCAKE_MASTER_METRICS_PORT"] = str(spec.master_metrics_port)
    return env


# ----------------------------------------------------------------------------- HiCache


@dataclass(frozen=True)
class HiCacheSpec:
    """SGLang HiCache: GPU (L1) + host memory (L2) + an optional storage backend (L3)."""

    ratio: float = 2.0  # host pool size / device pool size (SGLang requires > 1)
    storage_backend: Optional[str] = "mooncake"  # mooncake | file | None (L1+L2 only)
    write_policy: str = "write_through"
    mem_layout: str = "page_first"  # the layout SGLang's Mooncake backend is documented with
    io_backend: str = "kernel"
    prefetch_policy: str = "best_effort"
    mooncake_store: Optional[MooncakeStoreSpec] = None  # required when storage_backend == "mooncake"

    def __post_init__(self) -> None:
        if not self.ratio > 1:
            raise ValueError(f"hicache: ratio must be > 1 (the host pool is larger than the GPU pool), got {self.ratio}")
        choices = {"storage_backend": (HICACHE_STORAGE_BACKENDS, self.storage_backend),
                   "write_policy": (HICACHE_WRITE_POLICIES, self.write_policy),
                   "mem_layout": (HICACHE_MEM_LAYOUTS, self.mem_layout),
                   "io_backend": (HICACHE_IO_BACKENDS, self.io_backend),
                   "prefetch_policy": (HICACHE_PREFETCH_POLICIES, self.prefetch_policy)}
        for key, (allowed, value) in choices.items():
            if key == "storage_backend" and value is None:
                continue
            if value not in allowed:
                raise ValueError(f"hicache: {key} must be one of {', '.join(allowed)}, got {value!r}")
        if self.storage_backend == "mooncake" and self.mooncake_store is None:
            raise ValueError("hicache: storage_backend='mooncake' needs a MooncakeStoreSpec (hicache.mooncake_store)")
        if self.storage_backend != "mooncake" and self.mooncake_store is not None:
            raise ValueError(f"hicache: a MooncakeStoreSpec was given but storage_backend is {self.storage_backend!r}")
        if self.storage_backend == "mooncake" and self.mem_layout == "layer_first":
            logger.warning("hicache: SGLang documents its Mooncake backend with mem_layout page_first; "
                           "layer_first may be rejected or slow")


def hicache_args(hicache: HiCacheSpec, role: str) -> list[str]:
    """HiCache flags for a server of ``role``.

    Prefill and colocated servers run full HiCache. A decode server only offloads finished KV to the
    L3 store asynchronously (``--disaggregation-decode-enable-offload-kvcache``), so prefill servers can
    reuse it in later turns; SGLang's HiCache guide starts decode servers without
    ``--enable-hierarchical-cache``.
    """
    if role not in ROLES:
        raise ValueError(f"hicache: role must be one of {', '.join(ROLES)}, got {role!r}")
    if role == "decode":
        if hicache.storage_backend is None:
            raise ValueError("hicache: a decode server supports HiCache only as async offload to an L3 "
                             "store; set storage_backend (mooncake or file) or give the decode server no hicache")
        cmd = ["--disaggregation-decode-enable-offload-kvcache"]
    else:
        cmd = ["--enable-hierarchical-cache"]
    cmd += ["--hicache-ratio", f"{hicache.ratio:g}", "--hicache-write-policy", hicache.write_policy,
            "--hicache-io-backend", hicache.io_backend, "--hicache-mem-layout", hicache.mem_layout]
    if hicache.storage_backend is not None:
        cmd += ["--hicache-storage-backend", hicache.storage_backend,
                "--hicache-storage-prefetch-policy", hicache.prefetch_policy]
    return cmd


# ----------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class SglangServerSpec:
    """Everything needed to start one ``sglang.launch_server`` process."""

    name: str  # instance name: log file, run sub-folder, records' ``instance``
    model_path: str
    served_model_name: str
    port: int
    role: str = "colocated"  # prefill | decode | colocated (no disaggregation flags)
    tp: int = 1
    gpu_ids: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES of this server (one per TP rank)
    base_gpu_id: Optional[int] = None  # alternative to gpu_ids: --base-gpu-id within the visible GPUs
    bootstrap_port: Optional[int] = None  # prefill only: --disaggregation-bootstrap-port
    transfer_backend: str = "mooncake"  # mooncake | nixl (prefill/decode only)
    transfer_protocol: str = "rdma"  # Mooncake transfer engine: rdma | tcp (MOONCAKE_PROTOCOL)
    ib_device: Optional[str] = None  # --disaggregation-ib-device, e.g. "mlx5_0" or "mlx5_0,mlx5_1"
    mem_fraction_static: Optional[float] = None
    page_size: Optional[int] = None
    context_length: Optional[int] = None
    chunked_prefill_size: Optional[int] = None  # -1 disables chunked prefill
    max_running_requests: Optional[int] = None
    radix_cache: bool = True  # False: --disable-radix-cache
    hicache: Optional[HiCacheSpec] = None
    nccl_port: Optional[int] = None
    enable_metrics: bool = True  # --enable-metrics (Prometheus /metrics)
    enable_cache_report: bool = True  # --enable-cache-report (usage.prompt_tokens_details.cached_tokens)
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    seed: int = 0
    python: str = sys.executable

    def __post_init__(self) -> None:
        who = self.name or "sglang server"
        if not self.name or "/" in self.name:
            raise ValueError(f"{who}: name must be a non-empty folder name, got {self.name!r}")
        if not self.model_path:
            raise ValueError(f"{who}: model_path must not be empty")
        if not self.served_model_name:
            raise ValueError(f"{who}: served_model_name must not be empty")
        if self.role not in ROLES:
            raise ValueError(f"{who}: role must be one of {', '.join(ROLES)}, got {self.role!r}")
        _check_port(who, "port", self.port)
        if not isinstance(self.tp, int) or self.tp < 1:
            raise ValueError(f"{who}: tp must be an integer >= 1, got {self.tp!r}")
        if self.gpu_ids and self.base_gpu_id is not None:
            raise ValueError(f"{who}: give gpu_ids (CUDA_VISIBLE_DEVICES) or base_gpu_id, not both")
        if self.gpu_ids:
            if len(self.gpu_ids) != self.tp:
                raise ValueError(f"{who}: gpu_ids must list one GPU per TP rank (tp={self.tp}), got {list(self.gpu_ids)}")
            if len(set(self.gpu_ids)) != len(self.gpu_ids):
                raise ValueError(f"{who}: gpu_ids must not repeat a GPU, got {list(self.gpu_ids)}")
            if any(not str(g).strip() or "," in str(g) for g in self.gpu_ids):
                raise ValueError(f"{who}: gpu_ids must be single GPU ids or UUIDs, got {list(self.gpu_ids)}")
        if self.base_gpu_id is not None and self.base_gpu_id < 0:
            raise ValueError(f"{who}: base_gpu_id must be >= 0, got {self.base_gpu_id}")
        if self.role == "prefill" and self.bootstrap_port is None:
            raise ValueError(f"{who}: a prefill server needs bootstrap_port (--disaggregation-bootstrap-port), "
                             "which decode servers and the router use to reach it")
        if self.role != "prefill" and self.bootstrap_port is not None:
            raise ValueError(f"{who}: bootstrap_port is only for prefill servers (role={self.role})")
        if self.bootstrap_port is not None:
            _check_port(who, "bootstrap_port", self.bootstrap_port)
            if self.bootstrap_port == self.port:
                raise ValueError(f"{who}: bootstrap_port and port must differ, both {self.port}")
        if self.nccl_port is not None:
            _check_port(who, "nccl_port", self.nccl_port)
            if self.nccl_port in (self.port, self.bootstrap_port):
                raise ValueError(f"{who}: nccl_port {self.nccl_port} collides with the server's other ports")
        if self.transfer_backend not in TRANSFER_BACKENDS:
            raise ValueError(f"{who}: transfer_backend must be one of {', '.join(TRANSFER_BACKENDS)}, "
                             f"got {self.transfer_backend!r}")
        if self.transfer_protocol not in TRANSFER_PROTOCOLS:
            raise ValueError(f"{who}: transfer_protocol must be one of {', '.join(TRANSFER_PROTOCOLS)}, "
                             f"got {self.transfer_protocol!r}")
        if self.ib_device is not None and self.transfer_backend != "mooncake":
            raise ValueError(f"{who}: ib_device (--disaggregation-ib-device) applies to transfer_backend=mooncake "
                             "only; NIXL picks devices through UCX (UCX_NET_DEVICES)")
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static < 1:
            raise ValueError(f"{who}: mem_fraction_static must be in (0, 1), got {self.mem_fraction_static}")
        for key in ("page_size", "context_length", "max_running_requests"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"{who}: {key} must be >= 1, got {value}")
        if self.chunked_prefill_size is not None and self.chunked_prefill_size != -1 and self.chunked_prefill_size < 1:
            raise ValueError(f"{who}: chunked_prefill_size must be >= 1 or -1 (disabled), got {self.chunked_prefill_size}")
        if self.hicache is not None:
            if not self.radix_cache:
                raise ValueError(f"{who}: hicache needs the radix cache (HiCache extends it); radix_cache=False")
            if self.role == "decode" and self.hicache.storage_backend is None:
                raise ValueError(f"{who}: hicache on a decode server is async KV offload to an L3 store "
                                 "(--disaggregation-decode-enable-offload-kvcache); it needs hicache.storage_backend")
            store = self.hicache.mooncake_store
            if (store is not None and self.disaggregated and self.transfer_backend == "mooncake"
                    and store.protocol != self.transfer_protocol):
                raise ValueError(f"{who}: hicache.mooncake_store.protocol={store.protocol!r} differs from "
                                 f"transfer_protocol={self.transfer_protocol!r}; SGLang reads one MOONCAKE_PROTOCOL "
                                 "for the KV transfer engine and the store")

    @property
    def disaggregated(self) -> bool:
        return self.role in ("prefill", "decode")

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:30000`` (the OpenAI API is under ``/v1``)."""
        return f"http://{LOOPBACK}:{self.port}"


def server_command(spec: SglangServerSpec) -> list[str]:
    """The argv that starts ``spec``'s server (``python -m sglang.launch_server ...``)."""
    cmd = [
        spec.python, "-m", SERVER_MODULE,
        "--model-path", str(spec.model_path),
        "--served-model-name", spec.served_model_name,
        "--host", LOOPBACK,
        "--port", str(spec.port),
        "--tp-size", str(spec.tp),
        "--random-seed", str(spec.seed),
    ]
    if spec.base_gpu_id is not None:
        cmd += ["--base-gpu-id", str(spec.base_gpu_id)]
    if spec.nccl_port is not None:
        cmd += ["--nccl-port", str(spec.nccl_port)]
    optional = (("--mem-fraction-static", spec.mem_fraction_static), ("--page-size", spec.page_size),
                ("--context-length", spec.context_length), ("--chunked-prefill-size", spec.chunked_prefill_size),
                ("--max-running-requests", spec.max_running_requests))
    for flag, value in optional:
        if value is not None:
            cmd += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if spec.enable_metrics:
        cmd.append("--enable-metrics")
    if spec.enable_cache_report:
        cmd.append("--enable-cache-report")
    if not spec.radix_cache:
        cmd.append("--disable-radix-cache")
    if spec.disaggregated:
        cmd += ["--disaggregation-mode", spec.role, "--disaggregation-transfer-backend", spec.transfer_backend]
        if spec.ib_device:
            cmd += ["--disaggregation-ib-device", spec.ib_device]
        if spec.role == "prefill":
            cmd += ["--disaggregation-bootstrap-port", str(spec.bootstrap_port)]
    if spec.hicache is not None:
        cmd += hicache_args(spec.hicache, spec.role)
    return cmd + list(spec.extra_args)


def server_dir(spec: SglangServerSpec, run_dir: Path) -> Path:
    """The folder holding one server's log, caches and temporary files."""
    return Path(run_dir) / spec.name


def server_tmp_dir(spec: SglangServerSpec, run_dir: Path) -> Path:
    """The server's ``TMPDIR``: inside its folder when short enough for ZMQ ``ipc://`` socket paths
    (107 bytes), else a folder under the system temp dir named by a hash of the server folder."""
    inside = server_dir(spec, run_dir).resolve() / "tmp"
    if len(str(inside)) <= _MAX_TMP_DIR_LEN:
        return inside
    digest = hashlib.sha256(str(inside).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"disagg-sglang-{digest}"


def hicache_file_dir(run_dir: Path) -> Path:
    """The ``file`` HiCache L3 store, shared by every server of the run (like a shared Mooncake pool)."""
    return Path(run_dir).resolve() / "hicache_file"


def server_env(spec: SglangServerSpec, run_dir: Path, base_env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The server's environment: ``base_env`` (default ``os.environ``) plus its GPUs, caches inside
    ``run_dir/<name>/``, Hugging Face offline, loopback addresses and the Mooncake settings."""
    root = server_dir(spec, run_dir).resolve()
    cache = root / "cache"
    env = dict(os.environ if base_env is None else base_env)
    env.update({
        "PYTHONUNBUFFERED": "1",
        "XDG_CACHE_HOME": str(cache),
        "XDG_CONFIG_HOME": str(root / "config"),
        "TMPDIR": str(server_tmp_dir(spec, run_dir)),
        "HF_HOME": str(root / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"),
        "FLASHINFER_WORKSPACE_BASE": str(cache),
        "OUTLINES_CACHE_DIR": str(cache / "outlines"),
        # The KV manager's ZMQ socket and the Mooncake transfer engine's address (get_local_ip_auto).
        "SGLANG_HOST_IP": LOOPBACK,
        "DO_NOT_TRACK": "1",
    })
    if spec.gpu_ids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpu_ids)
    if spec.disaggregated and spec.transfer_backend == "mooncake":
        env["MOONCAKE_PROTOCOL"] = spec.transfer_protocol
        if spec.transfer_protocol == "tcp":
            env["MC_FORCE_TCP"] = "1"  # SGLang versions that hard-code "rdma" still get the TCP transport
        else:
            env.pop("MC_FORCE_TCP", None)
    if spec.hicache is not None:
        if spec.hicache.mooncake_store is not None:
            env.update(_mooncake_store_env(spec.hicache.mooncake_store))
        if spec.hicache.storage_backend == "file":
            env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = str(hicache_file_dir(run_dir))
    env.update(spec.extra_env)
    return env


# ----------------------------------------------------------------------------- router


@dataclass(frozen=True)
class SglangRouterSpec:
    """``sglang_router`` in PD mode (prefill + decode servers) or regular mode (colocated workers)."""

    port: int
    policy: str = "round_robin"
    prefill: tuple[tuple[str, Optional[int]], ...] = ()  # (URL, bootstrap port)
    decode: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()  # regular mode
    prometheus_port: Optional[int] = None
    max_concurrent_requests: Optional[int] = None
    disable_retries: bool = True  # a failed request counts as failed, never silently re-sent
    extra_args: tuple[str, ...] = ()
    python: str = sys.executable

    def __post_init__(self) -> None:
        _check_port("router", "port", self.port)
        if self.policy not in ROUTER_POLICIES:
            raise ValueError(f"router: policy must be one of {', '.join(ROUTER_POLICIES)}, got {self.policy!r}")
        pd = bool(self.prefill or self.decode)
        if pd and self.workers:
            raise ValueError("router: give prefill/decode servers (PD mode) or workers (regular mode), not both")
        if pd and not (self.prefill and self.decode):
            raise ValueError(f"router: PD mode needs at least one prefill and one decode server, "
                             f"got {len(self.prefill)} prefill and {len(self.decode)} decode")
        if not pd and not self.workers:
            raise ValueError("router: no servers; give prefill and decode servers or workers")
        urls = [u for u, _ in self.prefill] + list(self.decode) + list(self.workers)
        for url in urls:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"router: server URLs must be http(s) URLs, got {url!r}")
        if len(set(urls)) != len(urls):
            raise ValueError(f"router: a server URL is listed twice: {urls}")
        for url, bootstrap in self.prefill:
            if bootstrap is not None:
                _check_port("router", f"bootstrap port of {url}", bootstrap)
        if self.prometheus_port is not None:
            _check_port("router", "prometheus_port", self.prometheus_port)
            if self.prometheus_port == self.port:
                raise ValueError(f"router: prometheus_port and port must differ, both {self.port}")
        if self.max_concurrent_requests is not None and self.max_concurrent_requests < 1:
            raise ValueError(f"router: max_concurrent_requests must be >= 1, got {self.max_concurrent_requests}")

    @property
    def pd(self) -> bool:
        return bool(self.prefill)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


def router_spec_command(spec: SglangRouterSpec) -> list[str]:
    """argv of ``python -m sglang_router.launch_router`` for ``spec``."""
    cmd = [spec.python, "-m", ROUTER_MODULE]
    if spec.pd:
        cmd.append("--pd-disaggregation")
        for url, bootstrap in spec.prefill:
            cmd += ["--prefill", url] + ([str(bootstrap)] if bootstrap is not None else [])
        for url in spec.decode:
            cmd += ["--decode", url]
    else:
        cmd += ["--worker-urls", *spec.workers]
    cmd += ["--policy", spec.policy, "--host", LOOPBACK, "--port", str(spec.port)]
    if spec.prometheus_port is not None:
        cmd += ["--prometheus-host", LOOPBACK, "--prometheus-port", str(spec.prometheus_port)]
    if spec.max_concurrent_requests is not None:
        cmd += ["--max-concurrent-requests", str(spec.max_concurrent_requests)]
    if spec.disable_retries:
        cmd.append("--disable-retries")
    return cmd + list(spec.extra_args)


def router_command(port: int, prefill: Sequence[tuple[str, Optional[int]]], decode: Sequence[str],
                   policy: str = "round_robin", *, workers: Sequence[str] = (),
                   prometheus_port: Optional[int] = None, max_concurrent_requests: Optional[int] = None,
                   disable_retries: bool = True, extra_args: Sequence[str] = (),
                   python: str = sys.executable) -> list[str]:
    """argv of the SGLang router: PD mode for ``prefill`` (URL, bootstrap port) and ``decode`` URLs,
    or regular mode over ``workers`` when both are empty."""
    return router_spec_command(SglangRouterSpec(
        port=port, policy=policy, prefill=tuple((u, b) for u, b in prefill), decode=tuple(decode),
        workers=tuple(workers), prometheus_port=prometheus_port, max_concurrent_requests=max_concurrent_requests,
        disable_retries=disable_retries, extra_args=tuple(extra_args), python=python))


__all__ = [
    "HiCacheSpec", "MooncakeStoreSpec", "SglangRouterSpec", "SglangServerSpec",
    "hicache_args", "hicache_file_dir", "mooncake_store_env", "parse_size_bytes",
    "router_command", "router_spec_command", "server_command", "server_dir", "server_env", "server_tmp_dir",
]
