"""SGLang PD / router / HiCache-on-Mooncake command lines, environments and deployment plans, checked
without a GPU and without SGLang installed (nothing is launched)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from harness.results import RunFolder
from systems.contract import DeploymentError
from systems.deployments import sglang as sglang_deployment
from systems.deployments.sglang import SglangDeployment, build_specs, missing_requirements, visible_gpus
from systems.launch.sglang_commands import (
    ROUTER_MODULE,
    SERVER_MODULE,
    HiCacheSpec,
    MooncakeStoreSpec,
    SglangServerSpec,
    mooncake_store_env,
    parse_size_bytes,
    router_command,
    server_command,
    server_env,
    server_tmp_dir,
)
from vocab.errors import ConfigError


@pytest.fixture
def cfg_for(compose):
    return lambda overrides: compose(["engine=sglang", "system=distserve", *overrides])


@pytest.fixture
def deployment(no_load):
    return lambda cfg, folder: SglangDeployment(cfg, RunFolder(folder), no_load)


def arg(cmd: list[str], flag: str) -> str:
    assert cmd.count(flag) == 1, f"{flag} appears {cmd.count(flag)} times in {cmd}"
    return cmd[cmd.index(flag) + 1]


def ports(start: int = 40000):
    counter = itertools.count(start)
    return lambda: next(counter)


def spec(**kw) -> SglangServerSpec:
    base = dict(name="prefill0", model_path="/models/llama", served_model_name="llama3_8b", port=30000,
                role="prefill", bootstrap_port=8998, gpu_ids=("0",))
    base.update(kw)
    return SglangServerSpec(**base)


def store(**kw) -> MooncakeStoreSpec:
    base = dict(master_addr="127.0.0.1:50051", global_segment_size=1 << 30, protocol="rdma", device="mlx5_0")
    base.update(kw)
    return MooncakeStoreSpec(**base)


# ----------------------------------------------------------------------------- server commands


def test_prefill_server_command_with_mooncake_backend():
    cmd = server_command(spec(ib_device="mlx5_0", tp=2, gpu_ids=("2", "3"), page_size=64, mem_fraction_static=0.8))
    assert cmd[:3] == [sys.executable, "-m", SERVER_MODULE]
    assert arg(cmd, "--model-path") == "/models/llama" and arg(cmd, "--served-model-name") == "llama3_8b"
    assert arg(cmd, "--host") == "127.0.0.1" and arg(cmd, "--port") == "30000"
    assert arg(cmd, "--tp-size") == "2" and arg(cmd, "--page-size") == "64"
    assert arg(cmd, "--mem-fraction-static") == "0.8"
    assert arg(cmd, "--disaggregation-mode") == "prefill"
    assert arg(cmd, "--disaggregation-transfer-backend") == "mooncake"
    assert arg(cmd, "--disaggregation-ib-device") == "mlx5_0"
    assert arg(cmd, "--disaggregation-bootstrap-port") == "8998"
    assert "--enable-metrics" in cmd and "--enable-cache-report" in cmd
    assert "--disable-radix-cache" not in cmd and "--enable-hierarchical-cache" not in cmd
    assert "--base-gpu-id" not in cmd  # GPUs come from CUDA_VISIBLE_DEVICES


def test_decode_server_command_has_no_bootstrap_port_and_nixl_variant():
    decode = server_command(spec(name="decode0", role="decode", bootstrap_port=None, port=30001))
    assert arg(decode, "--disaggregation-mode") == "decode"
    assert arg(decode, "--disaggregation-transfer-backend") == "mooncake"
    assert "--disaggregation-bootstrap-port" not in decode and "--disaggregation-ib-device" not in decode
    nixl = server_command(spec(transfer_backend="nixl"))
    assert arg(nixl, "--disaggregation-transfer-backend") == "nixl"


def test_colocated_server_has_no_disaggregation_flags_and_can_use_base_gpu_id():
    cmd = server_command(spec(role="colocated", bootstrap_port=None, gpu_ids=(), base_gpu_id=3, radix_cache=False,
                              extra_args=("--attention-backend", "triton")))
    assert not [a for a in cmd if a.startswith("--disaggregation")]
    assert arg(cmd, "--base-gpu-id") == "3" and "--disable-radix-cache" in cmd
    assert cmd[-2:] == ["--attention-backend", "triton"]


# ----------------------------------------------------------------------------- environment


def test_server_env_gpus_caches_offline_loopback_and_transfer_protocol(tmp_path):
    s = spec(tp=2, gpu_ids=("4", "5"), transfer_protocol="tcp")
    env = server_env(s, tmp_path, base_env={"HOME": "/home/x", "MC_FORCE_TCP": "0", "PATH": "/usr/bin"})
    root = (tmp_path / "prefill0").resolve()
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    for key in ("XDG_CACHE_HOME", "HF_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE"):
        assert Path(env[key]).is_relative_to(root), key
    assert env["SGLANG_HOST_IP"] == "127.0.0.1"
    assert env["MOONCAKE_PROTOCOL"] == "tcp" and env["MC_FORCE_TCP"] == "1"
    assert env["PATH"] == "/usr/bin" and "MOONCAKE_MASTER" not in env
    rdma = server_env(spec(), tmp_path, base_env={"MC_FORCE_TCP": "1"})
    assert rdma["MOONCAKE_PROTOCOL"] == "rdma" and "MC_FORCE_TCP" not in rdma
    colocated = server_env(spec(role="colocated", bootstrap_port=None), tmp_path, base_env={})
    assert "MOONCAKE_PROTOCOL" not in colocated


def test_tmp_dir_moves_out_of_a_long_run_folder(tmp_path):
    assert server_tmp_dir(spec(), Path("/runs/r1")) == Path("/runs/r1/prefill0/tmp")
    deep = tmp_path / ("x" * 120)
    moved = server_tmp_dir(spec(), deep)
    assert not moved.is_relative_to(deep) and len(str(moved)) < 80
    assert moved == server_tmp_dir(spec(), deep)  # stable, so teardown finds it again


# ----------------------------------------------------------------------------- HiCache + Mooncake


def test_hicache_with_mooncake_l3_flags_and_env(tmp_path):
    hicache = HiCacheSpec(ratio=2.5, storage_backend="mooncake", write_policy="write_back",
                          prefetch_policy="timeout", mooncake_store=store())
    prefill = server_command(spec(hicache=hicache))
    assert "--enable-hierarchical-cache" in prefill
    assert arg(prefill, "--hicache-ratio") == "2.5" and arg(prefill, "--hicache-storage-backend") == "mooncake"
    assert arg(prefill, "--hicache-write-policy") == "write_back"
    assert arg(prefill, "--hicache-mem-layout") == "page_first" and arg(prefill, "--hicache-io-backend") == "kernel"
    assert arg(prefill, "--hicache-storage-prefetch-policy") == "timeout"
    assert "--disaggregation-decode-enable-offload-kvcache" not in prefill
    env = server_env(spec(hicache=hicache), tmp_path, base_env={})
    assert env["MOONCAKE_MASTER"] == "127.0.0.1:50051"
    assert env["MOONCAKE_TE_META_DATA_SERVER"] == "P2PHANDSHAKE"
    assert env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] == str(1 << 30)
    assert env["MOONCAKE_PROTOCOL"] == "rdma" and env["MOONCAKE_DEVICE"] == "mlx5_0"
    assert env["MOONCAKE_LOCAL_HOSTNAME"] == "127.0.0.1"


def test_hicache_on_decode_is_async_offload():
    hicache = HiCacheSpec(storage_backend="mooncake", mooncake_store=store())
    decode = server_command(spec(name="decode0", role="decode", bootstrap_port=None, hicache=hicache))
    assert "--disaggregation-decode-enable-offload-kvcache" in decode
    assert "--enable-hierarchical-cache" not in decode
    assert arg(decode, "--hicache-storage-backend") == "mooncake"
    with pytest.raises(ValueError, match="decode server.*storage_backend"):
        spec(name="decode0", role="decode", bootstrap_port=None, hicache=HiCacheSpec(storage_backend=None))


def test_hicache_file_backend_and_host_only(tmp_path):
    file_env = server_env(spec(hicache=HiCacheSpec(storage_backend="file")), tmp_path, base_env={})
    assert file_env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == str((tmp_path / "hicache_file").resolve())
    assert "MOONCAKE_MASTER" not in file_env
    l2_only = server_command(spec(hicache=HiCacheSpec(storage_backend=None)))
    assert "--enable-hierarchical-cache" in l2_only and "--hicache-storage-backend" not in l2_only


def test_mooncake_store_env_parses_sizes_and_validates():
    env = mooncake_store_env("127.0.0.1:6000", "P2PHANDSHAKE", "4gb", "tcp", None, master_metrics_port=6001)
    assert env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] == str(4 << 30) and env["MOONCAKE_DEVICE"] == ""
    assert env["MOONCAKE_PROTOCOL"] == "tcp" and env["MOONCAKE_MASTER_METRICS_PORT"] == "6001"
    assert parse_size_bytes("512MB") == 512 << 20 and parse_size_bytes(1234) == 1234
    with pytest.raises(ValueError, match="master_addr"):
        mooncake_store_env("localhost")
    with pytest.raises(ValueError, match="protocol"):
        mooncake_store_env("127.0.0.1:6000", protocol="udp")
    with pytest.raises(ValueError, match="size"):
        mooncake_store_env("127.0.0.1:6000", global_segment_size="lots")


# ----------------------------------------------------------------------------- router


def test_router_pd_command():
    cmd = router_command(8000, [("http://127.0.0.1:30000", 8998), ("http://127.0.0.1:30002", 8999)],
                         ["http://127.0.0.1:30001"], "cache_aware", prometheus_port=29123)
    assert cmd[:4] == [sys.executable, "-m", ROUTER_MODULE, "--pd-disaggregation"]
    prefills = [cmd[i + 1:i + 3] for i, a in enumerate(cmd) if a == "--prefill"]
    assert prefills == [["http://127.0.0.1:30000", "8998"], ["http://127.0.0.1:30002", "8999"]]
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--decode"] == ["http://127.0.0.1:30001"]
    assert arg(cmd, "--policy") == "cache_aware"
    assert arg(cmd, "--host") == "127.0.0.1" and arg(cmd, "--port") == "8000"
    assert arg(cmd, "--prometheus-host") == "127.0.0.1" and arg(cmd, "--prometheus-port") == "29123"
    assert "--worker-urls" not in cmd and "--disable-retries" in cmd


def test_router_regular_mode_and_validation():
    cmd = router_command(8000, [], [], "round_robin", workers=["http://127.0.0.1:1", "http://127.0.0.1:2"])
    assert "--pd-disaggregation" not in cmd
    assert cmd[cmd.index("--worker-urls") + 1:cmd.index("--worker-urls") + 3] == ["http://127.0.0.1:1",
                                                                                  "http://127.0.0.1:2"]
    with pytest.raises(ValueError, match="at least one prefill and one decode"):
        router_command(8000, [("http://127.0.0.1:1", 8998)], [], "round_robin")
    with pytest.raises(ValueError, match="policy"):
        router_command(8000, [("http://127.0.0.1:1", 8998)], ["http://127.0.0.1:2"], "least_loaded")
    with pytest.raises(ValueError, match="not both"):
        router_command(8000, [("http://127.0.0.1:1", 8998)], ["http://127.0.0.1:2"], workers=["http://127.0.0.1:3"])
    with pytest.raises(ValueError, match="port"):
        router_command(70000, [("http://127.0.0.1:1", 8998)], ["http://127.0.0.1:2"])


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(("kw", "match"), [
    (dict(role="router"), "role must be one of prefill, decode, colocated"),
    (dict(tp=0), "tp must be an integer >= 1"),
    (dict(port=0), "port must be a port in 1..65535"),
    (dict(port=70000), "port must be a port in 1..65535"),
    (dict(bootstrap_port=None), "prefill server needs bootstrap_port"),
    (dict(role="decode"), "bootstrap_port is only for prefill"),
    (dict(bootstrap_port=30000), "bootstrap_port and port must differ"),
    (dict(tp=2, gpu_ids=("0",)), "one GPU per TP rank"),
    (dict(gpu_ids=("0",), base_gpu_id=0), "not both"),
    (dict(transfer_backend="tcp"), "transfer_backend must be one of mooncake, nixl"),
    (dict(transfer_backend="nixl", ib_device="mlx5_0"), "ib_device"),
    (dict(mem_fraction_static=1.5), "mem_fraction_static"),
    (dict(chunked_prefill_size=0), "chunked_prefill_size"),
    (dict(hicache=HiCacheSpec(storage_backend=None), radix_cache=False), "radix cache"),
    (dict(transfer_protocol="tcp", hicache=HiCacheSpec(mooncake_store=MooncakeStoreSpec(master_addr="127.0.0.1:1"))),
     "one MOONCAKE_PROTOCOL"),
])
def test_server_spec_validation_names_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        spec(**kw)


@pytest.mark.parametrize(("kw", "match"), [
    (dict(ratio=1.0), "ratio must be > 1"),
    (dict(write_policy="lazy"), "write_policy"),
    (dict(storage_backend="s3"), "storage_backend"),
    (dict(storage_backend="mooncake"), "needs a MooncakeStoreSpec"),
])
def test_hicache_spec_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        HiCacheSpec(**{"storage_backend": None, **kw})


@pytest.mark.parametrize(("override", "key"), [
    ("engine.transfer_backend=tcp", "engine.transfer_backend"),
    ("engine.tensor_parallel_size=0", "engine.tensor_parallel_size"),
    ("engine.router_policy=least_loaded", "engine.router_policy"),
    ("engine.mem_fraction_static=1.0", "engine.mem_fraction_static"),
    ("engine.hicache.ratio=1", "engine.hicache.ratio"),
    ("engine.hicache.write_policy=never", "engine.hicache.write_policy"),
    ("engine.hicache.global_segment_size=0gb", "engine.hicache.global_segment_size"),
    ("engine.hicache.protocol=udp", "engine.hicache.protocol"),
    ("engine.bootstrap_port_base=80", "engine.bootstrap_port_base"),
])
def test_engine_config_errors_name_the_key(cfg_for, override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        cfg_for([override])


# ----------------------------------------------------------------------------- deployment plans


def test_plan_2p1d_tp2_gets_disjoint_gpu_blocks(cfg_for):
    cfg = cfg_for(["system.prefill_instances=2", "engine.tensor_parallel_size=2", "engine.ib_device=mlx5_0"])
    plan = build_specs(cfg, "/models/llama", port_alloc=ports())
    assert [(s.name, s.role) for s in plan.servers] == [("prefill0", "prefill"), ("prefill1", "prefill"),
                                                        ("decode0", "decode")]
    assert [s.gpu_ids for s in plan.servers] == [("0", "1"), ("2", "3"), ("4", "5")]
    assert all(s.nccl_port is not None and s.tp == 2 for s in plan.servers)
    assert plan.servers[0].bootstrap_port != plan.servers[1].bootstrap_port
    assert plan.servers[2].bootstrap_port is None
    assert not plan.servers[0].radix_cache  # system=distserve: prefix_caching false
    assert plan.master is None and all(s.hicache is None for s in plan.servers)
    cmd = server_command(plan.servers[1])
    assert arg(cmd, "--disaggregation-bootstrap-port") == str(plan.servers[1].bootstrap_port)
    assert arg(cmd, "--disaggregation-ib-device") == "mlx5_0" and arg(cmd, "--context-length") == "8192"
    assert plan.router.prefill == tuple((s.url, s.bootstrap_port) for s in plan.servers[:2])
    assert plan.router.decode == (plan.servers[2].url,)
    assert plan.router.policy == "power_of_two"  # system.router=least_loaded, closest sglang_router policy
    all_ports = [p for s in plan.servers for p in (s.port, s.bootstrap_port, s.nccl_port) if p] + [
        plan.router.port, plan.router.prometheus_port]
    assert len(all_ports) == len(set(all_ports))


def test_plan_maps_onto_visible_gpus_and_fixed_bootstrap_ports(cfg_for):
    cfg = cfg_for(["engine.bootstrap_port_base=9100", "system.prefill_instances=2"])
    plan = build_specs(cfg, "/m", gpus=["3", "5", "7"], port_alloc=ports())
    assert [s.gpu_ids for s in plan.servers] == [("3",), ("5",), ("7",)]
    assert [s.bootstrap_port for s in plan.servers] == [9100, 9101, None]
    with pytest.raises(DeploymentError, match="need 3 GPUs, only 2 visible"):
        build_specs(cfg, "/m", gpus=["0", "1"], port_alloc=ports())
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 6"}) == ["2", "6"]


def test_plan_hicache_mooncake_starts_a_master_and_shares_it(cfg_for):
    cfg = cfg_for(["system=mooncake", "engine.hicache.enabled=true", "engine.hicache.decode_offload=true",
                   "engine.hicache.global_segment_size=2gb", "engine.transfer_protocol=tcp"])
    plan = build_specs(cfg, "/m", port_alloc=ports())
    assert plan.master is not None
    assert all(s.hicache is not None and s.hicache.mooncake_store is not None for s in plan.servers)
    assert {s.hicache.mooncake_store.master_addr for s in plan.servers} == {plan.master.addr}
    assert plan.servers[0].hicache.mooncake_store.protocol == "tcp"
    assert plan.servers[0].hicache.mooncake_store.global_segment_size == 2 << 30
    assert "--disaggregation-decode-enable-offload-kvcache" in server_command(plan.servers[1])
    assert plan.router.policy == "cache_aware"  # system.router=conductor
    no_offload = build_specs(cfg_for(["system=mooncake", "engine.hicache.enabled=true"]), "/m", port_alloc=ports())
    assert no_offload.servers[0].hicache is not None and no_offload.servers[1].hicache is None


def test_plan_refuses_hicache_without_prefix_caching(cfg_for):
    with pytest.raises(DeploymentError, match="system.prefix_caching"):
        build_specs(cfg_for(["engine.hicache.enabled=true"]), "/m", port_alloc=ports())


@pytest.mark.parametrize(("overrides", "match"), [
    (["system=splitwise"], "engine=sglang: cannot run system=splitwise"),
    (["system.decode_instances=0"], "system.decode_instances: system=distserve needs prefill_instances >= 1 and "
                                    "decode_instances >= 1"),
    (["system=vllm_baseline", "system.router=conductor"], "system.router=conductor"),
])
def test_unsupported_deployments_are_refused_while_validating(cfg_for, overrides, match):
    with pytest.raises(ConfigError, match=match):
        cfg_for(overrides)


@pytest.mark.parametrize(("system", "router", "policy"), [
    ("distserve", "load_balancing", "power_of_two"),  # refused before the routers had one home
    ("distserve", "local_cache_aware", "cache_aware"),
    ("mooncake", "global_cache_aware", "cache_aware"),
    ("vllm_baseline", "least_outstanding", "power_of_two"),
    ("vllm_baseline", "round_robin", "round_robin"),
])
def test_every_router_a_system_accepts_maps_to_an_sglang_router_policy(cfg_for, system, router, policy):
    plan = build_specs(cfg_for([f"system={system}", f"system.router={router}"]), "/m", port_alloc=ports())
    assert plan.router.policy == policy


def test_plan_colocated_for_vllm_baseline(cfg_for):
    plan = build_specs(cfg_for(["system=vllm_baseline", "engine.router_policy=random"]), "/m", port_alloc=ports())
    assert [s.role for s in plan.servers] == ["colocated", "colocated"]
    assert plan.router.workers == tuple(s.url for s in plan.servers) and not plan.router.pd
    assert plan.router.policy == "random"
    assert not [a for a in server_command(plan.servers[0]) if a.startswith("--disaggregation")]


# ----------------------------------------------------------------------------- refusing on this host


def test_deployment_refuses_without_a_gpu(deployment, cfg_for, tmp_path, monkeypatch):
    monkeypatch.setattr(sglang_deployment, "resolve_device", lambda requested: "cpu")
    started = []
    monkeypatch.setattr(sglang_deployment.ManagedProcess, "start", lambda self, *a, **k: started.append(a))
    with pytest.raises(DeploymentError, match="needs an NVIDIA GPU"), deployment(cfg_for([]), tmp_path):
        pass
    assert started == []


def test_deployment_refuses_without_sglang_and_names_the_pip_package(deployment, cfg_for, tmp_path, monkeypatch):
    monkeypatch.setattr(sglang_deployment, "resolve_device", lambda requested: "gpu")
    monkeypatch.setattr(sglang_deployment.importlib.util, "find_spec", lambda name: None)
    started = []
    monkeypatch.setattr(sglang_deployment.ManagedProcess, "start", lambda self, *a, **k: started.append(a))
    with pytest.raises(DeploymentError, match=r"pip install sglang\b.*pip install sglang-router"):
        deployment(cfg_for([]), tmp_path).__enter__()
    assert started == []


def test_missing_requirements_lists_what_the_plan_needs():
    present = {"sglang", "sglang_router"}
    missing = missing_requirements(True, "mooncake", True, find_spec=lambda m: m if m in present else None,
                                   which=lambda b: None)
    assert missing == ["Python package 'mooncake' (pip install mooncake-transfer-engine)",
                       "binary 'mooncake_master' on PATH (pip install mooncake-transfer-engine "
                       "(it ships the mooncake_master binary))"]
    assert missing_requirements(False, "nixl", False, find_spec=lambda m: m, which=lambda b: b) == []
    assert "pip install nixl" in missing_requirements(True, "nixl", False, find_spec=lambda m: m if m in present else None)[0]


@pytest.mark.skipif(sglang_deployment.resolve_device("auto") == "gpu", reason="this host has a GPU")
def test_this_gpu_less_host_is_refused_unpatched(deployment, cfg_for, tmp_path):
    with pytest.raises(DeploymentError, match="NVIDIA GPU"), deployment(cfg_for([]), tmp_path):
        pass
