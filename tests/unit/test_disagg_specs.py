"""What the disaggregated vLLM deployments would launch and how they join the router's facts to the
records, checked without starting any process."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.results import RunFolder
from systems.contract import DeploymentError
from systems.deployments.disagg import DisaggVllmDeployment, default_cores
from systems.deployments.disagg.facts import (
    attach_router_facts,
    count_failed_puts,
    count_recovered,
    prefill_source_info,
    transfer_by_id,
)
from systems.launch.kv_transfer_config import SUITE_CONNECTORS
from vocab.errors import ConfigError
from vocab.records import RequestRecord, RequestStatus

BASE = ["engine=vllm", "engine.device=cpu", "model=tiny_llama", "hardware=cpu_host"]


@pytest.fixture
def cfg_for(compose):
    return lambda overrides: compose([*BASE, *overrides])


@pytest.fixture
def deployment(no_load):
    return lambda cfg, folder: DisaggVllmDeployment(cfg, RunFolder(folder), no_load)


# -- pure helpers ----------------------------------------------------------------------------------------------
def test_transfer_by_id_splits_bytes_by_blocks_and_sums_durations():
    transfers = [
        {"transfer_ids": ["a", "b"], "blocks": [3, 1], "duration_s": 0.5, "bytes": 400},
        {"transfer_ids": ["a"], "blocks": [2], "duration_s": 0.25, "bytes": 100},
        {"transfer_ids": ["c", "d"], "blocks": [], "duration_s": 1.0, "bytes": 50},
    ]
    moved = transfer_by_id(transfers)
    assert moved["a"] == pytest.approx((0.75, 400.0))
    assert moved["b"] == pytest.approx((0.5, 100.0))
    assert moved["c"] == pytest.approx((1.0, 25.0)) and moved["d"] == pytest.approx((1.0, 25.0))
    assert transfer_by_id([]) == {}


def record(rid: int, **kw) -> RequestRecord:
    base = dict(request_id=rid, status=RequestStatus.OK, arrival_s=0.0, sent_s=0.0, first_token_s=0.1,
                finish_s=0.2, input_length=8, output_length=4, n_out=4)
    base.update(kw)
    return RequestRecord(**base)


def test_attach_router_facts_by_request_id():
    records = (record(1, extra={"kept": 1.0}), record(2), record(3))
    routed = [{"request_id": "1", "prefill_s": 0.3, "decode_s": 0.7, "pool_prefix_tokens": 128,
               "local_prefix_tokens": 0, "transfer_id": "t1", "status": "ok"},
              {"request_id": "2", "prefill_s": float("nan"), "decode_s": None, "transfer_id": "missing"},
              {"request_id": "99", "prefill_s": 5.0}]
    transfers = [{"transfer_ids": ["t1"], "blocks": [4], "duration_s": 0.05, "bytes": 1024}]
    out = attach_router_facts(records, routed, transfers)
    assert len(out) == 3 and [r.request_id for r in out] == [1, 2, 3]
    assert out[0].extra == {"kept": 1.0, "prefill_s": 0.3, "decode_s": 0.7, "pool_prefix_tokens": 128.0,
                            "local_prefix_tokens": 0.0, "kv_transfer_s": 0.05, "kv_transfer_bytes": 1024.0}
    assert out[1].extra == {}  # non-finite / non-numeric values and unknown transfers are dropped
    assert out[2] is records[2]  # no log line: untouched
    assert records[0].extra == {"kept": 1.0}  # the input records are not mutated


def test_prefill_source_info_rates():
    before = {"p0": SimpleNamespace(prompt_tokens_by_source={"local_compute": 100.0, "local_cache_hit": 10.0}),
              "p1": SimpleNamespace(prompt_tokens_by_source={})}
    after = {"p0": SimpleNamespace(prompt_tokens_by_source={"local_compute": 150.0, "local_cache_hit": 30.0,
                                                            "external_kv_transfer": 20.0}),
             "p1": SimpleNamespace(prompt_tokens_by_source={"local_compute": 10.0})}
    info = prefill_source_info(before, after)
    assert info["prefill_prompt_tokens"] == pytest.approx(100.0)
    assert info["prefill_computed_tokens"] == pytest.approx(60.0)
    assert info["local_hit_rate"] == pytest.approx(0.2)
    assert info["pool_hit_rate"] == pytest.approx(0.2)
    assert info["prefill_compute_saved"] == pytest.approx(0.4)


def test_prefill_source_info_without_data_is_empty():
    same = {"p0": SimpleNamespace(prompt_tokens_by_source={"local_compute": 5.0})}
    assert prefill_source_info(same, same) == {}
    assert prefill_source_info(same, {}) == {}
    assert prefill_source_info({"p0": None}, same) == {}


def test_count_recovered_after_offset(tmp_path):
    log = tmp_path / "p0.log"
    old = "INFO Recovered from KV load failure: 7 request(s)\n"
    log.write_text(old + "noise\nWARNING Recovered from KV load failure: 2 request(s)\n"
                   "Recovered from KV load failure: 1 request\nRecovered from KV load failure: x request(s)\n")
    assert count_recovered(log, 0) == 10
    assert count_recovered(log, len(old.encode())) == 3
    assert count_recovered(tmp_path / "absent.log", 0) == 0


def test_count_failed_puts(tmp_path):
    log = tmp_path / "p0.log"
    log.write_text("(APIServer) INFO [metrics.py:103] KV Transfer metrics: MooncakeStoreConnector={'save_put_count': 17, "
                   "'save_put_failed_keys': 8, 'save_put_error_count': 0}\nother line\n"
                   "(APIServer) INFO KV Transfer metrics: MooncakeStoreConnector={'save_put_failed_keys': 3}\n")
    assert count_failed_puts(log, 0) == 11


def test_default_cores():
    assert default_cores("prefill", 8) == "0"
    assert default_cores("decode", 8) == "7" and default_cores("mixed", 2) == "1"
    assert default_cores("decode", 1) == "0" and default_cores("prefill", 1) == "0"


# -- what validation refuses before a deployment exists, and what the deployment refuses -----------------------
@pytest.mark.parametrize(("overrides", "match"), [
    (["system=distserve", "system.mixed_instances=1"], "only a system with a mixed pool"),
    (["system=distserve", "system.router=conductor"], "only system=mooncake has"),
    (["system=distserve", "system.colocated_instances=1"], "system.colocated_instances: must be 0"),
    (["system=distserve", "system.router=nonsense"], "system.router=nonsense"),
    (["system=mooncake", "engine.kv_pool.segment_size=4MB"], "engine.kv_pool.segment_size: Mooncake needs at least 16MB"),
])
def test_config_errors_before_any_work(cfg_for, overrides, match):
    with pytest.raises(ConfigError, match=match):
        cfg_for(overrides)


def test_too_many_cpu_instances_are_refused_by_the_deployment(deployment, cfg_for, tmp_path):
    cfg = cfg_for(["system=distserve", "system.prefill_instances=3", "system.decode_instances=3", "engine.max_instances=5"])
    with pytest.raises(DeploymentError, match="3 GiB"):
        deployment(cfg, tmp_path)


def test_valid_distserve_config_constructs(deployment, cfg_for, tmp_path):
    dep = deployment(cfg_for(["system=distserve"]), tmp_path)
    assert dep.device == "cpu" and not dep.has_pool and dep.servers == []
    assert dep.policy == "load_balancing"  # system=distserve's least_loaded, canonical


@pytest.fixture
def mooncake(deployment, cfg_for, tmp_path, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    cfg = cfg_for(["system=mooncake", "system.prefill_instances=2", "system.decode_instances=1"])
    dep = deployment(cfg, tmp_path / "run")
    dep._bootstrap = {"p0": "127.0.0.1:1", "p1": "127.0.0.1:2"}
    dep.master_address = "127.0.0.1:3"
    dep.run_dir = tmp_path
    return dep


@pytest.mark.integration
def test_mooncake_server_specs(mooncake, tmp_path):
    specs = mooncake.server_specs(Path("/models/x"))
    assert [s.name for s in specs] == ["p0", "p1", "d0"]
    assert mooncake.roles == {"p0": "prefill", "p1": "prefill", "d0": "decode"}
    assert len({s.port for s in specs}) == 3
    for spec, boot in zip(specs[:2], ("127.0.0.1:1", "127.0.0.1:2"), strict=True):
        kv = spec.kv_transfer_config
        assert kv["kv_connector"] == "SuiteMultiConnector" and kv["kv_connector_module_path"] == SUITE_CONNECTORS
        assert kv["kv_role"] == "kv_producer"
        children = kv["kv_connector_extra_config"]["connectors"]
        assert [c["kv_connector"] for c in children] == ["MooncakeStoreConnector", "SuiteMooncakeConnector"]
        assert children[1]["kv_connector_extra_config"]["bootstrap_server_address"] == boot
        assert spec.cpu_omp_threads_bind == "0" and spec.enable_prefix_caching and spec.device == "cpu"
        assert spec.model_path == "/models/x"
        path = Path(spec.extra_env["MOONCAKE_CONFIG_PATH"])
        assert path.is_file() and path.parent == tmp_path.resolve()
        store = json.loads(path.read_text())
        assert store["mode"] == "standalone-store" and store["global_segment_size"] == 0
        assert store["master_server_address"] == "127.0.0.1:3" and store["protocol"] == "tcp"
        assert spec.extra_env["DISAGG_KV_TRANSFER_LOG"] == str((tmp_path / "kv_transfers.jsonl").resolve())
    decode = specs[2]
    kv = decode.kv_transfer_config
    assert kv["kv_connector"] == "SuiteMooncakeConnector" and kv["kv_role"] == "kv_consumer"
    assert "bootstrap_server_address" not in kv["kv_connector_extra_config"]
    assert decode.cpu_omp_threads_bind == "1"
    assert "MOONCAKE_CONFIG_PATH" not in decode.extra_env


@pytest.mark.integration
def test_mooncake_router_config(mooncake):
    specs = mooncake.server_specs(Path("/models/x"))
    mooncake.servers = [SimpleNamespace(spec=s, url=f"http://127.0.0.1:{s.port}") for s in specs]
    rc = mooncake.router_config(Path("/models/x"))
    assert [p["name"] for p in rc["prefill"]] == ["p0", "p1"] and [d["name"] for d in rc["decode"]] == ["d0"]
    assert rc["prefill"][1]["bootstrap"] == "http://127.0.0.1:2" and "bootstrap" not in rc["decode"][0]
    assert rc["mixed"] == [] and rc["policy"] == "conductor" and rc["pool_master"] == "127.0.0.1:3"
    assert rc["pool_key_prefix"] == "x@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0"
    assert rc["local_cache"] is True and rc["block_size"] == mooncake.kv_block_size
    from systems.router.pd_app import RouterConfig

    parsed = RouterConfig.from_json(json.loads(json.dumps(rc)))  # what the router process reads
    assert parsed.prefill[0].bootstrap == "http://127.0.0.1:1" and parsed.policy == "conductor"


@pytest.mark.integration
def test_gpu_roles_take_their_own_devices_and_tp(deployment, cfg_for, tmp_path):
    cfg = cfg_for(["system=distserve", "engine.device=gpu", "system.prefill_instances=2", "system.decode_instances=1",
                   "engine.prefill.devices=[4,5]", "engine.decode.tensor_parallel_size=2"])
    dep = deployment(cfg, tmp_path / "run")
    dep._bootstrap = {"p0": "127.0.0.1:1", "p1": "127.0.0.1:2"}
    dep.run_dir = tmp_path
    specs = {s.name: s for s in dep.server_specs(Path("/models/x"))}
    assert specs["p0"].extra_env["CUDA_VISIBLE_DEVICES"] == "4" and specs["p1"].extra_env["CUDA_VISIBLE_DEVICES"] == "5"
    assert specs["d0"].tensor_parallel_size == 2 and specs["d0"].extra_env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert specs["p0"].kv_transfer_config["kv_connector"] == "MooncakeConnector"
    assert specs["p0"].kv_transfer_config["kv_connector_extra_config"]["mooncake_protocol"] == "rdma"


def test_gpu_role_with_too_few_devices_is_refused(deployment, cfg_for, tmp_path):
    cfg = cfg_for(["system=distserve", "engine.device=gpu", "system.prefill_instances=2", "engine.prefill.devices=[4]"])
    dep = deployment(cfg, tmp_path / "run")
    dep._bootstrap = {"p0": "127.0.0.1:1", "p1": "127.0.0.1:2"}
    dep.run_dir = tmp_path
    with pytest.raises(DeploymentError, match=r"engine.prefill.devices: 2 instance\(s\) of TP 1 need 2 devices"):
        dep.server_specs(Path("/models/x"))
