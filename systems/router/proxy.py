"""Request handlers: route a generation request, forward its original bytes, stream the answer back.

For ``POST /v1/completions`` and ``POST /v1/chat/completions`` the router

1. reads the body and derives a :class:`~systems.policies.RouteRequest` (:mod:`systems.router.prompt`);
   only when the policy ``needs_prompt``: otherwise the request carries no hashes and 0 tokens;
2. asks the policy through :class:`~systems.router.state.RouterState` (counted outstanding from here);
3. POSTs the *unchanged* bytes to the chosen backend over the app's one shared ``ClientSession``,
   forwarding ``Content-Type``, ``Accept``, ``Authorization`` and ``X-Request-Id``;
4. answers with the backend's status, ``Content-Type`` and ``Content-Encoding`` plus ``x-instance``, and
   writes every chunk as soon as it arrives (no buffering);
5. in every case (normal end, backend error, client disconnect, cancellation) ends the request in the
   state, which decrements the outstanding count and calls the policy's ``on_finished``.

Overload (:mod:`systems.router.admission`): a request beyond the router's ``max_pending`` is answered
``429`` (JSON error type ``overloaded``) before its body is read.

Failure behaviour: a backend that cannot be reached (or drops the connection before answering; one retry
for a stale keep-alive connection) gives ``502`` with a JSON error naming it; one that does not answer
within the connect or total upstream timeout gives ``504`` (JSON error type ``upstream_timeout``). A backend that breaks the
stream (or runs past the total timeout) after the response started makes the router abort the client connection, so the client sees a
truncated response rather than a clean end. A client that disconnects makes the router close the
backend connection, so the engine can abort the request.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from aiohttp import web

from systems.policies import RouteRequest
from systems.router.admission import overloaded_response, timeout_message
from systems.router.metrics import render_metrics
from systems.router.prompt import route_request_from_body
from systems.router.state import Backend, RouterState

__all__ = ["SESSION_KEY", "STATE_KEY", "handle_generate", "handle_health", "handle_metrics", "handle_models",
           "handle_stats"]

logger = logging.getLogger(__name__)

STATE_KEY = web.AppKey("router_state", RouterState)
SESSION_KEY = web.AppKey("router_session", aiohttp.ClientSession)

_FORWARD_REQUEST_HEADERS = ("Content-Type", "Accept", "Authorization", "X-Request-Id")
_FORWARD_RESPONSE_HEADERS = ("Content-Type", "Content-Encoding", "X-Request-Id")
_UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


def _json_error(status: int, message: str, kind: str, backend: Backend | None = None) -> web.Response:
    error: dict[str, object] = {"message": message, "type": kind, "code": status}
    headers = {}
    if backend is not None:
        error["backend"] = backend.name
        headers["x-instance"] = backend.name
    return web.json_response({"error": error}, status=status, headers=headers)


def _gateway_timeout(backend: Backend, session: aiohttp.ClientSession, exc: BaseException) -> web.Response:
    message = f"backend {backend.name!r} ({backend.url}): {timeout_message(session.timeout, exc)}"
    logger.warning("%s", message)
    return _json_error(504, message, "upstream_timeout", backend)


def _bad_gateway(backend: Backend, exc: BaseException) -> web.Response:
    message = f"backend {backend.name!r} ({backend.url}) failed: {type(exc).__name__}: {exc}"
    logger.warning("%s", message)
    return _json_error(502, message, "bad_gateway", backend)


async def _open_upstream(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> aiohttp.ClientResponse:
    try:
        return await session.post(url, data=body, headers=headers)
    except aiohttp.ServerDisconnectedError:
        # most likely a keep-alive connection the backend had just closed: try once on a new one
        return await session.post(url, data=body, headers=headers)


async def handle_generate(request: web.Request) -> web.StreamResponse:
    """Route one generation request and stream the backend's answer back."""
    state = request.app[STATE_KEY]
    if not state.admission.try_enter():
        return overloaded_response(state.admission)
    try:
        body = await request.read()
        rid = state.next_request_id()
        if state.policy.needs_prompt:
            req = route_request_from_body(body, rid, state.block_size)
        else:  # the policy only looks at load: skip parsing and hashing the prompt
            req = RouteRequest(rid, (), 0)
        index = state.begin(req)
        try:
            return await _forward(request, state, index, body)
        finally:
            state.end(req, index)
    finally:
        state.admission.leave()


