"""The disaggregating router in-process, in front of fake vLLM prefill, decode and mixed instances and a
real bootstrap registry, all on 127.0.0.1; plus its cost estimates and cluster view.

The fakes record every body they receive. Each test runs its own event loop with a hard timeout and
closes the router and the fakes in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from systems.launch import kv_bootstrap
from systems.policies.hashing import block_hashes
from systems.router.conductor_view import EWMA, ClusterState, Estimates, RouterPDView, least_loaded_decode
from systems.router.pd_app import Instance, PDRouter, RouterConfig, create_app

pytestmark = pytest.mark.integration  # servers on loopback

PROMPT = list(range(1, 13))  # 12 tokens: 3 full blocks of 4


def run(coro: Awaitable[None], timeout_s: float = 30.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout_s))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def url_of(server: TestServer) -> str:
    return f"http://127.0.0.1:{server.port}"


async def serve(app: web.Application) -> TestServer:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@dataclass
class FakePrefill:
    """Answers one non-streamed completion with ``cached_tokens``; waits on ``gate`` when set."""

    cached: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    gate: Optional[asyncio.Event] = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        async def completions(request: web.Request) -> web.Response:
            body = await request.json()
            self.bodies.append(body)
            self.arrived.set()
            if self.gate is not None:
                await self.gate.wait()
            return web.json_response({
                "id": "cmpl-p", "object": "text_completion",
                "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 1,
                          "prompt_tokens_details": {"cached_tokens": self.cached}}})

        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        return app


@dataclass
class FakeDecode:
    """Streams ``n_chunks`` SSE chunks then ``[DONE]``."""

    name: str
    n_chunks: int = 3
    bodies: list[dict[str, Any]] = field(default_factory=list)
    break_after: Optional[int] = None  # drop the connection after this many chunks
    close_cleanly: bool = False  # with break_after: end the response properly, without data: [DONE]

    def chunks(self) -> list[bytes]:
        out = []
        for k in range(self.n_chunks):
            finish = "length" if k == self.n_chunks - 1 else None
            event = {"id": f"cmpl-{self.name}", "choices": [{"index": 0, "text": f"{self.name}-{k}",
                                                             "finish_reason": finish}]}
            out.append(f"data: {json.dumps(event)}\n\n".encode())
        return [*out, b"data: [DONE]\n\n"]

    def expected(self) -> str:
        return b"".join(self.chunks()).decode()

    def app(self) -> web.Application:
        async def completions(request: web.Request) -> web.StreamResponse:
            self.bodies.append(await request.json())
            resp = web.StreamResponse(status=200)
            resp.headers["Content-Type"] = "text/event-stream"
            await resp.prepare(request)
            for k, chunk in enumerate(self.chunks()):
                if k == self.break_after:
                    if self.close_cleanly:  # what a server killed between two events can look like
                        await resp.write_eof()
                        return resp
                    assert request.transport is not None
                    request.transport.abort()
                    return resp
                await resp.write(chunk)
            await resp.write_eof()
            return resp

        async def health(request: web.Request) -> web.Response:
            return web.json_response({})

        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        app.router.add_get("/health", health)
        return app


async def bootstrap_with(engine_id: str) -> TestServer:
    server = await serve(kv_bootstrap.create_app())
    reg = {"engine_id": engine_id, "dp_rank": 0, "tp_rank": 0, "pp_rank": 0, "addr": "127.0.0.1:1"}
    async with aiohttp.ClientSession() as session, session.post(f"{url_of(server)}/register", json=reg) as resp:
        assert resp.status == 200
    return server


@dataclass
class Cluster:
    client: TestClient
    router: PDRouter
    prefills: list[FakePrefill]
    decodes: dict[str, FakeDecode]
    log_path: Path

    def log(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, n_prefill: int = 1, decodes: tuple[str, ...] = ("d0", "d1"),
                  dead: tuple[str, ...] = (), mixed: tuple[str, ...] = (), pool: Any = None,
                  prefill_gate: Optional[asyncio.Event] = None, **cfg_kw: Any) -> AsyncIterator[Cluster]:
    servers: list[TestServer] = []
    client: Optional[TestClient] = None
    try:
        prefill_fakes, prefill_insts = [], []
        for i in range(n_prefill):
            fake = FakePrefill(cached=2, gate=prefill_gate)
            servers.append(await serve(fake.app()))
            servers.append(await bootstrap_with(f"E{i + 1}"))
            prefill_fakes.append(fake)
            prefill_insts.append(Instance(f"p{i}", url_of(servers[-2]), bootstrap=url_of(servers[-1])))
        fakes: dict[str, FakeDecode] = {}
        insts: dict[str, Instance] = {}
        for name in (*decodes, *mixed):
            fakes[name] = FakeDecode(name)
            if name in dead:
                insts[name] = Instance(name, f"http://127.0.0.1:{closed_port()}")
            else:
                servers.append(await serve(fakes[name].app()))
                insts[name] = Instance(name, url_of(servers[-1]))
        log_path = tmp_path / "router_requests.jsonl"
        cfg_kw.setdefault("block_size", 4)
        cfg_kw.setdefault("health_interval_s", 60.0)
        cfg = RouterConfig(prefill=prefill_insts, decode=[insts[n] for n in decodes],
                           mixed=[insts[n] for n in mixed], request_log=str(log_path), **cfg_kw)
        router = PDRouter(cfg, pool=pool)
        client = TestClient(TestServer(create_app(router), host="127.0.0.1"))
        await client.start_server()
        yield Cluster(client, router, prefill_fakes, fakes, log_path)
    finally:
        if prefill_gate is not None:
            prefill_gate.set()
        if client is not None:
            await client.close()
        for server in servers:
            await server.close()


def request_body(**overrides: Any) -> dict[str, Any]:
    body = {"model": "tiny", "prompt": list(PROMPT), "max_tokens": 5, "stream": True,
            "stream_options": {"include_usage": True}, "min_tokens": 2, "temperature": 0.0}
    body.update(overrides)
    return body


# -- the request path -------------------------------------------------------------------------------------------
def test_prefill_then_decode_bodies_headers_and_log(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path) as c:
            original = request_body()
            resp = await c.client.post("/v1/completions", json=original, headers={"X-Request-Id": "42"})
            assert resp.status == 200
            assert resp.headers["x-instance"] == "p0->d0"
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            assert await resp.text() == c.decodes["d0"].expected()

            (pbody,) = c.prefills[0].bodies
            kv = pbody.pop("kv_transfer_params")
            assert kv["do_remote_decode"] is True and set(kv) == {"do_remote_decode", "transfer_id"}
            transfer_id = kv["transfer_id"]
            assert isinstance(transfer_id, str) and transfer_id
            assert pbody == {"model": "tiny", "prompt": PROMPT, "max_tokens": 1, "stream": False, "temperature": 0.0}

            (dbody,) = c.decodes["d0"].bodies
            assert c.decodes["d1"].bodies == []
            dkv = dbody.pop("kv_transfer_params")
            assert dbody == original
            assert dkv == {"do_remote_prefill": True, "remote_bootstrap_addr": c.router.cfg.prefill[0].bootstrap,
                           "remote_engine_id": "E1", "transfer_id": transfer_id}
            assert dkv["remote_bootstrap_addr"].startswith("http://127.0.0.1:")
        (entry,) = c.log()
        assert entry["request_id"] == "42" and entry["prefill"] == "p0" and entry["decode"] == "d0"
        assert entry["status"] == "ok" and entry["mode"] == "pd" and entry["transfer_id"] == transfer_id
        assert entry["prefill_s"] > 0 and entry["decode_s"] > 0 and entry["total_s"] >= entry["prefill_s"]
        assert entry["prefill_cached_tokens"] == 2 and entry["prompt_tokens"] == len(PROMPT)
        assert c.router.counts["requests"] == 1
        # the counters of the finished request are released
        assert c.router.state.prefill[0].outstanding == 0 and c.router.state.prefill[0].queued_work_s == 0
        assert all(d.running == 0 and d.kv_tokens == 0 for d in c.router.state.decode)

    run(go())


def test_engine_id_is_asked_once(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path, decodes=("d0",)) as c:
            for _ in range(2):
                resp = await c.client.post("/v1/completions", json=request_body())
                assert resp.status == 200
                await resp.read()
            assert c.router.cfg.prefill[0].engine_id == "E1"
            assert [b["kv_transfer_params"]["remote_engine_id"] for b in c.decodes["d0"].bodies] == ["E1", "E1"]

    run(go())


@pytest.mark.parametrize("prompt", ["a text prompt", [], [1, "2"], None])
def test_prompt_must_be_token_ids(tmp_path, prompt):
    async def go() -> None:
        async with cluster(tmp_path) as c:
            resp = await c.client.post("/v1/completions", json=request_body(prompt=prompt))
            assert resp.status == 400
            assert "token-id lists" in (await resp.json())["error"]["message"]
            assert c.prefills[0].bodies == [] and c.router.counts["requests"] == 0

    run(go())


def test_body_that_is_not_json_is_refused(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path) as c:
            resp = await c.client.post("/v1/completions", data=b"{oops", headers={"Content-Type": "application/json"})
            assert resp.status == 400

    run(go())


def test_early_rejection_answers_429_and_logs_it(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path, rejection="early", ttft_slo_s=1e-9) as c:
            resp = await c.client.post("/v1/completions", json=request_body(), headers={"X-Request-Id": "7"})
            assert resp.status == 429
            assert "rejected" in (await resp.json())["error"]["message"]
            assert c.prefills[0].bodies == [] and c.router.counts["rejected"] == 1
        (entry,) = c.log()
        assert entry["request_id"] == "7" and entry["status"] == "rejected" and "decode" not in entry

    run(go())


def test_dead_decode_is_marked_down_and_avoided(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path, dead=("d0",)) as c:
            resp = await c.client.post("/v1/completions", json=request_body(), headers={"X-Request-Id": "1"})
            assert resp.status == 502
            message = (await resp.json())["error"]["message"]
            assert "d0" in message and "unreachable" in message
            stats = c.router.stats()
            assert stats["decode_alive"] == {"d0": False, "d1": True}
            assert stats["counts"]["decode_marked_down"] == 1 and stats["counts"]["decode_errors"] == 1

            resp = await c.client.post("/v1/completions", json=request_body(), headers={"X-Request-Id": "2"})
            assert resp.status == 200 and resp.headers["x-instance"] == "p0->d1"
            assert await resp.text() == c.decodes["d1"].expected()
            assert c.router.state.decode[0].running == 0 and c.router.state.decode[0].kv_tokens == 0
        first, second = c.log()
        assert first["status"] == "failed" and first["decode"] == "d0"
        assert second["status"] == "ok" and second["decode"] == "d1"

    run(go())


@pytest.mark.parametrize("close_cleanly", [False, True])
def test_broken_stream_ends_with_an_sse_error_and_marks_the_decode_down(tmp_path, close_cleanly):
    async def go() -> None:
        async with cluster(tmp_path) as c:
            c.decodes["d0"].break_after = 1
            c.decodes["d0"].close_cleanly = close_cleanly
            resp = await c.client.post("/v1/completions", json=request_body(), headers={"X-Request-Id": "b"})
            assert resp.status == 200 and resp.headers["x-instance"] == "p0->d0"
            received = b""
            with contextlib.suppress(aiohttp.ClientError):
                async for chunk in resp.content.iter_any():
                    received += chunk
            text = received.decode()
            assert text.startswith(c.decodes["d0"].chunks()[0].decode())
            assert "decode_failed" in text and "d0 broke the stream" in text and "[DONE]" not in text
            assert c.router.stats()["decode_alive"]["d0"] is False
            assert c.router.counts["decode_errors"] == 1
            resp = await c.client.post("/v1/completions", json=request_body())
            assert resp.status == 200 and resp.headers["x-instance"] == "p0->d1"
            await resp.read()
        entry = next(e for e in c.log() if e["request_id"] == "b")
        assert entry["status"] == "failed" and entry["decode"] == "d0"

    run(go())


def test_decode_marked_down_comes_back_when_healthy(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path, health_interval_s=0.02) as c:
            c.router.mark_decode_down(0, "test")
            c.router.mark_decode_down(0, "test again")  # counted once
            assert c.router.counts["decode_marked_down"] == 1
            assert c.router.stats()["decode_alive"]["d0"] is False
            for _ in range(250):
                if c.router.state.decode[0].alive:
                    break
                await asyncio.sleep(0.02)
            assert c.router.state.decode[0].alive

    run(go())


def test_stats_endpoint(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path) as c:
            resp = await c.client.get("/stats")
            assert resp.status == 200
            stats = await resp.json()
            assert stats["decode_alive"] == {"d0": True, "d1": True} and stats["pool"] is False
            assert stats["local_cache_source"] == "routed" and stats["policy"]["name"] == "load_balancing"
            assert (await c.client.get("/health")).status == 200

    run(go())


def test_requests_beyond_max_pending_get_429_overloaded(tmp_path):
    async def go() -> None:
        gate = asyncio.Event()
        async with cluster(tmp_path, prefill_gate=gate, max_pending=1) as c:
            first = asyncio.create_task(c.client.post("/v1/completions", json=request_body()))
            await asyncio.wait_for(c.prefills[0].arrived.wait(), 10)  # held at the prefill: 1 pending
            resp = await c.client.post("/v1/completions", json=request_body())
            assert resp.status == 429 and resp.headers["Retry-After"] == "1"
            error = (await resp.json())["error"]
            assert error["type"] == "overloaded" and "max_pending" in error["message"]
            gate.set()
            ok = await first
            assert ok.status == 200 and await ok.text() == c.decodes["d0"].expected()
            stats = await (await c.client.get("/stats")).json()
            assert stats["admission"] == {"max_pending": 1, "pending": 0, "peak_pending": 1, "rejected_overload": 1}
            assert len(c.prefills[0].bodies) == 1  # the refused request never reached an instance
            assert (await c.client.post("/v1/completions", json=request_body())).status == 200

    run(go())


def test_stalled_prefill_ends_with_504_after_the_total_timeout(tmp_path):
    async def go() -> None:
        gate = asyncio.Event()  # never set while the request runs: the prefill instance stalls
        async with cluster(tmp_path, prefill_gate=gate, upstream_timeout_s=1.0) as c:
            resp = await c.client.post("/v1/completions", json=request_body(), headers={"X-Request-Id": "9"})
            assert resp.status == 504
            error = (await resp.json())["error"]
            assert error["type"] == "prefill_timeout" and "p0" in error["message"]
            assert "total upstream timeout (1 s)" in error["message"]
            assert c.router.counts["prefill_timeouts"] == 1 and c.router.admission.pending == 0
            assert c.router.state.prefill[0].outstanding == 0
        (entry,) = c.log()
        assert entry["request_id"] == "9" and entry["status"] == "timeout"

    run(go())


def test_router_config_checks_overload_settings():
    base = {"prefill": [{"name": "p0", "url": "http://127.0.0.1:1"}],
            "decode": [{"name": "d0", "url": "http://127.0.0.1:2"}]}
    cfg = RouterConfig.from_json(base)
    assert cfg.max_pending == 4096 and cfg.upstream_timeout_s == 900.0 and cfg.connect_timeout_s == 10.0
    assert cfg.event_index_capacity() == Estimates().local_capacity_tokens // cfg.block_size
    assert RouterConfig.from_json({**base, "kv_events_capacity_blocks": 7}).event_index_capacity() == 7
    with pytest.raises(ValueError, match="max_pending"):
        RouterConfig.from_json({**base, "max_pending": -1})
    with pytest.raises(ValueError, match="connect_timeout_s"):
        RouterConfig.from_json({**base, "connect_timeout_s": 0})


def test_overflow_goes_to_the_mixed_instance_while_prefills_are_busy(tmp_path):
    async def go() -> None:
        gate = asyncio.Event()
        async with cluster(tmp_path, decodes=("d0",), mixed=("m0",), mixed_overflow_outstanding=1,
                           prefill_gate=gate) as c:
            first = asyncio.create_task(c.client.post("/v1/completions", json=request_body(),
                                                      headers={"X-Request-Id": "slow"}))
            await asyncio.wait_for(c.prefills[0].arrived.wait(), 10)
            assert c.router.state.prefill[0].outstanding == 1
            resp = await c.client.post("/v1/completions", json=request_body(), headers={"X-Request-Id": "over"})
            assert resp.status == 200 and resp.headers["x-instance"] == "m0"
            assert await resp.text() == c.decodes["m0"].expected()
            (mbody,) = c.decodes["m0"].bodies
            assert mbody == request_body()  # the whole request, no KV hand-off
            assert len(c.prefills[0].bodies) == 1 and c.router.counts["to_mixed"] == 1
            assert c.router.mixed_outstanding == [0]

            gate.set()
            resp = await first
            assert resp.status == 200 and resp.headers["x-instance"] == "p0->d0"
            await resp.read()
            assert c.decodes["d0"].bodies and c.decodes["m0"].bodies == [mbody]
        by_id = {e["request_id"]: e for e in c.log()}
        assert by_id["over"]["mode"] == "mixed" and by_id["over"]["instance"] == "m0" and by_id["over"]["status"] == "ok"
        assert by_id["slow"]["mode"] == "pd" and by_id["slow"]["status"] == "ok"

    run(go())


def test_no_overflow_while_prefills_have_room(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path, decodes=("d0",), mixed=("m0",), mixed_overflow_outstanding=1) as c:
            resp = await c.client.post("/v1/completions", json=request_body())
            assert resp.status == 200 and resp.headers["x-instance"] == "p0->d0"
            await resp.read()
            assert c.decodes["m0"].bodies == []

    run(go())


@pytest.mark.parametrize("local_cache", [True, False])
def test_local_cache_switch(tmp_path, local_cache):
    async def go() -> None:
        async with cluster(tmp_path, decodes=("d0",), local_cache=local_cache) as c:
            for rid in ("a", "b"):
                resp = await c.client.post("/v1/completions", json=request_body(), headers={"X-Request-Id": rid})
                assert resp.status == 200
                await resp.read()
            view = RouterPDView(c.router.state, block_hashes(PROMPT, 4, ""), 0, 5)
            expected = len(PROMPT) if local_cache else 0
            assert view.local_prefix_tokens(0) == expected
            # another tenant's salt never matches
            assert RouterPDView(c.router.state, block_hashes(PROMPT, 4, "t"), 0, 5).local_prefix_tokens(0) == 0
        first, second = c.log()
        assert first["local_prefix_tokens"] == 0
        assert second["local_prefix_tokens"] == expected

    run(go())


# -- the Conductor with a pool ----------------------------------------------------------------------------------
class FakePool:
    def __init__(self, tokens: int, block: Optional[threading.Event] = None) -> None:
        self.tokens = tokens
        self.block = block
        self.calls: list[tuple[list[int], str]] = []

    def cached_prefix_tokens(self, token_ids: list[int], cache_salt: str = "") -> int:
        self.calls.append((list(token_ids), cache_salt))
        if self.block is not None:
            self.block.wait(10)
        return self.tokens


@pytest.mark.parametrize("busy", [0, 1])
def test_conductor_routes_to_the_lowest_estimated_ttft_with_pool_facts(tmp_path, busy):
    async def go() -> None:
        pool = FakePool(8)
        async with cluster(tmp_path, n_prefill=2, decodes=("d0",), pool=pool, policy="conductor") as c:
            c.router.state.prefill[busy].queued_work_s = 5.0
            resp = await c.client.post("/v1/completions", json=request_body(cache_salt="tenant"),
                                       headers={"X-Request-Id": "c"})
            assert resp.status == 200
            chosen = 1 - busy
            assert resp.headers["x-instance"] == f"p{chosen}->d0"
            await resp.read()
            assert pool.calls == [(PROMPT, "tenant")]
            assert len(c.prefills[chosen].bodies) == 1 and c.prefills[busy].bodies == []
            kv = c.decodes["d0"].bodies[0]["kv_transfer_params"]
            assert kv["remote_engine_id"] == f"E{chosen + 1}"
            assert kv["remote_bootstrap_addr"] == c.router.cfg.prefill[chosen].bootstrap
            assert c.router.counts["pool_queries"] == 1 and c.router.counts["pool_query_timeouts"] == 0
        (entry,) = c.log()
        assert entry["pool_prefix_tokens"] == 8 and entry["prefill"] == f"p{chosen}"
        assert entry["fetch_tokens"] == 8 and entry["reuse_tokens"] == 8 and entry["tenant"] == "tenant"
        est = Estimates()
        assert entry["est_ttft_s"] == pytest.approx(
            est.prefill_overhead_s + est.prefill_s_per_token * (len(PROMPT) - 8)
            + 8 * est.kv_bytes_per_token / est.pool_bytes_per_s)

    run(go())


def test_pool_is_not_asked_by_other_policies(tmp_path):
    async def go() -> None:
        pool = FakePool(8)
        async with cluster(tmp_path, decodes=("d0",), pool=pool, policy="load_balancing") as c:
            resp = await c.client.post("/v1/completions", json=request_body())
            assert resp.status == 200
            await resp.read()
            assert pool.calls == [] and c.router.counts["pool_queries"] == 0
        assert c.log()[0]["pool_prefix_tokens"] == 0

    run(go())


def test_slow_pool_query_times_out_and_routes_anyway(tmp_path):
    async def go() -> None:
        release = threading.Event()
        pool = FakePool(8, block=release)
        try:
            async with cluster(tmp_path, decodes=("d0",), pool=pool, policy="conductor",
                               pool_query_timeout_s=0.05) as c:
                resp = await c.client.post("/v1/completions", json=request_body())
                assert resp.status == 200 and resp.headers["x-instance"] == "p0->d0"
                await resp.read()
                assert c.router.counts["pool_queries"] == 1 and c.router.counts["pool_query_timeouts"] == 1
        finally:
            release.set()
        (entry,) = c.log()
        assert entry["pool_prefix_tokens"] == 0 and entry["fetch_tokens"] == 0 and entry["status"] == "ok"

    run(go())


# -- estimates and the cluster view -----------------------------------------------------------------------------
def test_observe_prefill_moves_toward_the_measured_rate():
    est = Estimates(prefill_overhead_s=0.02, prefill_s_per_token=2e-4)
    est.observe_prefill(0.02 + 100 * 1e-3, 100)  # measured 1e-3 s per token
    assert est.prefill_s_per_token == pytest.approx(2e-4 + EWMA * (1e-3 - 2e-4))
    for _ in range(60):
        est.observe_prefill(0.02 + 100 * 1e-3, 100)
    assert est.prefill_s_per_token == pytest.approx(1e-3, rel=1e-3)


def test_observe_prefill_ignores_uninformative_measurements():
    est = Estimates(prefill_overhead_s=0.02, prefill_s_per_token=2e-4)
    est.observe_prefill(0.5, 0)  # all cached
    est.observe_prefill(0.01, 100)  # faster than the overhead
    assert est.prefill_s_per_token == 2e-4


def test_decode_views_report_dead_instances_as_full():
    est = Estimates(decode_kv_capacity_tokens=1000, decode_step_s=0.02, decode_step_s_per_seq=0.002)
    state = ClusterState.create(["p0"], ["d0", "d1"], est, block_size=4)
    state.decode[0].running, state.decode[0].kv_tokens = 3, 100
    state.decode[1].alive = False
    views = RouterPDView(state, [], 0, output_tokens=50).decode_views(prompt_tokens=200, after_s=0.0)
    assert views[0].kv_free_tokens == 1000 - 100 - 200 - 50 == views[0].predicted_kv_free_tokens
    assert views[0].step_s == pytest.approx(0.02 + 0.002 * 3)
    assert views[1].kv_free_tokens == -1 and views[1].predicted_kv_free_tokens == -1
    assert least_loaded_decode(state) == 0
    state.decode[0].alive = False
    assert least_loaded_decode(state) is None


def test_prefill_views_and_costs():
    est = Estimates(prefill_overhead_s=0.01, prefill_s_per_token=1e-3, kv_bytes_per_token=1000, pool_bytes_per_s=1e6)
    state = ClusterState.create(["p0", "p1"], ["d0"], est, block_size=4)
    hashes = block_hashes(PROMPT, 4, "")
    state.prefill[1].local.record(hashes[:2])
    state.prefill[0].queued_work_s, state.prefill[0].outstanding = 0.5, 2
    view = RouterPDView(state, hashes, pool_prefix_tokens=12, output_tokens=1)
    p0, p1 = view.prefill_views()
    assert (p0.name, p0.queue_s, p0.local_prefix_tokens, p0.outstanding) == ("p0", 0.5, 0, 2)
    assert (p1.name, p1.local_prefix_tokens) == ("p1", 8)
    assert view.prefill_time_s(0, 12, 8) == pytest.approx(0.01 + 4e-3)
    assert view.load_time_s(0, 8, 4) == pytest.approx(4 * 1000 / 1e6)
    assert view.global_prefix().tokens == 12 and view.global_prefix().where == "pool"
    assert RouterPDView(state, hashes, 0, 1).global_prefix().where == ""


def test_router_config_from_json_checks_instances():
    data = {"prefill": [{"name": "p0", "url": "http://x", "bootstrap": "http://b"}],
            "decode": [{"name": "d0", "url": "http://y"}], "estimates": {"prefill_s_per_token": 1e-3}}
    cfg = RouterConfig.from_json(data)
    assert cfg.prefill[0].bootstrap == "http://b" and cfg.estimates.prefill_s_per_token == 1e-3
    with pytest.raises(ValueError, match="unique"):
        RouterConfig.from_json({**data, "decode": [{"name": "p0", "url": "http://y"}]})
    with pytest.raises(ValueError, match="at least one"):
        RouterConfig.from_json({**data, "decode": []})
