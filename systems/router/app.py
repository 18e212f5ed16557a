"""The router's aiohttp application: :func:`create_app` builds it, :func:`start_router` serves it on the
node's address (127.0.0.1 by default)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Optional

import aiohttp
from aiohttp import web

from systems.launch.ports import LOOPBACK, check_host
from systems.policies import RoutingPolicy
from systems.router.admission import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_PENDING,
    DEFAULT_UPSTREAM_TIMEOUT_S,
    client_timeout,
)
from systems.router.proxy import (
    SESSION_KEY,
    STATE_KEY,
    handle_generate,
    handle_health,
    handle_metrics,
    handle_models,
    handle_stats,
)
from systems.router.state import Backend, RouterState, to_backends

__all__ = ["HOST", "create_app", "start_router"]

logger = logging.getLogger(__name__)

HOST = LOOPBACK  # the address the router listens on unless told another (start_router's host)
DEFAULT_BLOCK_SIZE = 128  # vLLM's KV block size on CPU
_MAX_BODY_BYTES = 64 * 1024 * 1024  # long token-id prompts are large JSON


def create_app(
    backends: Iterable[Backend | str] | Mapping[str, str],
    policy: RoutingPolicy,
    *,
    block_size: Optional[int] = None,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    keepalive_timeout_s: float = 4.0,
    max_connections: Optional[int] = None,
    max_pending: int = DEFAULT_MAX_PENDING,
    upstream_timeout_s: Optional[float] = DEFAULT_UPSTREAM_TIMEOUT_S,
) -> web.Application:
    """A router application in front of ``backends`` (``Backend``s, ``NAME=URL`` strings or ``{name: url}``).

    ``block_size`` (tokens per hashed block) defaults to the policy's ``block_size`` when it has one,
    else 128. ``keepalive_timeout_s`` stays below uvicorn's 5 s so the router never reuses a connection
    the backend is closing. Overload (:mod:`systems.router.admission`): at most ``max_pending`` requests
    are held at once (0: no bound; beyond it ``429``); upstream requests get ``connect_timeout_s`` to
    connect and ``upstream_timeout_s`` in total (None or 0: no limit; beyond it ``504``).
    ``max_connections`` (upstream connection pool; default ``max_pending``, or 4096 when unbounded):
    admitted requests beyond it wait for a free connection.
    """
    backend_list = to_backends(backends)
    size = block_size if block_size is not None else getattr(policy, "block_size", DEFAULT_BLOCK_SIZE)
    timeout = client_timeout(connect_timeout_s, upstream_timeout_s)
    if max_connections is None:
        max_connections = max_pending or DEFAULT_MAX_PENDING
    if max_connections <= 0:
        raise ValueError(f"max_connections must be positive, got {max_connections}")
    app = web.Application(client_max_size=_MAX_BODY_BYTES)
    app[STATE_KEY] = RouterState(backend_list, policy, size, max_pending)

    async def client_session(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, keepalive_timeout=keepalive_timeout_s, use_dns_cache=True
        )
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, trust_env=False, auto_decompress=False
        ) as session:
            app[SESSION_KEY] = session
            yield

    app.cleanup_ctx.append(client_session)
    app.router.add_post("/v1/completions", handle_generate)
    app.router.add_post("/v1/chat/completions", handle_generate)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/stats", handle_stats)
    return app


async def start_router(
    app: web.Application, port: int = 0, shutdown_timeout_s: float = 2.0, host: str = HOST
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (127.0.0.1 by default; port 0: any free port); returns the runner and
    the bound port. ``host`` is the address of the node the router runs on (``ValueError`` if it is not an
    address or a host name).

    ``await runner.cleanup()`` stops it, giving in-flight requests ``shutdown_timeout_s`` to finish. A
    client disconnect cancels its handler, which closes the backend request.
    """
    check_host(host, "router host")
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, shutdown_timeout=shutdown_timeout_s
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    state = app[STATE_KEY]
    logger.info(
        "router on http://%s:%d, policy %s, backends %s",
        host,
        bound,
        state.policy.describe(),
        ", ".join(f"{b.name}={b.url}" for b in state.backends),
    )
    return runner, bound
