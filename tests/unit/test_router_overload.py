"""The colocated router under overload: bounded admission (429), upstream timeouts (504), the cache-aware
index bounded by the backends' KV capacity, and the command-line options that set them.

The router and the fake backends run in-process on free 127.0.0.1 ports; every test releases held
requests and stops the router and the backends in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import aiohttp
import pytest

from systems.policies import CacheAwarePolicy, RoundRobinPolicy
from systems.router import create_app, start_router
from systems.router.capacity import (
    DEFAULT_CAPACITY_TOKENS,
    capacity_tokens_from_metrics,
    learn_capacity_blocks,
)
from systems.router.cli import build_parser, policy_from_args
from systems.router.fake_backend import FakeBackend
from systems.router.proxy import STATE_KEY

pytestmark = pytest.mark.integration  # servers on loopback


def run(coro: Awaitable[None], timeout_s: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout_s))


async def until(cond: Any, timeout_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def router(backend: FakeBackend, **app_kw: Any) -> AsyncIterator[tuple[str, Any, aiohttp.ClientSession]]:
    runner = None
    try:
        await backend.start()
        app = create_app({backend.name: backend.url}, RoundRobinPolicy(), **app_kw)
        runner, port = await start_router(app, 0)
        async with aiohttp.ClientSession(trust_env=False) as client:
            yield f"http://127.0.0.1:{port}", app[STATE_KEY], client
    finally:
        backend.release.set()
        if runner is not None:
            await runner.cleanup()
        await backend.stop()


def test_requests_beyond_max_pending_get_429_at_once() -> None:
    async def scenario() -> None:
        backend = FakeBackend("b0")
        async with router(backend, max_pending=2) as (url, state, client):
            held = [await client.post(url + "/v1/completions",
                                      json={"prompt": [1], "stream": True, "max_tokens": 2, "fake_hold": True})
                    for _ in range(2)]
            try:
                for resp in held:  # both streams started and are held by the backend
                    assert resp.status == 200
                    await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 20)
                assert state.admission.pending == 2
                async with client.post(url + "/v1/completions", json={"prompt": [1]}) as resp:
                    assert resp.status == 429 and resp.headers["Retry-After"] == "1"
                    error = (await resp.json())["error"]
                    assert error["type"] == "overloaded" and "max_pending" in error["message"]
                assert backend.started == 2  # the refused request never reached the backend
                backend.release.set()
                for resp in held:
                    assert (await resp.read()).endswith(b"data: [DONE]\n\n")
            finally:
                for resp in held:
                    resp.release()
            await until(lambda: state.admission.pending == 0)
            async with client.post(url + "/v1/completions", json={"prompt": [1]}) as resp:
                assert resp.status == 200  # room again
            async with client.get(url + "/stats") as resp:
                stats = await resp.json()
            assert stats["admission"] == {"max_pending": 2, "pending": 0, "peak_pending": 2, "rejected_overload": 1}
            async with client.get(url + "/metrics") as resp:
                text = await resp.text()
            assert "router_overload_rejections_total 1\n" in text and "router_requests_pending 0\n" in text

    run(scenario())


def test_backend_that_never_answers_gives_504_after_the_total_timeout() -> None:
    async def scenario() -> None:
        backend = FakeBackend("b0")
        async with router(backend, upstream_timeout_s=1.0) as (url, state, client):
            async with client.post(url + "/v1/completions", json={"prompt": [1], "fake_stall": True}) as resp:
                assert resp.status == 504 and resp.headers["x-instance"] == "b0"
                error = (await resp.json())["error"]
            assert error["type"] == "upstream_timeout" and error["backend"] == "b0"
            assert "total upstream timeout (1 s)" in error["message"]
            assert state.upstream_timeouts == [1] and state.backend_errors == [0]
            await until(lambda: backend.aborted == 1)  # the router dropped the backend request
            await until(lambda: state.outstanding == [0] and state.admission.pending == 0)

    run(scenario())


def test_stream_past_the_total_timeout_is_cut() -> None:
    async def scenario() -> None:
        backend = FakeBackend("b0")
        async with router(backend, upstream_timeout_s=1.0) as (url, state, client):
            body = {"prompt": [1], "stream": True, "max_tokens": 3, "fake_hold": True}
            async with client.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200  # the status was sent before the stream stalled
                with pytest.raises(aiohttp.ClientPayloadError):
                    await resp.content.read()
            await until(lambda: state.upstream_timeouts == [1] and state.outstanding == [0])

    run(scenario())


def test_option_values_are_checked() -> None:
    parser = build_parser()
    base = ["--port", "0", "--backend", "b=http://127.0.0.1:1"]
    args = parser.parse_args(base)
    assert (args.max_pending, args.connect_timeout_s, args.upstream_timeout_s) == (4096, 10.0, 900.0)
    assert args.capacity_blocks is None and args.max_connections is None
    args = parser.parse_args([*base, "--max-pending", "0", "--upstream-timeout-s", "0", "--capacity-blocks", "auto"])
    assert args.max_pending == 0 and args.upstream_timeout_s == 0.0 and args.capacity_blocks == "auto"
    for bad in (["--max-pending", "-1"], ["--connect-timeout-s", "0"], ["--capacity-blocks", "0"],
                ["--max-connections", "x"]):
        with pytest.raises(SystemExit):
            parser.parse_args([*base, *bad])


def test_cache_aware_index_is_bounded_by_default_and_by_the_learned_capacity() -> None:
    parser = build_parser()
    base = ["--port", "0", "--backend", "b=http://127.0.0.1:1", "--policy", "cache_aware", "--block-size", "16"]
    policy = policy_from_args(parser.parse_args(base))
    assert isinstance(policy, CacheAwarePolicy)
    assert policy.capacity_blocks_per_instance == DEFAULT_CAPACITY_TOKENS // 16  # never unbounded
    assert policy_from_args(parser.parse_args(base), learned_capacity=80).capacity_blocks_per_instance == 80
    explicit = policy_from_args(parser.parse_args([*base, "--capacity-blocks", "5"]), learned_capacity=80)
    assert explicit.capacity_blocks_per_instance == 5  # the command line wins
    assert not hasattr(policy_from_args(parser.parse_args([*base[:-4]])), "capacity_blocks_per_instance")


def test_index_forgets_the_least_recently_routed_blocks_beyond_capacity() -> None:
    from systems.policies import RouteRequest

    policy = CacheAwarePolicy(block_size=16, capacity_blocks_per_instance=3)
    policy.on_routed(RouteRequest(0, (1, 2, 3), 48), 0)
    policy.on_routed(RouteRequest(1, (7, 8), 32), 0)
    assert policy.cached_blocks(0) == 3
    assert policy.prefix_match(RouteRequest(2, (7, 8), 32), 0) == 2
    assert policy.prefix_match(RouteRequest(3, (1, 2, 3), 48), 0) == 1  # the chain's tail went first


def test_capacity_is_learnt_from_the_backends_metrics() -> None:
    text = 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1.0\n'
    assert capacity_tokens_from_metrics(text) == 1600
    assert capacity_tokens_from_metrics('vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n') is None
    assert capacity_tokens_from_metrics("not { a metrics page") is None

    async def scenario() -> None:
        backends = [FakeBackend("a", kv_blocks=(100, 16)), FakeBackend("b", kv_blocks=(40, 32)), FakeBackend("c")]
        try:
            for b in backends:
                await b.start()
            assert await learn_capacity_blocks([b.url for b in backends[:2]], 16) == 1280 // 16  # the smallest
            assert await learn_capacity_blocks([b.url for b in backends], 16) is None  # c does not say
        finally:
            for b in backends:
                await b.stop()

    run(scenario())
