"""An HTTP router in front of OpenAI-compatible backends, driving a routing policy from systems.policies."""

from systems.router.app import HOST, create_app, start_router
from systems.router.metrics import render_metrics
from systems.router.prompt import TEXT_BYTES_PER_TOKEN, route_request_from_body, route_request_from_json
from systems.router.state import Backend, RouterState, parse_backend, to_backends

__all__ = [
    "HOST",
    "TEXT_BYTES_PER_TOKEN",
    "Backend",
    "RouterState",
    "create_app",
    "parse_backend",
    "render_metrics",
    "route_request_from_body",
    "route_request_from_json",
    "start_router",
    "to_backends",
]
