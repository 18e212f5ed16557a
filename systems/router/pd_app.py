"""The disaggregating router: one OpenAI ``/v1/completions`` endpoint in front of prefill, decode and
(Splitwise) mixed vLLM instances, deciding with the simulator's :class:`~systems.policies.pd.PDScheduler`.

For each request the router

1. hashes the prompt's token ids in KV blocks (salted by ``cache_salt``, the tenant), asks Mooncake Store
   how much of the prefix the pool holds (``system=mooncake``; off the event loop, with a deadline),
   and lets the scheduler pick the prefill instance, the reused prefix and the decode instance; a
   rejection (``rejection: early|predictive|baseline``) answers ``429``;
2. with Splitwise's mixed pool, sends the whole request to a mixed instance instead when every prefill
   instance already has ``mixed_overflow_outstanding`` prefills in flight;
3. ``POST``\\ s the prefill copy (``max_tokens: 1``, not streamed, ``kv_transfer_params:
   {do_remote_decode, transfer_id}``) and times it;
4. ``POST``\\ s the original request to the decode instance with ``kv_transfer_params: {do_remote_prefill,
   remote_bootstrap_addr, remote_engine_id, transfer_id}`` and streams its answer back, with
   ``x-instance: <prefill>-><decode>``;
5. appends one JSON line per request to ``request_log`` (keyed by the client's ``X-Request-Id``): the
   instances, prefill seconds, decode seconds, cached and estimated tokens, and how it ended.

A decode instance that cannot be reached or breaks its stream is marked down (probed every
``health_interval_s`` until it answers again) and new requests go to the others; its in-flight
requests end with an error naming it (``502`` before the stream started, an SSE error event after).

Overload (:mod:`systems.router.admission`, on by default): at most ``max_pending`` requests are held at
once (0: no bound); the next is answered ``429`` (error type ``overloaded``, distinct from the SLO
rejections' ``rejected``) before its body is read. Every upstream request has ``connect_timeout_s`` to
connect and ``upstream_timeout_s`` in total; past it the request ends with ``504`` (``prefill_timeout``
or ``decode_timeout``), or an SSE error event once the stream began. A timeout does not mark a decode
instance down (a slow instance is not a dead one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Optional

import aiohttp
from aiohttp import web

from systems.launch.ports import LOOPBACK
from systems.policies.cache_aware import BlockLRU
from systems.policies.hashing import block_hashes
from systems.policies.pd import PDScheduler
from systems.router.admission import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_PENDING,
    DEFAULT_UPSTREAM_TIMEOUT_S,
    Admission,
    client_timeout,
    overloaded_response,
    timeout_message,
)
from systems.router.conductor_view import ClusterState, Estimates, RouterPDView, least_loaded_decode
from systems.router.kv_events import KVEventIndex
from systems.router.pool_index import PoolIndex

logger = logging.getLogger(__name__)

HOST = LOOPBACK  # the address the router listens on unless told another (pd_cli's --host)
ROUTER_KEY = web.AppKey("pd_router", object)
_UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError)
_MAX_BODY_BYTES = 64 * 1024 * 1024
_SSE_DONE = b"data: [DONE]"  # how an OpenAI-compatible event stream ends; a stream without it was cut


@dataclass
class Instance:
    name: str
    url: str
    bootstrap: str = ""  # prefill: the bootstrap registry its worker registered with
    engine_id: str = ""


@dataclass
class RouterConfig:
    """Everything the router needs; written as JSON by the deployment (``python -m systems.router.pd``)."""

    prefill: list[Instance]
    decode: list[Instance]
    mixed: list[Instance] = field(default_factory=list)
    policy: str = "load_balancing"
    rejection: str = "none"
    decode_load_threshold: float = 1.0  # the decode pool is overloaded above this average TBT ratio
    ttft_slo_s: Optional[float] = None
    tbt_slo_s: Optional[float] = None
    kvcache_balancing_threshold: float = 2.0
    seed: int = 0
    block_size: int = 128
    mixed_overflow_outstanding: int = 2
    pool_master: str = ""  # mooncake_master address; empty: no pool
    pool_key_prefix: str = ""
    pool_protocol: str = "tcp"
    pool_query_timeout_s: float = 0.5
    estimates: Estimates = field(default_factory=Estimates)
    request_log: str = ""
    health_interval_s: float = 2.0
    local_cache: bool = True  # prefill instances keep a prefix cache (false: the router never assumes local hits)
    kv_events_port: int = 0  # > 0: the prefill instances publish KV-cache events to <router --host>:<port>
    kv_events_capacity_blocks: int = 0  # per prefill instance; 0: estimates.local_capacity_tokens // block_size
    max_pending: int = DEFAULT_MAX_PENDING  # requests held at once; beyond: 429 (0: no bound)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    upstream_timeout_s: float = DEFAULT_UPSTREAM_TIMEOUT_S  # total per upstream request; 0: none

    def event_index_capacity(self) -> int:
        """Blocks the KV-event index keeps per prefill instance: one instance's KV cache."""
        if self.kv_events_capacity_blocks > 0:
            return self.kv_events_capacity_blocks
        return max(1, self.estimates.local_capacity_tokens // self.block_size)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RouterConfig:
        data = dict(data)
        for role in ("prefill", "decode", "mixed"):
            data[role] = [Instance(**i) for i in data.get(role, [])]
        data["estimates"] = Estimates(**data.get("estimates", {}))
        cfg = cls(**data)
        if not cfg.prefill or not cfg.decode:
            raise ValueError("the disaggregating router needs at least one prefill and one decode instance")
        names = [i.name for i in cfg.prefill + cfg.decode + cfg.mixed]
        if len(set(names)) != len(names):
            raise ValueError(f"instance names must be unique, got {names}")
        if cfg.max_pending < 0:
            raise ValueError(f"max_pending must be >= 0 (0: no bound), got {cfg.max_pending}")
        client_timeout(cfg.connect_timeout_s, cfg.upstream_timeout_s)  # checks both
        return cfg


class PDRouter:
    """State and decisions of one disaggregating router (event-loop thread only)."""

    def __init__(self, cfg: RouterConfig, pool: Optional[PoolIndex] = None, events: Optional[KVEventIndex] = None,
                 hasher: Any = None) -> None:
        self.cfg = cfg
        self.state = ClusterState.create([p.name for p in cfg.prefill], [d.name for d in cfg.decode],
                                         cfg.estimates, cfg.block_size)
        self.events = events if cfg.local_cache else None
        self.hasher = hasher  # vLLM's block hashes of a prompt, to look them up in the events
        if self.events is not None:
            self.state.local_cache_source = "kv_events"
        self.scheduler = PDScheduler(cfg.policy, cfg.rejection, cfg.ttft_slo_s, cfg.tbt_slo_s,
                                     cfg.kvcache_balancing_threshold, cfg.seed, pick_decode=True,
                                     decode_load_threshold=cfg.decode_load_threshold)
        self.pool = pool
        self.mixed_outstanding = [0] * len(cfg.mixed)
        self.admission = Admission(cfg.max_pending)
        self.timeout = client_timeout(cfg.connect_timeout_s, cfg.upstream_timeout_s)
        self.counts: dict[str, int] = {"requests": 0, "rejected": 0, "to_mixed": 0, "prefill_errors": 0,
                                       "decode_errors": 0, "pool_queries": 0, "pool_query_timeouts": 0,
                                       "decode_marked_down": 0, "prefill_timeouts": 0, "decode_timeouts": 0}
        self.session: Optional[aiohttp.ClientSession] = None
        self._log = open(cfg.request_log, "a", encoding="utf-8") if cfg.request_log else None  # noqa: SIM115

    def close(self) -> None:
        if self._log is not None:
            self._log.close()

    def log_request(self, entry: dict[str, Any]) -> None:
        if self._log is not None:
            self._log.write(json.dumps(entry, separators=(",", ":")) + "\n")
            self._log.flush()

    async def pool_prefix_tokens(self, tokens: list[int], salt: str) -> int:
        if self.pool is None or self.cfg.policy != "conductor":
            return 0
        self.counts["pool_queries"] += 1
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(
                loop.run_in_executor(None, self.pool.cached_prefix_tokens, tokens, salt), self.cfg.pool_query_timeout_s)
        except TimeoutError:
            self.counts["pool_query_timeouts"] += 1
            return 0

    async def engine_id(self, inst: Instance) -> str:
        if not inst.engine_id:
            assert self.session is not None
            async with self.session.get(f"{inst.bootstrap}/query") as resp:
                data = await resp.json()
            entries = list(data.values())
            if not entries:
                raise RuntimeError(f"{inst.name}: no engine registered at {inst.bootstrap}")
            inst.engine_id = entries[0]["engine_id"]
        return inst.engine_id

    def mark_decode_down(self, index: int, reason: str) -> None:
        d = self.state.decode[index]
        if d.alive:
            d.alive = False
            self.counts["decode_marked_down"] += 1
            logger.warning("decode instance %s marked down: %s", d.name, reason)

    async def probe_decodes(self) -> None:
        """Bring decode instances marked down back once their ``/health`` answers."""
        assert self.session is not None
        while True:
            await asyncio.sleep(self.cfg.health_interval_s)
            for i, d in enumerate(self.state.decode):
                if d.alive:
                    continue
                with contextlib.suppress(*_UPSTREAM_ERRORS):
                    async with self.session.get(f"{self.cfg.decode[i].url}/health",
                                                timeout=aiohttp.ClientTimeout(total=2)) as resp:
                        if resp.status == 200:
                            d.alive = True
                            logger.info("decode instance %s is back", d.name)

    def stats(self) -> dict[str, Any]:
        est = self.state.estimates
        return {"policy": self.scheduler.describe(), "local_cache_source": self.state.local_cache_source,
                "kv_events": self.events.events if self.events is not None else 0,
                "kv_event_receiver": self.events.receiver_stats() if self.events is not None else None,
                "admission": self.admission.stats(),
                "pool": bool(self.pool), "counts": dict(self.counts),
                "pool_errors": self.pool.errors if self.pool is not None else 0,
                "decode_alive": {d.name: d.alive for d in self.state.decode},
                "estimates": {"prefill_s_per_token": est.prefill_s_per_token, "decode_step_s": est.decode_step_s}}


def _json_error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def _prefill_body(body: dict[str, Any], transfer_id: str) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "min_tokens")}
    out.update(max_tokens=1, stream=False, kv_transfer_params={"do_remote_decode": True, "transfer_id": transfer_id})
    return out


