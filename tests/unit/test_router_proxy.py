"""The router in-process, in front of tiny streaming backends on free loopback ports.

Every test runs its own event loop with a hard timeout and tears down the router and the backends in
``finally``, releasing held streams first so that shutdown never waits on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import aiohttp
import pytest

from systems.policies import CacheAwarePolicy, RoundRobinPolicy, RouteRequest, RoutingPolicy
from systems.router import RouterState, create_app, start_router
from systems.router.fake_backend import FakeBackend
from systems.router.proxy import STATE_KEY

pytestmark = pytest.mark.integration  # servers on loopback


def run(coro: Awaitable[None], timeout_s: float = 30.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout_s))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def until(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


class RecordingPolicy(RoundRobinPolicy):
    """Round-robin that records the hook calls."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, Any, int]] = []

    def on_routed(self, req: RouteRequest, index: int) -> None:
        self.events.append(("routed", req.request_id, index))

    def on_finished(self, req: RouteRequest, index: int) -> None:
        self.events.append(("finished", req.request_id, index))


@dataclass
class Cluster:
    url: str
    backends: list[FakeBackend]
    state: RouterState
    client: aiohttp.ClientSession
    bound_host: str

    async def post(self, payload: dict[str, Any], path: str = "/v1/completions") -> aiohttp.ClientResponse:
        return await self.client.post(self.url + path, json=payload)


@contextlib.asynccontextmanager
async def cluster(
    n: int = 2,
    policy: Optional[RoutingPolicy] = None,
    extra: Sequence[tuple[str, str]] = (),
    block_size: int = 16,
) -> AsyncIterator[Cluster]:
    backends = [FakeBackend(f"b{i}") for i in range(n)]
    runner = None
    try:
        for b in backends:
            await b.start()
        urls = {b.name: b.url for b in backends} | dict(extra)
        app = create_app(urls, policy or RoundRobinPolicy(), block_size=block_size)
        runner, port = await start_router(app, 0)
        async with aiohttp.ClientSession(trust_env=False) as client:
            yield Cluster(
                f"http://127.0.0.1:{port}", backends, app[STATE_KEY], client, runner.addresses[0][0]
            )
    finally:
        for b in backends:
            b.release.set()
        if runner is not None:
            await runner.cleanup()
        for b in backends:
            await b.stop()


def test_stream_passes_through_chunk_by_chunk_with_headers() -> None:
    async def scenario() -> None:
        policy = RecordingPolicy()
        async with cluster(2, policy) as c:
            assert c.bound_host == "127.0.0.1"
            raw = b'{ "stream" : true,"max_tokens":3,   "fake_hold": true, "prompt": [1, 2, 3] }'
            resp = await c.client.post(
                c.url + "/v1/completions", data=raw, headers={"Content-Type": "application/json"}
            )
            try:
                assert resp.status == 200
                assert resp.headers["x-instance"] == "b0"
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
                # the first chunk is here while the backend is still held mid-stream
                assert b'"t0 "' in first
                assert c.backends[0].completed == 0 and c.state.outstanding == [1, 0]
                c.backends[0].release.set()
                rest = await resp.content.read()
            finally:
                resp.release()
            assert rest.count(b"data: ") == 3 and rest.endswith(b"data: [DONE]\n\n")
            assert c.backends[0].bodies == [raw]  # forwarded byte for byte
            await until(lambda: c.state.outstanding == [0, 0])
            assert policy.events == [("routed", 0, 0), ("finished", 0, 0)]
            assert c.state.routed == [1, 0] and c.state.backend_errors == [0, 0]

    run(scenario())


def test_non_streaming_body_status_and_length_are_preserved() -> None:
    async def scenario() -> None:
        async with cluster(1) as c:
            async with await c.post({"prompt": "hello", "max_tokens": 2}) as resp:
                assert resp.status == 200 and resp.headers["x-instance"] == "b0"
                assert resp.headers["Content-Length"] == str(len(await resp.read()))
                assert (await resp.json())["choices"][0]["text"] == "t0 t1 "
            async with await c.post({"prompt": "x", "fake_status": 500}) as resp:
                assert resp.status == 500 and resp.content_type == "application/json"
                assert (await resp.json())["error"]["message"] == "fake failure"
            await until(lambda: c.state.outstanding == [0])
            assert c.state.backend_errors == [0]  # an HTTP error answer is the backend's answer, not ours

    run(scenario())


def test_backend_breaking_the_stream_truncates_the_client_response() -> None:
    async def scenario() -> None:
        async with cluster(1) as c:
            async with await c.post(
                {"prompt": [1], "stream": True, "max_tokens": 5, "fake_break_after": 1}
            ) as resp:
                assert resp.status == 200
                with pytest.raises(aiohttp.ClientPayloadError):
                    await resp.content.read()
            await until(lambda: c.state.outstanding == [0])
            assert c.state.backend_errors == [1]
            # the router still serves afterwards
            async with await c.post({"prompt": [1], "stream": True}) as resp:
                assert (await resp.read()).endswith(b"[DONE]\n\n")

    run(scenario())


def test_client_disconnect_frees_the_slot_and_aborts_the_backend_request() -> None:
    async def scenario() -> None:
        policy = RecordingPolicy()
        async with cluster(1, policy) as c:
            resp = await c.post({"prompt": [1], "stream": True, "max_tokens": 3, "fake_hold": True})
            await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
            assert c.state.outstanding == [1]
            resp.close()  # drop the connection mid-stream
            await until(lambda: c.state.outstanding == [0])
            await until(lambda: c.backends[0].aborted == 1)
            assert c.state.client_disconnects == [1] and c.backends[0].completed == 0
            assert policy.events == [("routed", 0, 0), ("finished", 0, 0)]

    run(scenario())


