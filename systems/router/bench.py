"""Router overhead benchmark (run by hand): ``python -m systems.router.bench``.

Starts a fake streaming backend (:mod:`systems.router.fake_backend`) and a router in their own processes
on loopback, optionally pinned to CPUs, then from this process measures, directly against the backend
and through the router:

* time to first chunk at concurrency 1 (median and p99): the difference is the latency the router adds;
* requests per second at ``--concurrency`` streams;
* the router process's CPU time per request (its one-core capacity is the inverse).

Both child processes are stopped in ``finally``. Numbers depend on the host; on a shared machine run it
when nothing else is busy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import aiohttp
import numpy as np

__all__ = ["main"]

logger = logging.getLogger(__name__)
_ROOT = Path(__file__).resolve().parents[2]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(args: Sequence[str], cpus: Optional[set[int]]) -> subprocess.Popen[bytes]:
    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)

    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    return subprocess.Popen(
        [sys.executable, *args], cwd=_ROOT, env=env, preexec_fn=pin, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def _wait_up(session: aiohttp.ClientSession, url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            async with session.get(url) as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{url} not up after {timeout_s} s")


async def _one(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    t0 = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        first = await resp.content.readany()
        ttfc = time.perf_counter() - t0
        rest = await resp.read()
        if resp.status != 200 or not (first + rest).endswith(b"[DONE]\n\n"):
            raise RuntimeError(f"bad response {resp.status}")
    return ttfc


async def _measure(base: str, body: bytes, n_seq: int, n_total: int, concurrency: int) -> dict[str, float]:
    url = base + "/v1/completions"
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
        for _ in range(20):  # warm up connections and code paths
            await _one(session, url, body)
        ttfc = np.array([await _one(session, url, body) for _ in range(n_seq)]) * 1e3
        queue = iter(range(n_total))

        async def worker() -> None:
            for _ in queue:
                await _one(session, url, body)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return {
        "ttfc_p50_ms": float(np.percentile(ttfc, 50)),
        "ttfc_p99_ms": float(np.percentile(ttfc, 99)),
        "req_per_s": n_total / elapsed,
    }


async def _run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    backend_port, router_port = _free_port(), _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(
            _spawn(["-m", "systems.router.fake_backend", "--port", str(backend_port)], args.backend_cpus)
        )
        procs.append(
            _spawn(
                [
                    "-m",
                    "systems.router",
                    "colocated",
                    "--port",
                    str(router_port),
                    "--backend",
                    f"b0=http://127.0.0.1:{backend_port}",
                    "--policy",
                    args.policy,
                    "--block-size",
                    "128",
                    "--log-level",
                    "WARNING",
                ],
                args.router_cpus,
            )  # fmt: skip
        )
        if args.client_cpus:
            os.sched_setaffinity(0, args.client_cpus)
        prompt = list(range(1000, 1000 + args.prompt_tokens))
        body = json.dumps({"prompt": prompt, "max_tokens": args.chunks, "stream": True}).encode()
        async with aiohttp.ClientSession(trust_env=False) as s:
            await _wait_up(s, f"http://127.0.0.1:{backend_port}/v1/models")
            await _wait_up(s, f"http://127.0.0.1:{router_port}/health")
        results = {}
        for label, port in (("direct", backend_port), ("router", router_port)):
            router_cpu0 = _cpu_s(procs[1].pid)
            results[label] = await _measure(
                f"http://127.0.0.1:{port}", body, args.sequential, args.requests, args.concurrency
            )
            if label == "router":  # router CPU per request: its capacity on one core is the inverse
                n = args.requests + args.sequential + 20
                results[label]["router_cpu_ms_per_req"] = (_cpu_s(procs[1].pid) - router_cpu0) / n * 1e3
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _cpus(text: str) -> Optional[set[int]]:
    return {int(c) for c in text.split(",")} if text else None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark and log a JSON line with the results."""
    p = argparse.ArgumentParser(prog="python -m systems.router.bench", description=__doc__.splitlines()[0])
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--chunks", type=int, default=8, help="streamed chunks per response")
    p.add_argument("--sequential", type=int, default=300, help="requests for the concurrency-1 latency")
    p.add_argument("--requests", type=int, default=2000, help="requests for the throughput run")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--policy", default="cache_aware")
    p.add_argument("--router-cpus", type=_cpus, default=None, help="e.g. 0")
    p.add_argument("--backend-cpus", type=_cpus, default=None, help="e.g. 1")
    p.add_argument("--client-cpus", type=_cpus, default=None, help="e.g. 1")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    try:
        import uvloop
    except ImportError:
        results = asyncio.run(_run(args))
    else:
        results = uvloop.run(_run(args))
    d, r = results["direct"], results["router"]
    results["added"] = {
        "ttfc_p50_ms": r["ttfc_p50_ms"] - d["ttfc_p50_ms"],
        "ttfc_p99_ms": r["ttfc_p99_ms"] - d["ttfc_p99_ms"],
    }
    logger.info(
        "%s",
        json.dumps(
            {
                "config": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()},
                **results,
            }
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