async def handle_completions(request: web.Request) -> web.StreamResponse:
    router: PDRouter = request.app[ROUTER_KEY]  # type: ignore[assignment]
    if not router.admission.try_enter():
        return overloaded_response(router.admission)
    try:
        return await _admitted(request, router)
    finally:
        router.admission.leave()


async def _admitted(request: web.Request, router: PDRouter) -> web.StreamResponse:
    t_arrive = time.monotonic()
    try:
        body = await request.json()
    except ValueError:
        return _json_error(400, "body is not JSON", "invalid_request")
    prompt = body.get("prompt") if isinstance(body, dict) else None
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        return _json_error(400, "the disaggregating router takes prompts as token-id lists", "invalid_request")
    router.counts["requests"] += 1
    rid = request.headers.get("X-Request-Id", str(router.counts["requests"]))
    salt = body.get("cache_salt") if isinstance(body.get("cache_salt"), str) else ""
    entry: dict[str, Any] = {"request_id": rid, "prompt_tokens": len(prompt), "tenant": salt}
    try:
        return await _route(request, router, body, prompt, salt, entry, t_arrive)
    finally:
        entry["total_s"] = time.monotonic() - t_arrive
        router.log_request(entry)


async def _route(request: web.Request, router: PDRouter, body: dict[str, Any], prompt: list[int], salt: str,
                 entry: dict[str, Any], t_arrive: float) -> web.StreamResponse:
    cfg, state = router.cfg, router.state
    if cfg.mixed and all(p.outstanding >= cfg.mixed_overflow_outstanding for p in state.prefill):
        k = min(range(len(cfg.mixed)), key=lambda j: router.mixed_outstanding[j])
        router.counts["to_mixed"] += 1
        entry.update(mode="mixed", instance=cfg.mixed[k].name)
        router.mixed_outstanding[k] += 1
        try:
            return await _stream(request, router, cfg.mixed[k], body, cfg.mixed[k].name, entry, None)
        finally:
            router.mixed_outstanding[k] -= 1

    hashes = block_hashes(prompt, cfg.block_size, salt)
    pool_tokens = await router.pool_prefix_tokens(prompt, salt)
    output_tokens = int(body.get("max_tokens") or 16)
    local_blocks = None
    if router.events is not None and router.hasher is not None:
        vllm_hashes = router.hasher.hashes(prompt, salt)
        names = [p.name for p in cfg.prefill]
        local_blocks = lambda i: router.events.prefix_blocks(names[i], vllm_hashes)  # noqa: E731
    view = RouterPDView(state, hashes, pool_tokens, output_tokens, local_blocks)
    decision = router.scheduler.choose(len(prompt), view)
    entry.update(mode="pd", pool_prefix_tokens=pool_tokens, est_ttft_s=decision.est_ttft_s,
                 reuse_tokens=decision.reuse_tokens, fetch_tokens=decision.fetch_tokens,
                 local_prefix_tokens=view.local_prefix_tokens(decision.prefill))
    if decision.reject:
        router.counts["rejected"] += 1
        entry["status"] = "rejected"
        return _json_error(429, f"rejected by the router: {decision.reject}", "rejected")
    d_index = decision.decode if decision.decode is not None else least_loaded_decode(state)
    if d_index is None:
        entry["status"] = "failed"
        return _json_error(503, "no decode instance is up", "unavailable")
    p_inst, d_inst = cfg.prefill[decision.prefill], cfg.decode[d_index]
    p_state, d_state = state.prefill[decision.prefill], state.decode[d_index]
    entry.update(prefill=p_inst.name, decode=d_inst.name)
    transfer_id = uuid.uuid4().hex
    entry["transfer_id"] = transfer_id
    computed = len(prompt) - decision.reuse_tokens
    work = view.prefill_time_s(decision.prefill, len(prompt), decision.reuse_tokens)

    # -- prefill ---------------------------------------------------------------------------------------
    p_state.outstanding += 1
    p_state.queued_work_s += work
    t0 = time.monotonic()
    assert router.session is not None
    try:
        async with router.session.post(f"{p_inst.url}/v1/completions", json=_prefill_body(body, transfer_id)) as resp:
            payload = await resp.read()
            if resp.status != 200:
                router.counts["prefill_errors"] += 1
                entry["status"] = "failed"
                text = payload.decode("utf-8", "replace")[:300]
                return _json_error(resp.status if resp.status >= 400 else 502,
                                   f"prefill instance {p_inst.name} answered HTTP {resp.status}: {text}", "prefill_failed")
            answer = json.loads(payload)
    except TimeoutError as exc:
        router.counts["prefill_timeouts"] += 1
        entry["status"] = "timeout"
        return _json_error(504, f"prefill instance {p_inst.name} ({p_inst.url}): {timeout_message(router.timeout, exc)}",
                           "prefill_timeout")
    except _UPSTREAM_ERRORS as exc:
        router.counts["prefill_errors"] += 1
        entry["status"] = "failed"
        return _json_error(502, f"prefill instance {p_inst.name} ({p_inst.url}) failed: {type(exc).__name__}: {exc}",
                           "prefill_failed")
    finally:
        p_state.outstanding -= 1
        p_state.queued_work_s = max(0.0, p_state.queued_work_s - work)
    prefill_s = time.monotonic() - t0
    details = (answer.get("usage") or {}).get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    state.estimates.observe_prefill(prefill_s, len(prompt) - cached)
    if cfg.local_cache:
        p_state.local.record(hashes)
    entry.update(prefill_s=prefill_s, prefill_cached_tokens=cached, queue_and_route_s=t0 - t_arrive,
                 computed_tokens_est=computed)

    # -- decode ----------------------------------------------------------------------------------------
    try:
        engine_id = await router.engine_id(p_inst)
    except (*_UPSTREAM_ERRORS, RuntimeError, ValueError) as exc:
        entry["status"] = "failed"
        return _json_error(502, f"cannot reach the bootstrap registry of {p_inst.name}: {exc}", "prefill_failed")
    kv = {"do_remote_prefill": True, "remote_bootstrap_addr": p_inst.bootstrap, "remote_engine_id": engine_id,
          "transfer_id": transfer_id}
    decode_body = dict(body, kv_transfer_params=kv)
    d_state.running += 1
    kv_tokens = len(prompt) + output_tokens
    d_state.kv_tokens += kv_tokens
    try:
        return await _stream(request, router, d_inst, decode_body, f"{p_inst.name}->{d_inst.name}", entry, d_index)
    finally:
        d_state.running -= 1
        d_state.kv_tokens -= kv_tokens


