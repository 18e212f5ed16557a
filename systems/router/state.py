"""The router's cluster state: its backends, per-backend counters, and the policy it drives.

This is the router's side of the policy contract (:mod:`systems.policies.base`): :meth:`RouterState.begin`
asks the policy, counts the request as outstanding and calls ``on_routed``; :meth:`RouterState.end`
undoes the count and calls ``on_finished``. Everything runs on the event loop thread, so plain ints do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from systems.policies import InstanceLoad, RouteRequest, RoutingPolicy
from systems.router.admission import DEFAULT_MAX_PENDING, Admission

__all__ = ["Backend", "RouterState", "parse_backend", "to_backends"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backend:
    """One OpenAI-compatible server: a name (reported in ``x-instance``) and its base URL (no trailing slash)."""

    name: str
    url: str

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"backend {self.name!r}: URL must look like http://host:port, got {self.url!r}")
        if not self.name:
            raise ValueError(f"backend at {self.url}: empty name")
        object.__setattr__(self, "url", self.url.rstrip("/"))


def parse_backend(spec: str) -> Backend:
    """``"name=http://127.0.0.1:8001"`` -> :class:`Backend`."""
    name, sep, url = spec.partition("=")
    if not sep:
        raise ValueError(f"backend must be NAME=URL (e.g. b0=http://127.0.0.1:8001), got {spec!r}")
    return Backend(name.strip(), url.strip())


def to_backends(backends: Iterable[Backend | str] | Mapping[str, str]) -> tuple[Backend, ...]:
    """Normalise backends given as :class:`Backend`s, ``NAME=URL`` strings or a ``{name: url}`` mapping."""
    if isinstance(backends, Mapping):
        out = tuple(Backend(name, url) for name, url in backends.items())
    else:
        out = tuple(b if isinstance(b, Backend) else parse_backend(b) for b in backends)
    if not out:
        raise ValueError("the router needs at least one backend")
    names = [b.name for b in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate backend names: {', '.join(dupes)}")
    return out


class RouterState:
    """Backends, per-backend counters and the routing policy of one router."""

    def __init__(self, backends: Sequence[Backend], policy: RoutingPolicy, block_size: int,
                 max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.backends = tuple(backends)
        self.policy = policy
        self.block_size = block_size
        n = len(self.backends)
        self.outstanding = [0] * n  # requests in flight
        self.routed = [0] * n  # requests routed (total)
        self.backend_errors = [0] * n  # unreachable backend or stream broken by the backend
        self.client_disconnects = [0] * n  # client went away before the stream ended
        self.upstream_timeouts = [0] * n  # the backend did not answer within the connect or total timeout
        self.admission = Admission(max_pending)  # the bound on requests held at once (429 beyond it)
        self._next_id = 0

    def next_request_id(self) -> int:
        """A fresh request id (per router, starting at 0)."""
        rid = self._next_id
        self._next_id += 1
        return rid

    def loads(self) -> list[InstanceLoad]:
        """The view a policy decides on."""
        return [InstanceLoad(b.name, o) for b, o in zip(self.backends, self.outstanding, strict=True)]

    def begin(self, req: RouteRequest) -> int:
        """Choose a backend for ``req`` and count it as routed and outstanding there."""
        index = self.policy.choose(req, self.loads())
        if not 0 <= index < len(self.backends):
            raise RuntimeError(
                f"policy {self.policy.name} chose index {index} of {len(self.backends)} backends"
            )
        self.outstanding[index] += 1
        self.routed[index] += 1
        self.policy.on_routed(req, index)
        return index

    def end(self, req: RouteRequest, index: int) -> None:
        """``req`` finished on backend ``index`` (however it ended)."""
        self.outstanding[index] -= 1
        self.policy.on_finished(req, index)
