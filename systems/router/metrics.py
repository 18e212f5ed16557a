"""Prometheus text exposition of the router's counters (``GET /metrics``)."""

from __future__ import annotations

from systems.router.state import RouterState

__all__ = ["render_metrics"]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(state: RouterState) -> str:
    """The text format (version 0.0.4) of every router metric."""
    lines: list[str] = []
    per_backend = (
        ("router_requests_routed_total", "counter", "Requests routed to each backend.", state.routed),
        ("router_requests_outstanding", "gauge", "Requests in flight on each backend.", state.outstanding),
        (
            "router_backend_errors_total",
            "counter",
            "Requests that failed because the backend was unreachable or broke the stream.",
            state.backend_errors,
        ),
        (
            "router_upstream_timeouts_total",
            "counter",
            "Requests whose backend did not answer within the connect or total upstream timeout.",
            state.upstream_timeouts,
        ),
        (
            "router_client_disconnects_total",
            "counter",
            "Requests whose client went away before the response ended.",
            state.client_disconnects,
        ),
    )
    for metric, kind, help_text, values in per_backend:
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} {kind}")
        for backend, value in zip(state.backends, values, strict=True):
            lines.append(f'{metric}{{backend="{_label(backend.name)}"}} {value}')
    admission = state.admission
    lines.append("# HELP router_requests_pending Requests the router holds (bounded by max_pending).")
    lines.append("# TYPE router_requests_pending gauge")
    lines.append(f"router_requests_pending {admission.pending}")
    lines.append("# HELP router_overload_rejections_total Requests answered 429 because max_pending was reached.")
    lines.append("# TYPE router_overload_rejections_total counter")
    lines.append(f"router_overload_rejections_total {admission.rejected}")
    policy = state.policy
    lines.append("# HELP router_policy_info The routing policy in use (value is always 1).")
    lines.append("# TYPE router_policy_info gauge")
    lines.append(
        f'router_policy_info{{policy="{_label(policy.name)}",source_of_truth="{_label(policy.source_of_truth)}",'
        f'block_size="{state.block_size}"}} 1'
    )
    return "\n".join(lines) + "\n"