def _decode_failed(router: PDRouter, decode_index: Optional[int], entry: dict[str, Any], reason: str) -> str:
    """Count a failed decode hand-off, mark a decode instance down, log the request failed; returns ``reason``."""
    router.counts["decode_errors"] += 1
    if decode_index is not None:
        router.mark_decode_down(decode_index, reason)
    entry["status"] = "failed"
    return reason


async def _stream(request: web.Request, router: PDRouter, inst: Instance, body: dict[str, Any], label: str,
                  entry: dict[str, Any], decode_index: Optional[int]) -> web.StreamResponse:
    """Send ``body`` to ``inst`` and stream its answer back; a failure of a decode instance marks it down."""
    assert router.session is not None
    t0 = time.monotonic()
    try:
        upstream = await router.session.post(f"{inst.url}/v1/completions", json=body)
    except TimeoutError as exc:
        router.counts["decode_timeouts"] += 1
        entry["status"] = "timeout"
        return _json_error(504, f"instance {inst.name} ({inst.url}): {timeout_message(router.timeout, exc)}",
                           "decode_timeout")
    except _UPSTREAM_ERRORS as exc:
        reason = _decode_failed(router, decode_index, entry,
                                f"instance {inst.name} ({inst.url}) unreachable: {type(exc).__name__}: {exc}")
        return _json_error(502, reason, "decode_failed")
    resp = web.StreamResponse(status=upstream.status)
    resp.headers["Content-Type"] = upstream.headers.get("Content-Type", "application/json")
    resp.headers["x-instance"] = label
    first: Optional[float] = None
    events = 0
    sse = "text/event-stream" in resp.headers["Content-Type"]
    tail = b""  # the last bytes seen, to find the stream's closing "data: [DONE]" across chunk borders
    try:
        await resp.prepare(request)
        while True:
            try:
                chunk = await upstream.content.readany()
                if not chunk and sse and upstream.status == 200 and _SSE_DONE not in tail:
                    raise ConnectionError("the event stream ended before its closing event")
            except _UPSTREAM_ERRORS as exc:
                if isinstance(exc, TimeoutError):  # slow, not dead: counted, the instance stays up
                    router.counts["decode_timeouts"] += 1
                    entry["status"] = "timeout"
                    reason, kind = f"instance {inst.name}: {timeout_message(router.timeout, exc)}", "decode_timeout"
                else:
                    reason = _decode_failed(router, decode_index, entry,
                                            f"instance {inst.name} broke the stream: {type(exc).__name__}: {exc}")
                    kind = "decode_failed"
                message = json.dumps({"error": {"message": reason, "type": kind}})
                with contextlib.suppress(ConnectionError):
                    await resp.write(f"data: {message}\n\n".encode())
                if request.transport is not None:
                    request.transport.abort()
                return resp
            if not chunk:
                break
            if first is None:
                first = time.monotonic() - t0
            events += chunk.count(b"data: ")
            tail = (tail + chunk)[-64:]
            await resp.write(chunk)
        await resp.write_eof()
        if decode_index is not None and first is not None and events > 2:  # tokens + the final [DONE]
            tpot = (time.monotonic() - t0 - first) / (events - 2)
            router.state.estimates.observe_tpot(tpot, router.state.decode[decode_index].running)
        entry["status"] = "ok" if upstream.status == 200 else f"http_{upstream.status}"
        return resp
    finally:
        upstream.close()
        entry.update(decode_first_chunk_s=first, decode_s=time.monotonic() - t0)
        entry.setdefault("status", "client_gone")


