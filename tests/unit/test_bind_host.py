"""#15: every suite server binds the address of the node it runs on (``host``; 127.0.0.1 by default) and every
command line and client config names it: routers, the KV-cache-events socket, the bootstrap registry, pool
nodes, the Mooncake master and the store client config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from systems.launch import kv_bootstrap, pool_node
from systems.launch.mooncake_store import (
    LOCAL_HOSTNAME_KEY,
    REQUESTER_HOSTNAME_ENV,
    MooncakeMasterSpec,
    mooncake_master_command,
    mooncake_store_json,
    pool_node_command,
    store_client_env,
)
from systems.launch.ports import LOOPBACK, check_host, free_port
from systems.router import cli as colocated_cli
from systems.router import pd_cli
from systems.router.commands import colocated_router_command, disaggregated_router_command
from systems.router.kv_events import KVEventIndex, kv_events_config, zmq_endpoint
from systems.router.pool_index import PoolIndex

NODE = "10.1.2.3"
BAD_HOSTS = ["", "127.0.0.1:8000", "http://10.1.2.3", "a host", "-node", "node_1", "10.1.2.300", "x" * 64,
             "node..cluster", "::1::2", "node\n", None]
REPO = Path(__file__).resolve().parents[2]


def option(cmd: Sequence[str], name: str) -> str:
    assert cmd.count(name) == 1, f"{name} once in {cmd}"
    return cmd[cmd.index(name) + 1]


# -- check_host -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", NODE, "::1", "fe80::1", "node-1", "node-1.cluster.local",
                                  "Node7.example.org."])
def test_addresses_and_host_names_are_accepted(host):
    assert check_host(host, "--host") == host


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_anything_else_is_refused_naming_the_option_and_value(host):
    with pytest.raises(ValueError) as exc:
        check_host(host, "--host")
    assert str(exc.value).startswith("--host: ") and repr(host) in str(exc.value)


# -- command lines and configs --------------------------------------------------------------------------

def test_colocated_router_command_carries_the_host(tmp_path):
    backends = {"vllm0": "http://10.1.2.4:8000"}
    default = colocated_router_command(9000, "round_robin", 128, 7, backends)
    assert default[:6] == [sys.executable, "-m", "systems.router", "colocated", "--host", LOOPBACK]
    assert default[6:] == ["--port", "9000", "--policy", "round_robin", "--block-size", "128", "--backend",
                           "vllm0=http://10.1.2.4:8000"]
    node = colocated_router_command(9000, "round_robin", 128, 7, backends, host=NODE)
    assert option(node, "--host") == NODE and node[6:] == default[6:]
    with pytest.raises(ValueError, match="colocated router host: .*'a host'"):
        colocated_router_command(9000, "round_robin", 128, 7, backends, host="a host")


def test_disaggregated_router_command_carries_the_host(tmp_path):
    default = disaggregated_router_command(tmp_path / "r.json", 9001, tmp_path / "s.json")
    assert default == [sys.executable, "-m", "systems.router", "disaggregated", "--config", str(tmp_path / "r.json"),
                       "--host", LOOPBACK, "--port", "9001", "--stats-out", str(tmp_path / "s.json")]
    node = disaggregated_router_command(tmp_path / "r.json", 9001, host=NODE)
    assert option(node, "--host") == NODE and "--stats-out" not in node
    with pytest.raises(ValueError, match="disaggregated router host"):
        disaggregated_router_command(tmp_path / "r.json", 9001, host="10.1.2.3:9001")


def test_kv_events_config_points_the_publisher_at_the_router_host():
    assert kv_events_config(5557, "p1")["endpoint"] == "tcp://127.0.0.1:5557"
    assert kv_events_config(5557, "p1", host=NODE) == {"enable_kv_cache_events": True, "publisher": "zmq",
                                                       "endpoint": "tcp://10.1.2.3:5557", "topic": "p1"}
    assert zmq_endpoint("::1", 5557) == "tcp://[::1]:5557"
    with pytest.raises(ValueError, match="KV-cache events host"):
        kv_events_config(5557, "p1", host="node_1")


def test_pool_node_command_carries_the_host():
    cmd = pool_node_command("10.1.2.9:50051", "32MB", 4567, host=NODE)
    assert cmd == [sys.executable, "-m", "systems.launch.pool_node", "--master", "10.1.2.9:50051", "--segment-size",
                   "32MB", "--host", NODE, "--port", "4567"]
    assert option(pool_node_command("127.0.0.1:50051", "32MB", 4567), "--host") == LOOPBACK
    with pytest.raises(ValueError, match="pool node host"):
        pool_node_command("127.0.0.1:50051", "32MB", 4567, host="")


def test_master_binds_its_host_and_clients_are_told_it():
    default = MooncakeMasterSpec(rpc_port=50051, metrics_port=50052)
    assert mooncake_master_command(default) == [
        "mooncake_master", "--rpc_address=127.0.0.1", "--rpc_port=50051", "--metrics_host=127.0.0.1",
        "--metrics_port=50052", "--enable_http_metadata_server=false"]
    assert default.addr == "127.0.0.1:50051" and default.metrics_url == "http://127.0.0.1:50052/metrics"
    node = MooncakeMasterSpec(rpc_port=50051, metrics_port=50052, host=NODE)
    cmd = mooncake_master_command(node)
    assert "--rpc_address=10.1.2.3" in cmd and "--metrics_host=10.1.2.3" in cmd
    assert not any("127.0.0.1" in arg for arg in cmd)
    assert node.addr == "10.1.2.3:50051" and node.metrics_url == "http://10.1.2.3:50052/metrics"
    assert MooncakeMasterSpec(rpc_port=50051, host="::1").addr == "[::1]:50051"
    with pytest.raises(ValueError, match="mooncake_master host: .*'node_1'"):
        MooncakeMasterSpec(rpc_port=50051, host="node_1")


def test_store_json_names_the_local_hostname_only_when_given():
    default = mooncake_store_json("10.1.2.9:50051", "0", "64MB")
    assert LOCAL_HOSTNAME_KEY not in default
    node = mooncake_store_json("10.1.2.9:50051", "0", "64MB", local_hostname=NODE)
    assert node == {**default, "local_hostname": NODE}
    json.dumps(node)
    assert store_client_env(NODE) == {REQUESTER_HOSTNAME_ENV: NODE}
    with pytest.raises(ValueError, match="mooncake store local_hostname"):
        mooncake_store_json("10.1.2.9:50051", "0", "64MB", local_hostname="a b")


@pytest.mark.integration
def test_the_env_name_is_the_one_vllms_store_connector_reads():
    """vLLM takes the store client's local hostname from this variable (else VLLM_HOST_IP), not from the JSON."""
    rdma_utils = pytest.importorskip("vllm.distributed.kv_transfer.kv_connector.v1.mooncake.rdma_utils")
    envs = pytest.importorskip("vllm.envs")
    old = os.environ.get(REQUESTER_HOSTNAME_ENV)
    os.environ[REQUESTER_HOSTNAME_ENV] = NODE
    try:
        assert envs.MOONCAKE_REQUESTER_LOCAL_HOSTNAME == NODE
        assert rdma_utils.get_requester_local_hostname("192.0.2.1") == NODE
    finally:
        if old is None:
            del os.environ[REQUESTER_HOSTNAME_ENV]
        else:
            os.environ[REQUESTER_HOSTNAME_ENV] = old


class SetupRecorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def setup(self, *args: Any) -> int:
        self.calls.append(args)
        return 0


def test_pool_index_refuses_a_bad_local_hostname():
    with pytest.raises(ValueError, match="pool index local_hostname"):
        PoolIndex("127.0.0.1:1", "m@tp_rank:0", 4, store=SetupRecorder(), hasher=object(), local_hostname="a b")


def test_pool_node_mounts_with_its_host_as_local_hostname(monkeypatch):
    """The pool node hands its --host to the transfer engine (store.setup's first argument)."""
    store_module = pytest.importorskip("mooncake.store")
    recorder = SetupRecorder()
    monkeypatch.setattr(store_module, "MooncakeDistributedStore", lambda: recorder)
    assert pool_node.mount_segment("10.1.2.9:50051", 16 << 20, local_hostname=NODE) is recorder
    assert recorder.calls[0][0] == NODE and recorder.calls[0][-1] == "10.1.2.9:50051"
    pool_node.mount_segment("10.1.2.9:50051", 16 << 20)
    assert recorder.calls[1][0] == LOOPBACK


# -- command-line checks --------------------------------------------------------------------------------

@pytest.mark.parametrize(("main", "argv"), [
    (kv_bootstrap.main, ["--port", "5000"]),
    (pool_node.main, ["--master", "127.0.0.1:50051", "--port", "5000"]),
    (colocated_cli.main, ["--port", "5000", "--backend", "a=http://127.0.0.1:1"]),
    (pd_cli.main, ["--config", "/nonexistent.json", "--port", "5000"]),
])
def test_clis_refuse_a_bad_host_with_status_2(main, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--host", "node_1", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--host" in err and "'node_1'" in err


# -- real servers on 127.0.0.1 --------------------------------------------------------------------------

def serve(cmd: Sequence[str], url: str, log: Path) -> Any:
    """Start ``cmd`` in its own process group and wait (a hang guard, not a speed bound) until ``url`` answers."""
    with log.open("wb") as out:
        proc = subprocess.Popen(list(cmd), cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"{cmd} exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return proc, resp.status, json.loads(resp.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                stop(proc)
                raise AssertionError(f"{url} never answered: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.integration
def test_bootstrap_registry_listens_on_its_host(tmp_path):
    ports = [free_port(), free_port()]
    cmd = [sys.executable, "-m", "systems.launch.kv_bootstrap", "--host", LOOPBACK,
           *[a for p in ports for a in ("--port", str(p))]]
    proc = None
    try:
        proc, status, body = serve(cmd, f"http://{LOOPBACK}:{ports[1]}/query", tmp_path / "bootstrap.log")
        assert status == 200 and body == {}
        stop(proc)
        assert proc.returncode == 0
    finally:
        if proc is not None:
            stop(proc)


@pytest.mark.integration
def test_colocated_router_listens_on_its_host(tmp_path):
    port = free_port()
    cmd = colocated_router_command(port, "round_robin", 128, 0, {"vllm0": "http://127.0.0.1:1"}, host=LOOPBACK)
    proc = None
    try:
        proc, status, body = serve(cmd, f"http://{LOOPBACK}:{port}/health", tmp_path / "router.log")
        assert status == 200 and body["backends"] == 1
        assert f"router on http://{LOOPBACK}:{port}" in (tmp_path / "router.log").read_text()
    finally:
        if proc is not None:
            stop(proc)


@pytest.mark.integration
def test_disaggregated_router_listens_on_its_host(tmp_path):
    port = free_port()
    config = tmp_path / "router.json"
    config.write_text(json.dumps({"prefill": [{"name": "p0", "url": "http://127.0.0.1:1"}],
                                  "decode": [{"name": "d0", "url": "http://127.0.0.1:2"}],
                                  "health_interval_s": 60.0}))
    proc = None
    try:
        proc, status, _ = serve(disaggregated_router_command(config, port, host=LOOPBACK),
                                f"http://{LOOPBACK}:{port}/health", tmp_path / "pd.log")
        assert status == 200
        assert f"disaggregating router on http://{LOOPBACK}:{port}" in (tmp_path / "pd.log").read_text()
    finally:
        if proc is not None:
            stop(proc)


@pytest.mark.integration
def test_kv_event_socket_binds_the_given_host():
    zmq = pytest.importorskip("zmq")
    port = free_port()
    index = KVEventIndex(["p0"])
    index.start(port, decode=lambda payload: payload, host=LOOPBACK)
    pub = zmq.Context.instance().socket(zmq.PUB)
    try:
        pub.connect(kv_events_config(port, "p0", host=LOOPBACK)["endpoint"])
        deadline = time.monotonic() + 60  # a hang guard, not a speed requirement
        while index.unknown_topic == 0:  # PUB drops messages until the subscription has arrived
            assert time.monotonic() < deadline, "nothing reached the receiver"
            pub.send_multipart([b"warm-up", (0).to_bytes(8, "big"), b""])
            time.sleep(0.05)
        assert index.receiver_stats()["alive"] is True
    finally:
        pub.close(linger=0)
        index.stop()
