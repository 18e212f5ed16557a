"""The environment a started server gets: allow-listed, no inherited secrets, explicit settings kept."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from systems.launch import vllm_server
from systems.launch.child_env import child_environment, is_allowed_name, is_secret_name, split_inherited
from systems.launch.mooncake_store import master_client_env, transfer_stall_env
from systems.launch.processes import ManagedProcess
from systems.launch.sglang_commands import HiCacheSpec, MooncakeStoreSpec, SglangServerSpec
from systems.launch.sglang_commands import server_env as sglang_server_env


def test_secret_names_are_recognised_by_name_part():
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "OPENAI_APIKEY",
                 "DB_PASSWORD", "GOOGLE_APPLICATION_CREDENTIALS", "VLLM_API_KEY", "hf_token"):
        assert is_secret_name(name), name
    for name in ("TOKENIZERS_PARALLELISM", "PATH", "KEYBOARD", "VLLM_HOST_IP", "MC_TRANSFER_TIMEOUT"):
        assert not is_secret_name(name), name


def test_child_environment_keeps_allowed_and_drops_the_rest(caplog):
    base = {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "VLLM_X": "1", "CUDA_VISIBLE_DEVICES": "0",
            "HF_HOME": "/hf", "HF_TOKEN": "hf_secret", "WANDB_API_KEY": "k", "RANDOM_THING": "r",
            "http_proxy": "http://user:pw@proxy:3128", "TOKENIZERS_PARALLELISM": "false"}
    with caplog.at_level("DEBUG", logger="systems.launch.child_env"):
        env = child_environment(base, {"MY_SETTING": "on", "VLLM_API_KEY": "explicit"})
    assert env == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "VLLM_X": "1", "CUDA_VISIBLE_DEVICES": "0",
                   "HF_HOME": "/hf", "TOKENIZERS_PARALLELISM": "false", "MY_SETTING": "on", "VLLM_API_KEY": "explicit"}
    logged = caplog.text
    for name in ("HF_TOKEN", "WANDB_API_KEY", "RANDOM_THING", "http_proxy"):
        assert name in logged
    assert "hf_secret" not in logged and "user:pw" not in logged  # names only, never values


def test_explicit_extra_overrides_base_and_may_carry_a_secret():
    env = child_environment({"HF_TOKEN": "inherited", "PATH": "/a"}, {"HF_TOKEN": "given", "PATH": "/b"})
    assert env == {"HF_TOKEN": "given", "PATH": "/b"}


def test_split_inherited_separates_copied_from_set_or_changed():
    inherited, explicit = split_inherited({"PATH": "/bin", "HOME": "/other", "NEW": "1"},
                                          {"PATH": "/bin", "HOME": "/h"})
    assert inherited == {"PATH": "/bin"} and explicit == {"HOME": "/other", "NEW": "1"}


def test_every_name_the_launch_code_sets_is_allowed(tmp_path):
    """A name a launcher sets must survive even when it equals the harness's own value (then it is
    filtered as inherited)."""
    vllm_cpu = vllm_server.VllmServerSpec(name="p0", model_path="/m", served_model_name="m", port=8000,
                                          dev_mode=True, cpu_omp_threads_bind="0")
    vllm_gpu = vllm_server.VllmServerSpec(name="d0", model_path="/m", served_model_name="m", port=8001, device="gpu")
    store = MooncakeStoreSpec(master_addr="127.0.0.1:50051", protocol="tcp", master_metrics_port=9003)
    sgl = SglangServerSpec(name="s0", model_path="/m", served_model_name="m", port=8002, role="prefill",
                           gpu_ids=("0",), bootstrap_port=8998, transfer_protocol="tcp",
                           hicache=HiCacheSpec(storage_backend="mooncake", mooncake_store=store))
    names = set(vllm_server.server_env(vllm_cpu, tmp_path, base_env={}))
    names |= set(vllm_server.server_env(vllm_gpu, tmp_path, base_env={}))
    names |= set(sglang_server_env(sgl, tmp_path, base_env={}))
    names |= set(transfer_stall_env(10)) | set(master_client_env(5.0, 2.0))
    names |= {"PYTHONPATH", "VLLM_MOONCAKE_BOOTSTRAP_PORT", "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT",
              "DISAGG_KV_TRANSFER_LOG", "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "MOONCAKE_CONFIG_PATH"}
    assert names and not {n for n in names if not is_allowed_name(n)}


@pytest.mark.integration
def test_started_process_gets_the_filtered_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DISAGG_TEST_SECRET_TOKEN", "s3cret")
    monkeypatch.setenv("DISAGG_TEST_PLAIN", "kept")
    monkeypatch.setenv("SOME_UNLISTED_VAR", "dropped")
    out = tmp_path / "env.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    env = {**os.environ, "UNLISTED_BUT_SET_BY_CALLER": "yes"}
    proc = ManagedProcess("env", runtime_dir=tmp_path / "rt").start(
        [sys.executable, "-c", code], env=env, log_path=tmp_path / "env.log", extra_env={"GIVEN_API_KEY": "k"})
    try:
        deadline = time.monotonic() + 60
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.stop(grace_s=1) == 0, proc.tail_log()
    finally:
        proc.stop(grace_s=0.1)
    seen = json.loads(Path(out).read_text())
    assert seen["DISAGG_TEST_PLAIN"] == "kept" and seen["UNLISTED_BUT_SET_BY_CALLER"] == "yes"
    assert seen["GIVEN_API_KEY"] == "k" and seen["PATH"] == os.environ["PATH"]
    assert "DISAGG_TEST_SECRET_TOKEN" not in seen and "SOME_UNLISTED_VAR" not in seen
