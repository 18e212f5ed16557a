"""The hash of a job's resolved config, kept in ``summary.json`` as ``config_hash``: a sweep run again
skips a job whose folder holds an ``ok`` summary with the same hash (:mod:`harness.sweep.resume`).

The hash covers everything that can change a job's results. Left out: where results go and how they are
published or shown (``results_dir``, ``overwrite``, ``dry_run``, ``logger``, ``figures``, every ``progress`` flag).
It is SHA-256 over the config as canonical JSON (sorted keys), so key order and YAML formatting do not
matter, and the secrets the config may hold are never written out by it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

IGNORED_TOP_LEVEL = frozenset({"results_dir", "overwrite", "dry_run", "logger", "figures", "_run"})
IGNORED_ANYWHERE = frozenset({"progress"})


def _strip(value: Any, top: bool) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _strip(v, False) for k, v in value.items()
                if str(k) not in IGNORED_ANYWHERE and not (top and str(k) in IGNORED_TOP_LEVEL)}
    if isinstance(value, list | tuple):
        return [_strip(v, False) for v in value]
    return value


def config_hash(resolved: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the resolved config (a plain mapping, e.g. ``OmegaConf.to_container(resolve=True)``)."""
    canonical = json.dumps(_strip(resolved, True), sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