def test_dead_backend_gives_502_naming_it() -> None:
    async def scenario() -> None:
        dead = f"http://127.0.0.1:{free_port()}"
        policy = RecordingPolicy()
        async with cluster(1, policy, extra=[("ghost", dead)]) as c:
            async with await c.post({"prompt": [1]}) as resp:  # round-robin: b0
                assert resp.status == 200
            async with await c.post({"prompt": [1]}) as resp:  # ghost
                assert resp.status == 502 and resp.headers["x-instance"] == "ghost"
                err = (await resp.json())["error"]
                assert err["backend"] == "ghost" and "ghost" in err["message"] and dead in err["message"]
            assert c.state.outstanding == [0, 0] and c.state.backend_errors == [0, 1]
            assert policy.events[-2:] == [("routed", 1, 1), ("finished", 1, 1)]

    run(scenario())


def test_cache_aware_keeps_shared_prefixes_on_one_backend() -> None:
    async def scenario() -> None:
        async with cluster(2, CacheAwarePolicy(block_size=16), block_size=16) as c:
            prefixes = {"p": list(range(1000, 1032)), "q": list(range(2000, 2032))}  # two blocks each
            seen: dict[str, set[str]] = {"p": set(), "q": set()}
            for k in range(8):
                group = "pq"[k % 2]
                async with await c.post({"prompt": prefixes[group] + [k] * 20, "max_tokens": 1}) as resp:
                    assert resp.status == 200
                    seen[group].add(resp.headers["x-instance"])
            assert seen == {"p": {"b0"}, "q": {"b1"}}
            # a chat request is routed (and forwarded to the chat path) too
            chat = {"messages": [{"role": "user", "content": "hi " * 100}], "max_tokens": 1}
            async with await c.post(chat, "/v1/chat/completions") as resp:
                assert resp.status == 200
                name = resp.headers["x-instance"]
            async with await c.post(chat, "/v1/chat/completions") as resp:
                assert resp.headers["x-instance"] == name
            backend = c.backends[int(name[1])]
            assert backend.paths[-2:] == ["/v1/chat/completions"] * 2

    run(scenario())


def test_concurrent_streams_all_complete_and_counts_return_to_zero() -> None:
    async def scenario() -> None:
        async with cluster(3) as c:

            async def one(k: int) -> bytes:
                async with await c.post(
                    {"prompt": [k], "stream": True, "max_tokens": 4, "fake_delay_s": 0.002}
                ) as r:
                    return await r.read()

            bodies = await asyncio.gather(*(one(k) for k in range(24)))
            assert all(b.count(b"data: ") == 5 for b in bodies)
            await until(lambda: c.state.outstanding == [0, 0, 0])
            assert c.state.routed == [8, 8, 8]

    run(scenario())


def metric_values(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def test_health_models_and_metrics() -> None:
    async def scenario() -> None:
        async with cluster(2) as c:
            async with c.client.get(c.url + "/health") as resp:
                assert resp.status == 200 and (await resp.json())["status"] == "ok"
            async with c.client.get(c.url + "/v1/models") as resp:
                assert resp.status == 200 and resp.headers["x-instance"] == "b0"
                assert (await resp.json())["data"][0]["owned_by"] == "b0"
            for k in range(3):
                async with await c.post({"prompt": [k], "stream": True}) as resp:
                    await resp.read()
            resp = await c.post({"prompt": [9], "stream": True, "fake_hold": True})  # b1, held open
            await resp.content.readuntil(b"\n\n")
            async with c.client.get(c.url + "/metrics") as m:
                assert m.status == 200 and m.content_type == "text/plain"
                values = metric_values(await m.text())
            c.backends[1].release.set()
            await resp.read()
            resp.release()
            assert values['router_requests_routed_total{backend="b0"}'] == 2
            assert values['router_requests_routed_total{backend="b1"}'] == 2
            assert values['router_requests_outstanding{backend="b0"}'] == 0
            assert values['router_requests_outstanding{backend="b1"}'] == 1
            assert values['router_backend_errors_total{backend="b0"}'] == 0
            assert (
                values['router_policy_info{policy="round_robin",source_of_truth="none",block_size="16"}'] == 1
            )

    run(scenario())


def test_models_with_dead_first_backend_is_502() -> None:
    async def scenario() -> None:
        app = create_app({"ghost": f"http://127.0.0.1:{free_port()}"}, RoundRobinPolicy())
        runner, port = await start_router(app)
        try:
            async with (
                aiohttp.ClientSession() as client,
                client.get(f"http://127.0.0.1:{port}/v1/models") as resp,
            ):
                assert resp.status == 502 and json.loads(await resp.read())["error"]["backend"] == "ghost"
        finally:
            await runner.cleanup()

    run(scenario())


def test_create_app_validates_backends() -> None:
    with pytest.raises(ValueError, match="at least one backend"):
        create_app({}, RoundRobinPolicy())
    with pytest.raises(ValueError, match="duplicate backend names: a"):
        create_app(["a=http://127.0.0.1:1", "a=http://127.0.0.1:2"], RoundRobinPolicy())
    with pytest.raises(ValueError, match="NAME=URL"):
        create_app(["http://127.0.0.1:1"], RoundRobinPolicy())
    with pytest.raises(ValueError, match="must look like"):
        create_app({"a": "127.0.0.1:1"}, RoundRobinPolicy())
