"""An HTTP router in front of OpenAI-compatible backends, driving a routing policy from systems.policies.

The names below are exported lazily (PEP 562): importing a submodule such as
``systems.router.conductor_view`` (the simulator's configs do) does not import the aiohttp app.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "HOST": "systems.router.app",
    "create_app": "systems.router.app",
    "start_router": "systems.router.app",
    "render_metrics": "systems.router.metrics",
    "TEXT_BYTES_PER_TOKEN": "systems.router.prompt",
    "route_request_from_body": "systems.router.prompt",
    "route_request_from_json": "systems.router.prompt",
    "Backend": "systems.router.state",
    "RouterState": "systems.router.state",
    "parse_backend": "systems.router.state",
    "to_backends": "systems.router.state",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'systems.router' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