async def handle_reset(request: web.Request) -> web.Response:
    """``POST /reset``: forget what the prefill instances hold (the harness resets their caches between points)."""
    router: PDRouter = request.app[ROUTER_KEY]  # type: ignore[assignment]
    for p in router.state.prefill:
        p.local = BlockLRU(p.local.capacity)
    return web.json_response({"status": "ok"})


async def handle_health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def handle_stats(request: web.Request) -> web.Response:
    router: PDRouter = request.app[ROUTER_KEY]  # type: ignore[assignment]
    return web.json_response(router.stats())


async def handle_models(request: web.Request) -> web.Response:
    router: PDRouter = request.app[ROUTER_KEY]  # type: ignore[assignment]
    assert router.session is not None
    async with router.session.get(f"{router.cfg.decode[0].url}/v1/models") as upstream:
        return web.Response(body=await upstream.read(), status=upstream.status, content_type="application/json")


def create_app(router: PDRouter) -> web.Application:
    """The router's aiohttp application (``/v1/completions``, ``/v1/models``, ``/health``, ``/stats``)."""
    app = web.Application(client_max_size=_MAX_BODY_BYTES)
    app[ROUTER_KEY] = router

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        # each admitted request holds at most one upstream connection at a time
        connector = aiohttp.TCPConnector(limit=router.cfg.max_pending or DEFAULT_MAX_PENDING, limit_per_host=0,
                                         keepalive_timeout=4.0)
        async with aiohttp.ClientSession(connector=connector, timeout=router.timeout, trust_env=False) as session:
            router.session = session
            prober = asyncio.create_task(router.probe_decodes())
            yield
            prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prober
        router.close()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/v1/completions", handle_completions)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/stats", handle_stats)
    app.router.add_post("/reset", handle_reset)
    return app
