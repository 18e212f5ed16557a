"""The ``--kv-transfer-config`` dicts the disaggregated deployments hand to vLLM."""

from __future__ import annotations

import json

import pytest

from systems.launch.kv_transfer_config import SUITE_CONNECTORS, multi_connector, pd_connector, store_connector


def test_cpu_prefill_uses_the_suite_connector_over_tcp_with_the_bootstrap_address():
    cfg = pd_connector("kv_producer", "cpu", bootstrap_address="127.0.0.1:5555")
    assert SUITE_CONNECTORS == "systems.launch.kv_connectors"
    assert cfg == {"kv_connector": "SuiteMooncakeConnector", "kv_role": "kv_producer",
                   "kv_connector_module_path": "systems.launch.kv_connectors",
                   "kv_connector_extra_config": {"mooncake_protocol": "tcp",
                                                 "bootstrap_server_address": "127.0.0.1:5555"}}
    json.dumps(cfg)  # vLLM reads it from the command line as JSON


def test_cpu_decode_has_no_bootstrap_address():
    cfg = pd_connector("kv_consumer", "cpu")
    assert cfg["kv_connector"] == "SuiteMooncakeConnector" and cfg["kv_role"] == "kv_consumer"
    assert cfg["kv_connector_extra_config"] == {"mooncake_protocol": "tcp"}


def test_gpu_uses_vllms_mooncake_connector_over_rdma():
    cfg = pd_connector("kv_producer", "gpu", bootstrap_address="127.0.0.1:1")
    assert cfg["kv_connector"] == "MooncakeConnector"
    assert "kv_connector_module_path" not in cfg
    assert cfg["kv_connector_extra_config"] == {"mooncake_protocol": "rdma", "bootstrap_server_address": "127.0.0.1:1"}


def test_explicit_protocol_wins_over_the_device_default():
    assert pd_connector("kv_consumer", "gpu", protocol="tcp")["kv_connector_extra_config"]["mooncake_protocol"] == "tcp"
    assert pd_connector("kv_consumer", "cpu", protocol="rdma")["kv_connector_extra_config"]["mooncake_protocol"] == "rdma"


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_nixl_connector(device):
    cfg = pd_connector("kv_both", device, connector="nixl", bootstrap_address="127.0.0.1:1")
    assert cfg["kv_connector"] == "NixlConnector" and cfg["kv_role"] == "kv_both"
    assert "kv_connector_module_path" not in cfg
    assert "mooncake_protocol" not in cfg["kv_connector_extra_config"]
    if device == "cpu":
        assert cfg["kv_buffer_device"] == "cpu"
    else:
        assert "kv_buffer_device" not in cfg


def test_store_connector_carries_lookup_async_and_the_failure_policy():
    cfg = store_connector()
    assert cfg == {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both",
                   "kv_connector_extra_config": {"lookup_async": True}, "kv_load_failure_policy": "recompute"}
    cfg = store_connector(lookup_async=False, load_failure_policy="fail")
    assert cfg["kv_connector_extra_config"]["lookup_async"] is False and cfg["kv_load_failure_policy"] == "fail"


def test_multi_connector_on_cpu_is_the_suite_one_with_children_in_order():
    store = store_connector()
    pd = pd_connector("kv_producer", "cpu", bootstrap_address="127.0.0.1:2")
    cfg = multi_connector([store, pd], "kv_producer", "fail", "cpu")
    assert cfg["kv_connector"] == "SuiteMultiConnector"
    assert cfg["kv_connector_module_path"] == SUITE_CONNECTORS
    assert cfg["kv_role"] == "kv_producer" and cfg["kv_load_failure_policy"] == "fail"
    children = cfg["kv_connector_extra_config"]["connectors"]
    assert [c["kv_connector"] for c in children] == ["MooncakeStoreConnector", "SuiteMooncakeConnector"]
    assert children[0] is store and children[1] is pd


def test_multi_connector_on_gpu_is_vllms_unless_a_child_is_the_suites():
    children = [store_connector(), pd_connector("kv_producer", "gpu")]
    cfg = multi_connector(children, "kv_producer", device="gpu")
    assert cfg["kv_connector"] == "MultiConnector" and "kv_connector_module_path" not in cfg
    children = [store_connector(), pd_connector("kv_producer", "cpu")]
    cfg = multi_connector(children, "kv_producer", device="gpu")
    assert cfg["kv_connector"] == "SuiteMultiConnector" and cfg["kv_connector_module_path"] == SUITE_CONNECTORS