async def _forward(request: web.Request, state: RouterState, index: int, body: bytes) -> web.StreamResponse:
    backend = state.backends[index]
    in_headers = request.headers
    headers = {h: in_headers[h] for h in _FORWARD_REQUEST_HEADERS if h in in_headers}
    headers.setdefault("Content-Type", "application/json")
    session = request.app[SESSION_KEY]
    try:
        upstream = await _open_upstream(session, backend.url + request.rel_url.path_qs, body, headers)
    except TimeoutError as exc:  # connect or total timeout (aiohttp's timeout errors are TimeoutErrors)
        state.upstream_timeouts[index] += 1
        return _gateway_timeout(backend, session, exc)
    except _UPSTREAM_ERRORS as exc:
        state.backend_errors[index] += 1
        return _bad_gateway(backend, exc)

    complete = False
    resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    try:
        up_headers = upstream.headers
        for h in _FORWARD_RESPONSE_HEADERS:
            if h in up_headers:
                resp.headers[h] = up_headers[h]
        resp.headers["x-instance"] = backend.name
        if upstream.content_length is not None:
            resp.content_length = upstream.content_length
        await resp.prepare(request)
        content = upstream.content
        while True:
            try:
                chunk = await content.readany()
            except TimeoutError as exc:
                state.upstream_timeouts[index] += 1
                logger.warning("backend %r: %s; the client connection is cut", backend.name,
                               timeout_message(session.timeout, exc))
                _abort_client(request)
                return resp
            except _UPSTREAM_ERRORS as exc:
                state.backend_errors[index] += 1
                logger.warning("backend %r broke the stream: %s: %s", backend.name, type(exc).__name__, exc)
                _abort_client(request)
                return resp
            if not chunk:
                break
            await resp.write(chunk)
        await resp.write_eof()
        complete = True
        return resp
    except ConnectionError:  # writing to a client that went away (without handler cancellation)
        state.client_disconnects[index] += 1
        logger.debug("client went away during a response from %r", backend.name)
        return resp
    except asyncio.CancelledError:  # the client disconnected (handler cancellation) or shutdown
        state.client_disconnects[index] += 1
        raise
    finally:
        if complete:
            upstream.release()
        else:
            upstream.close()  # drop the backend connection so the engine sees the abort


def _abort_client(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


async def handle_models(request: web.Request) -> web.Response:
    """``GET /v1/models``, proxied to the first backend."""
    state = request.app[STATE_KEY]
    backend = state.backends[0]
    try:
        async with request.app[SESSION_KEY].get(backend.url + request.rel_url.path_qs) as upstream:
            payload = await upstream.read()
            resp = web.Response(body=payload, status=upstream.status)
            if "Content-Type" in upstream.headers:
                resp.headers["Content-Type"] = upstream.headers["Content-Type"]
    except _UPSTREAM_ERRORS as exc:
        return _bad_gateway(backend, exc)
    resp.headers["x-instance"] = backend.name
    return resp


async def handle_health(request: web.Request) -> web.Response:
    """``GET /health``: 200 while the router runs (it does not probe the backends)."""
    state = request.app[STATE_KEY]
    return web.json_response({"status": "ok", "policy": state.policy.name, "backends": len(state.backends)})


async def handle_stats(request: web.Request) -> web.Response:
    """``GET /stats``: admission (overload) counters and per-backend counters as JSON."""
    state = request.app[STATE_KEY]
    per_backend = {
        b.name: {"routed": state.routed[i], "outstanding": state.outstanding[i],
                 "backend_errors": state.backend_errors[i], "upstream_timeouts": state.upstream_timeouts[i],
                 "client_disconnects": state.client_disconnects[i]}
        for i, b in enumerate(state.backends)
    }
    return web.json_response({"policy": state.policy.name, "admission": state.admission.stats(),
                              "backends": per_backend})


async def handle_metrics(request: web.Request) -> web.Response:
    """``GET /metrics`` in the Prometheus text format."""
    return web.Response(
        text=render_metrics(request.app[STATE_KEY]), content_type="text/plain", charset="utf-8"
    )
