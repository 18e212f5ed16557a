"""Mooncake process helpers (systems/launch/mooncake.py), shared by engine=vllm and engine=sglang: the
master's command line, the pool node's, the Store client config, sizes."""

from __future__ import annotations

import json
import sys

import pytest

from systems.launch.mooncake_store import (
    MIN_SEGMENT_BYTES,
    MooncakeMasterSpec,
    mooncake_master_command,
    mooncake_store_json,
    parse_size,
    pool_node_command,
)


@pytest.mark.parametrize("segment", ["0", "0B", "0MB", " 0 "])
def test_zero_segment_makes_a_standalone_store_client(segment):
    cfg = mooncake_store_json("127.0.0.1:50051", segment, "64MB")
    assert cfg["mode"] == "standalone-store" and cfg["global_segment_size"] == 0
    assert cfg["master_server_address"] == "127.0.0.1:50051" and cfg["metadata_server"] == "P2PHANDSHAKE"
    assert cfg["local_buffer_size"] == "64MB" and cfg["protocol"] == "tcp"


def test_nonzero_segment_is_embedded():
    cfg = mooncake_store_json("127.0.0.1:50051", "256MB", "64MB", protocol="rdma")
    assert cfg["mode"] == "embedded" and cfg["global_segment_size"] == "256MB" and cfg["protocol"] == "rdma"
    json.dumps(cfg)


def test_master_command_binds_loopback_and_disables_the_http_metadata_server():
    cmd = mooncake_master_command(MooncakeMasterSpec(rpc_port=50051, metrics_port=9003, binary="/venv/bin/mooncake_master",
                                                     eviction_high_watermark=0.8, extra_args=("--eviction_ratio=0",)))
    assert cmd[0] == "/venv/bin/mooncake_master"
    assert "--rpc_address=127.0.0.1" in cmd and "--rpc_port=50051" in cmd
    assert "--metrics_host=127.0.0.1" in cmd and "--metrics_port=9003" in cmd
    assert "--enable_http_metadata_server=false" in cmd
    assert "--eviction_high_watermark_ratio=0.8" in cmd
    assert not any("0.0.0.0" in arg for arg in cmd)
    assert cmd[-1] == "--eviction_ratio=0"  # extra flags last, so they win


def test_the_sglang_plan_master_gets_the_same_loopback_flags_as_the_vllm_one():
    cmd = mooncake_master_command(MooncakeMasterSpec(rpc_port=50051, metrics_port=50052))
    assert cmd == ["mooncake_master", "--rpc_address=127.0.0.1", "--rpc_port=50051", "--metrics_host=127.0.0.1",
                   "--metrics_port=50052", "--enable_http_metadata_server=false"]


def test_master_spec_checks_its_ports():
    with pytest.raises(ValueError, match="metrics_port and rpc_port must differ"):
        MooncakeMasterSpec(rpc_port=50051, metrics_port=50051)
    with pytest.raises(ValueError, match="rpc_port must be a port"):
        MooncakeMasterSpec(rpc_port=70000)


@pytest.mark.parametrize(("text", "size"), [("256MB", 256 << 20), ("1GiB", 1 << 30), ("4096", 4096), ("16 mb", 16 << 20),
                                            ("1.5G", int(1.5 * (1 << 30)))])
def test_parse_size(text, size):
    assert parse_size(text) == size


def test_parse_size_rejects_what_it_cannot_read():
    with pytest.raises(ValueError, match="size must look like 256MB"):
        parse_size("lots")
    assert parse_size("16MB") == MIN_SEGMENT_BYTES


def test_pool_node_command():
    cmd = pool_node_command("127.0.0.1:50051", "32MB", 4567)
    assert cmd == [sys.executable, "-m", "systems.launch.pool_node", "--master", "127.0.0.1:50051", "--segment-size",
                   "32MB", "--host", "127.0.0.1", "--port", "4567"]
