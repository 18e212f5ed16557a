"""``python -m systems.router colocated`` as a process: serves on loopback, routes, exits 0 on SIGTERM; rejects
bad options (and the entry point rejects an unknown router kind)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from systems.router.fake_backend import FakeBackend

pytestmark = pytest.mark.integration  # starts the router as a process on loopback

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _wait_healthy(url: str, proc: asyncio.subprocess.Process, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with aiohttp.ClientSession(trust_env=False) as client:
        while True:
            assert proc.returncode is None, "router exited during start-up"
            try:
                async with client.get(url + "/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            assert asyncio.get_running_loop().time() < deadline, "router not healthy in time"
            await asyncio.sleep(0.1)


def test_router_process_routes_and_stops_cleanly_on_sigterm() -> None:
    async def scenario() -> None:
        backend = FakeBackend("b0")
        proc = None
        try:
            await backend.start()
            port = free_port()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "systems.router", "colocated", "--port", str(port), "--backend", f"b0={backend.url}",
                "--policy", "cache_aware", "--block-size", "16", "--capacity-blocks", "1000", "--max-imbalance", "4",
                cwd=ROOT, env=ENV, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            url = f"http://127.0.0.1:{port}"
            await _wait_healthy(url, proc)
            async with aiohttp.ClientSession(trust_env=False) as client:
                payload = {"prompt": list(range(40)), "stream": True, "max_tokens": 2}
                async with client.post(url + "/v1/completions", json=payload) as resp:
                    assert resp.status == 200 and resp.headers["x-instance"] == "b0"
                    assert (await resp.read()).endswith(b"data: [DONE]\n\n")
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 15) == 0
            assert proc.stderr is not None
            log = (await proc.stderr.read()).decode()
            assert (
                f"router on http://127.0.0.1:{port}" in log
                and "cache_aware" in log
                and "router stopping" in log
            )
        finally:
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
            await backend.stop()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_router_rejects_options_the_policy_does_not_take() -> None:
    cases = [
        (["--policy", "random", "--capacity-blocks", "5"], "does not take capacity_blocks_per_instance"),
        (["--policy", "nope"], "invalid choice: 'nope'"),
        (["--backend", "http://127.0.0.1:1"], "NAME=URL"),
    ]
    for extra, message in cases:
        argv = ["--port", "1", "--backend", "a=http://127.0.0.1:1", *extra]
        out = subprocess.run(
            [sys.executable, "-m", "systems.router", "colocated", *argv],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2 and message in out.stderr, out.stderr


def test_the_entry_point_needs_a_router_kind() -> None:
    out = subprocess.run([sys.executable, "-m", "systems.router", "--port", "1"], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "{colocated,disaggregated}" in out.stderr, out.stderr
