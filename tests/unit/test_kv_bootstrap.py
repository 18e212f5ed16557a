"""The external Mooncake bootstrap registry: who may register, what ``/query`` answers, and the CLI's checks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from systems.launch.kv_bootstrap import create_app, main, register


def payload(**overrides: Any) -> dict[str, Any]:
    base = {"engine_id": "E1", "dp_rank": 0, "tp_rank": 0, "pp_rank": 0, "addr": "127.0.0.1:7000"}
    base.update(overrides)
    return base


def test_first_registration_is_recorded():
    registry: dict[int, dict[str, Any]] = {}
    assert register(registry, payload()) is None
    assert registry == {0: {"engine_id": "E1", "worker_addr": {0: {0: "127.0.0.1:7000"}}}}


def test_same_address_twice_is_accepted():
    registry: dict[int, dict[str, Any]] = {}
    assert register(registry, payload()) is None
    assert register(registry, payload()) is None
    assert registry[0]["worker_addr"] == {0: {0: "127.0.0.1:7000"}}


def test_other_ranks_of_the_same_engine_are_added():
    registry: dict[int, dict[str, Any]] = {}
    assert register(registry, payload()) is None
    assert register(registry, payload(tp_rank=1, addr="127.0.0.1:7001")) is None
    assert register(registry, payload(pp_rank=1, addr="127.0.0.1:7002")) is None
    assert registry[0]["worker_addr"] == {0: {0: "127.0.0.1:7000", 1: "127.0.0.1:7002"}, 1: {0: "127.0.0.1:7001"}}


def test_engine_id_mismatch_is_refused():
    registry: dict[int, dict[str, Any]] = {}
    assert register(registry, payload()) is None
    problem = register(registry, payload(engine_id="E2", tp_rank=1, addr="127.0.0.1:7001"))
    assert problem is not None and "engine id mismatch" in problem and "E1" in problem and "E2" in problem
    assert registry[0]["engine_id"] == "E1" and 1 not in registry[0]["worker_addr"]


def test_other_address_for_the_same_ranks_is_refused():
    registry: dict[int, dict[str, Any]] = {}
    assert register(registry, payload()) is None
    problem = register(registry, payload(addr="127.0.0.1:9999"))
    assert problem is not None and "127.0.0.1:7000" in problem and "127.0.0.1:9999" in problem
    assert registry[0]["worker_addr"][0][0] == "127.0.0.1:7000"


def test_other_dp_rank_may_have_another_engine():
    registry: dict[int, dict[str, Any]] = {}
    assert register(registry, payload()) is None
    assert register(registry, payload(dp_rank=1, engine_id="E2", addr="127.0.0.1:8000")) is None
    assert registry[1]["engine_id"] == "E2"


@pytest.mark.parametrize("field", ["engine_id", "dp_rank", "tp_rank", "pp_rank", "addr"])
def test_missing_field_is_refused_by_name(field):
    body = payload()
    del body[field]
    registry: dict[int, dict[str, Any]] = {}
    problem = register(registry, body)
    assert problem is not None and repr(field) in problem
    assert registry == {}


@pytest.mark.parametrize(("field", "value"), [("engine_id", 5), ("dp_rank", "0"), ("tp_rank", None),
                                             ("pp_rank", 0.5), ("addr", ["127.0.0.1:1"])])
def test_mistyped_field_is_refused_by_name(field, value):
    registry: dict[int, dict[str, Any]] = {}
    problem = register(registry, payload(**{field: value}))
    assert problem is not None and repr(field) in problem
    assert registry == {}


@pytest.mark.parametrize("body", [[1, 2], "x", None, 3])
def test_non_object_body_is_refused(body):
    problem = register({}, body)
    assert problem is not None and "JSON object" in problem


def run_with_client(test: Callable[[TestClient], Awaitable[None]], timeout_s: float = 20.0) -> None:
    async def go() -> None:
        client = TestClient(TestServer(create_app(), host="127.0.0.1"))
        await client.start_server()
        try:
            await test(client)
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(go(), timeout_s))


@pytest.mark.integration
def test_app_register_then_query():
    async def test(client: TestClient) -> None:
        resp = await client.get("/query")
        assert resp.status == 200 and await resp.json() == {}
        resp = await client.post("/register", json=payload(addr="127.0.0.1:4242"))
        assert resp.status == 200 and (await resp.json())["status"] == "ok"
        resp = await client.get("/query")
        assert resp.status == 200
        assert await resp.json() == {"0": {"engine_id": "E1", "worker_addr": {"0": {"0": "127.0.0.1:4242"}}}}

    run_with_client(test)


@pytest.mark.integration
def test_app_refusals_answer_400_with_detail():
    async def test(client: TestClient) -> None:
        resp = await client.post("/register", data=b"{not json", headers={"Content-Type": "application/json"})
        assert resp.status == 400 and "not JSON" in (await resp.json())["detail"]
        body = payload()
        del body["addr"]
        resp = await client.post("/register", json=body)
        assert resp.status == 400 and "'addr'" in (await resp.json())["detail"]
        assert (await client.post("/register", json=payload())).status == 200
        resp = await client.post("/register", json=payload(engine_id="E9"))
        assert resp.status == 400 and "engine id mismatch" in (await resp.json())["detail"]
        resp = await client.get("/query")
        assert await resp.json() == {"0": {"engine_id": "E1", "worker_addr": {"0": {"0": "127.0.0.1:7000"}}}}

    run_with_client(test)


@pytest.mark.integration
def test_each_app_has_its_own_registry():
    first, second = create_app(), create_app()
    assert first is not second
    registries = [v for app in (first, second) for v in app.values() if isinstance(v, dict)]
    assert len(registries) == 2 and registries[0] is not registries[1]


@pytest.mark.parametrize("argv", [["--port", "5", "--port", "5"], ["--port", "0"], ["--port", "70000"], []])
def test_cli_refuses_bad_ports(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    if argv:
        assert "distinct" in capsys.readouterr().err
