"""vLLM command lines and environments for CPU and GPU specs (no vLLM needed)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from systems.launch.ports import PortInUseError
from systems.launch.vllm_server import (
    API_SERVER_MODULE,
    VllmServer,
    VllmServerSpec,
    launch_vllm_servers,
    rpc_base_path,
    server_command,
    server_env,
    vllm_cache_root,
)


def arg(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def cpu_spec(**kw) -> VllmServerSpec:
    base = dict(name="colo0", model_path="/models/tiny", served_model_name="tiny", port=18001,
                max_model_len=4096, max_num_seqs=16, cpu_omp_threads_bind="0")
    base.update(kw)
    return VllmServerSpec(**base)


def test_cpu_command():
    cmd = server_command(cpu_spec())
    assert cmd[:3] == [sys.executable, "-m", API_SERVER_MODULE]
    assert arg(cmd, "--model") == "/models/tiny" and arg(cmd, "--served-model-name") == "tiny"
    assert arg(cmd, "--host") == "127.0.0.1" and arg(cmd, "--port") == "18001"
    assert arg(cmd, "--max-model-len") == "4096" and arg(cmd, "--max-num-seqs") == "16"
    assert arg(cmd, "--tensor-parallel-size") == "1"
    for flag in ("--enable-prefix-caching", "--enforce-eager", "--enable-prompt-tokens-details"):
        assert flag in cmd
    assert "--gpu-memory-utilization" not in cmd and "--kv-transfer-config" not in cmd


def test_gpu_command_and_options():
    kv = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    spec = cpu_spec(device="gpu", tensor_parallel_size=2, gpu_memory_utilization=0.8, enforce_eager=False,
                    enable_prefix_caching=False, kv_transfer_config=kv, extra_args=("--block-size", "16"),
                    max_model_len=None, max_num_seqs=None)
    cmd = server_command(spec)
    assert arg(cmd, "--gpu-memory-utilization") == "0.8"
    assert arg(cmd, "--tensor-parallel-size") == "2"
    assert "--no-enable-prefix-caching" in cmd and "--enable-prefix-caching" not in cmd
    assert "--enforce-eager" not in cmd and "--max-model-len" not in cmd
    assert json.loads(arg(cmd, "--kv-transfer-config")) == kv
    assert cmd[-2:] == ["--block-size", "16"]


def test_vllm_cache_root_is_shared_and_can_be_moved(monkeypatch, tmp_path):
    monkeypatch.delenv("DISAGG_VLLM_CACHE", raising=False)
    assert vllm_cache_root() == Path.home() / ".cache" / "disagg-bench" / "vllm"
    monkeypatch.setenv("DISAGG_VLLM_CACHE", str(tmp_path))
    assert vllm_cache_root() == tmp_path
    assert server_env(cpu_spec(), tmp_path / "run", base_env={})["VLLM_CACHE_ROOT"] == str(tmp_path)


def test_cpu_env_keeps_everything_else_in_the_run_folder(tmp_path):
    env = server_env(cpu_spec(cpu_kvcache_space_gib=2, extra_env={"FOO": "bar"}), tmp_path,
                     base_env={"PATH": "/usr/bin", "HOME": "/root", "VLLM_TARGET_DEVICE": "cuda"})
    root = (tmp_path / "colo0").resolve()
    assert env["PATH"] == "/usr/bin" and env["FOO"] == "bar"
    assert env["VLLM_TARGET_DEVICE"] == "cpu"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert "VLLM_SERVER_DEV_MODE" not in env  # development endpoints only when asked for
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    for key in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "VLLM_CONFIG_ROOT", "TMPDIR", "HF_HOME",
                "VLLM_ASSETS_CACHE", "TORCHINDUCTOR_CACHE_DIR"):
        assert Path(env[key]).is_relative_to(root), key
    assert env["VLLM_CACHE_ROOT"] == str(vllm_cache_root())  # vLLM's own cache is shared across runs
    rpc = Path(env["VLLM_RPC_BASE_PATH"])
    assert len(str(rpc)) + 37 < 107  # room for vLLM's "/<uuid4>" socket names


def test_dev_mode_only_when_asked_for(tmp_path):
    inherited = {"PATH": "/usr/bin", "VLLM_SERVER_DEV_MODE": "1"}
    assert server_env(cpu_spec(dev_mode=True), tmp_path, base_env={})["VLLM_SERVER_DEV_MODE"] == "1"
    assert "VLLM_SERVER_DEV_MODE" not in server_env(cpu_spec(), tmp_path, base_env={})
    assert "VLLM_SERVER_DEV_MODE" not in server_env(cpu_spec(), tmp_path, base_env=inherited)


def test_reset_prefix_cache_refuses_without_dev_mode():
    server = VllmServer(cpu_spec())
    with pytest.raises(RuntimeError, match="dev_mode=True"):
        server.reset_prefix_cache()


def test_gpu_env_has_no_cpu_settings(tmp_path):
    spec = cpu_spec(device="gpu", extra_env={"CUDA_VISIBLE_DEVICES": "1"})
    env = server_env(spec, tmp_path, base_env={"VLLM_TARGET_DEVICE": "cpu"})
    assert "VLLM_TARGET_DEVICE" not in env and "VLLM_CPU_KVCACHE_SPACE" not in env
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "1"


def test_rpc_path_moves_out_of_a_deep_run_folder(tmp_path):
    spec = cpu_spec()
    deep = tmp_path / ("d" * 80)
    assert rpc_base_path(spec, Path("/tmp/r")) == Path("/tmp/r/colo0/rpc").resolve()
    outside = rpc_base_path(spec, deep)
    assert not outside.is_relative_to(deep) and outside.name.startswith("disagg-rpc-")
    assert outside == rpc_base_path(spec, deep)  # stable
    assert outside != rpc_base_path(cpu_spec(name="colo1"), deep)  # per server


@pytest.mark.parametrize("bad", [dict(device="tpu"), dict(port=0), dict(tensor_parallel_size=0),
                                 dict(gpu_memory_utilization=1.5), dict(cpu_kvcache_space_gib=0)])
def test_spec_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        cpu_spec(**bad)


@pytest.mark.integration
def test_taken_port_fails_before_anything_starts(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = VllmServer(cpu_spec(port=port))
        with pytest.raises(PortInUseError, match=str(port)):
            server.start(tmp_path)
        assert not server.alive()
        with pytest.raises(PortInUseError), launch_vllm_servers([cpu_spec(port=port)], tmp_path):
            pass
    assert not (tmp_path / "colo0" / "server.log").exists()


def test_launch_rejects_duplicate_names_and_ports(tmp_path):
    with pytest.raises(ValueError, match="names"), launch_vllm_servers([cpu_spec(), cpu_spec(port=18002)], tmp_path):
        pass
    with pytest.raises(ValueError, match="ports"), launch_vllm_servers([cpu_spec(), cpu_spec(name="b")], tmp_path):
        pass
