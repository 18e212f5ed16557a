"""#15: the hosting layer below the real deployments: per-role rules, the planner that refuses a deployment
that does not fit before anything starts, the actor class that owns a server on its node (run here without
Ray, on a real child process), local hosting, and the Ray hosting's errors when no cluster answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from systems.contract import DeploymentError
from systems.engine_config import VllmEngineConfig
from systems.launch.hosting import HostingError, LocalHosting, make_hosting
from systems.launch.hosting.planner import NodeView, ServerRequest, plan
from systems.launch.hosting.ray_hosting import RayHosting, node_views
from systems.launch.hosting.rules import HostingRule, check_rules, server_demand
from systems.launch.hosting.server_host import ServerHost, remove_orphaned_folders
from systems.launch.ports import LOOPBACK
from vocab.errors import ConfigError


def _node(node_id: str, name: str, resources: dict[str, float], labels: dict[str, str] | None = None,
          alive: bool = True) -> NodeView:
    return NodeView(node_id=node_id, address="127.0.0.1", resources=resources,
                    labels={"disagg_node": name, **(labels or {})}, alive=alive)


# -- rules --------------------------------------------------------------------------------------------------
def test_rules_default_to_empty_and_name_unknown_roles() -> None:
    rules = check_rules({"prefill": {"resources": {"prefill": 1}, "labels": {"hw": "h100"}, "spread": True}})
    assert rules["prefill"] == HostingRule(resources={"prefill": 1.0}, labels={"hw": "h100"}, spread=True)
    assert rules["decode"] == HostingRule() and set(rules) >= {"router", "kv_bootstrap", "mooncake_master"}
    with pytest.raises(ConfigError, match="unknown role.*prefil"):
        check_rules({"prefil": {}})
    with pytest.raises(ConfigError, match=r"engine.hosting_rules.decode.resources.GPU: expected a number >= 0"):
        check_rules({"decode": {"resources": {"GPU": -1}}})
    with pytest.raises(ConfigError, match=r"engine.hosting_rules.router.spread: expected true or false"):
        check_rules({"router": {"spread": "yes"}})


def test_a_gpu_instance_takes_its_tp_degree_unless_the_rule_says_otherwise() -> None:
    assert server_demand(HostingRule(resources={"prefill": 1}), gpus=8) == {"prefill": 1.0, "GPU": 8.0}
    assert server_demand(HostingRule(resources={"GPU": 4}), gpus=8) == {"GPU": 4.0}
    assert server_demand(HostingRule(), gpus=0) == {}


def test_engine_config_checks_hosting_keys() -> None:
    def build(**overrides: object) -> VllmEngineConfig:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(VllmEngineConfig),
                                                   {"name": "vllm", **overrides}))

    cfg = build(hosting="ray", hosting_rules={"decode": {"resources": {"host_b": 1}}})
    assert cfg.hosting == "ray" and cfg.hosting_rules.decode.resources == {"host_b": 1.0}
    with pytest.raises(ConfigError, match="engine.hosting: expected one of local, ray"):
        build(hosting="slurm")
    with pytest.raises(ConfigError, match="engine.ray_bind"):
        build(ray_bind="everywhere")
    with pytest.raises(ConfigError, match=r"engine.prefill.devices: GPU ids are chosen by Ray"):
        build(hosting="ray", prefill={"devices": [0, 1]})


# -- planner ------------------------------------------------------------------------------------------------
def test_plan_puts_each_role_where_its_resources_are() -> None:
    nodes = [_node("a" * 20, "a", {"CPU": 1}), _node("b" * 20, "b", {"CPU": 1, "prefill": 1}),
             _node("c" * 20, "c", {"CPU": 1, "decode": 2}, {"hw": "a100"})]
    chosen = plan([ServerRequest("p0", "prefill", {"prefill": 1}),
                   ServerRequest("d0", "decode", {"decode": 1}, {"hw": "a100"}),
                   ServerRequest("d1", "decode", {"decode": 1}),
                   ServerRequest("router", "router")], nodes)
    assert {k: v.labels["disagg_node"] for k, v in chosen.items()} == {"p0": "b", "d0": "c", "d1": "c", "router": "a"}


def test_plan_spreads_a_role_and_balances_the_rest() -> None:
    nodes = [_node("a" * 20, "a", {"CPU": 4}), _node("b" * 20, "b", {"CPU": 4})]
    chosen = plan([ServerRequest(f"p{i}", "prefill", spread=True) for i in range(2)], nodes)
    assert chosen["p0"].node_id != chosen["p1"].node_id
    with pytest.raises(HostingError, match="p2 \\(prefill\\) needs \\{\\}, at most one prefill per node.*already "
                                             "holds a prefill"):
        plan([ServerRequest(f"p{i}", "prefill", spread=True) for i in range(3)], nodes)
    balanced = plan([ServerRequest(f"h{i}", "router") for i in range(4)], nodes)
    assert sorted(n.labels["disagg_node"] for n in balanced.values()) == ["a", "a", "b", "b"]


def test_an_unplaceable_deployment_names_every_missing_resource() -> None:
    nodes = [_node("a" * 20, "a", {"CPU": 1, "GPU": 8}, {"hw": "a100"}),
             _node("b" * 20, "b", {"CPU": 1}, {"hw": "h100"}), _node("d" * 20, "dead", {"GPU": 8}, alive=False)]
    with pytest.raises(HostingError) as info:
        plan([ServerRequest("p0", "prefill", {"GPU": 8}, {"hw": "h100"}),
              ServerRequest("d0", "decode", {"GPU": 8}), ServerRequest("d1", "decode", {"GPU": 8})], nodes)
    text = str(info.value)
    assert "nothing was started" in text
    assert "p0 (prefill) needs {GPU: 8} on a node labelled hw=h100" in text
    assert "a (aaaaaaaa) lacks label hw=h100 (it has hw=a100)" in text and "b (bbbbbbbb) lacks GPU 8 (it has 0 left of 0)" in text
    assert "d1 (decode) needs {GPU: 8}" in text and "GPU 8 (it has 0 left of 8)" in text  # d0 took node a's GPUs
    assert "dead" not in text.split("nodes:")[1]


def test_node_views_read_ray_nodes_entries() -> None:
    views = node_views([{"NodeID": "x1", "NodeManagerAddress": "10.0.0.2", "Alive": True,
                         "Resources": {"CPU": 2.0, "GPU": 8.0}, "Labels": {"hw": "h100"}}])
    assert views == [NodeView("x1", "10.0.0.2", {"CPU": 2.0, "GPU": 8.0}, {"hw": "h100"}, True)]


# -- the actor's class, run here on a real child process ------------------------------------------------------
@pytest.mark.integration
def test_server_host_runs_and_stops_a_real_process(tmp_path: Path) -> None:
    host = ServerHost("echo", str(tmp_path / "node" / "echo"), grace_s=2.0)
    log = tmp_path / "node" / "echo" / "echo.log"
    try:
        assert host.node()["node_id"] == "" and host.node()["gpu_ids"] == []  # outside Ray, and Ray left alone
        ray = pytest.importorskip("ray")
        assert not ray.is_initialized()
        port = host.free_port()
        assert 0 < port < 65536 and host.free_port() != port
        host.write_file(str(tmp_path / "node" / "echo" / "cfg.json"), b'{"a": 1}')
        pid = host.start([sys.executable, "-c", "import time; print('hello', flush=True); time.sleep(60)"],
                         {"DISAGG_TEST": "1"}, str(log), str(tmp_path / "node" / "echo" / "work"))
        assert pid > 0
        deadline = time.monotonic() + 60
        while b"hello" not in host.read(str(log), 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert b"hello" in host.read(str(log), 0) and host.status() == (True, None)
        assert host.size(str(log)) > 0 and host.read(str(tmp_path / "node" / "echo" / "missing"), 0) == b""
        with pytest.raises(ValueError, match="outside this server's folder"):
            host.read(str(tmp_path / "elsewhere.log"), 0)
        with pytest.raises(ValueError, match="outside this server's folder"):
            host.write_file("/etc/passwd-copy", b"x")
        assert host.group_pids()
        host.stop(grace_s=2.0)
        assert host.status()[0] is False and not host.group_pids()
    finally:
        host.cleanup()
    assert not (tmp_path / "node" / "echo").exists()


@pytest.mark.integration
def test_local_hosting_keeps_everything_on_loopback(tmp_path: Path) -> None:
    hosting = LocalHosting()
    hosting.place([("p0", "prefill", 0), ("router", "router", 0)])
    ports = {hosting.port("p0") for _ in range(20)}
    assert len(ports) == 20 and hosting.host("p0") == LOOPBACK
    assert hosting.node_dir("p0", tmp_path) == tmp_path
    hosting.put_file("router", tmp_path / "sub" / "router.json", b"{}")
    assert (tmp_path / "sub" / "router.json").read_bytes() == b"{}"
    assert hosting.describe()["servers"]["p0"] == {"role": "prefill", "host": LOOPBACK}
    with pytest.raises(ValueError, match="keeps files where they are"):
        hosting.mirror("router", tmp_path / "a", tmp_path / "b")


# -- Ray hosting errors, no cluster needed -----------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@pytest.mark.integration
def test_ray_hosting_without_an_address_or_a_head_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(DeploymentError, match="set engine.ray_address"):
        RayHosting(None, {})
    port = _closed_port()
    hosting = RayHosting(f"127.0.0.1:{port}", {})
    with pytest.raises(DeploymentError, match=f"the Ray head at 127.0.0.1:{port} does not answer"):
        hosting.place([("p0", "prefill", 0)])


def test_make_hosting_is_local_by_default() -> None:
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(VllmEngineConfig), {"name": "vllm"}))
    assert isinstance(make_hosting(cfg), LocalHosting)


@pytest.mark.integration
def test_folders_of_actors_that_died_without_cleaning_up_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "dep1" / "d0").mkdir(parents=True)
    (tmp_path / "dep1" / "d0" / ".owner").write_text(f"{dead.pid} 1")
    host = ServerHost("p0", str(tmp_path / "dep2" / "p0"))  # a live owner: this process
    try:
        assert not (tmp_path / "dep1").exists()  # removed when the new actor started, its empty parent too
        assert remove_orphaned_folders(tmp_path) == [] and (tmp_path / "dep2" / "p0").is_dir()
    finally:
        host.cleanup()
    assert not (tmp_path / "dep2").exists()


@pytest.mark.integration
def test_a_loopback_head_with_ray_imported_for_a_network_cluster_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    ray_constants = pytest.importorskip("ray._private.ray_constants")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)  # what importing Ray without the variable gives
    with socket.socket() as listener:  # a head that answers at the TCP level
        listener.bind((LOOPBACK, 0))
        listener.listen()
        hosting = RayHosting(f"127.0.0.1:{listener.getsockname()[1]}", {})
        with pytest.raises(DeploymentError, match="RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0"):
            hosting.connect()
