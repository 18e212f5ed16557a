"""KV connectors the suite loads into vLLM processes (``kv_connector_module_path``), and nothing else.

vLLM imports this module inside each engine process when a server is started with
``{"kv_connector": "SuiteMooncakeConnector", "kv_connector_module_path": "systems.launch.kv_connectors"}``.
It never runs in the harness process and never edits vLLM's files.

``SuiteMooncakeConnector`` is vLLM's own ``MooncakeConnector`` with two additions:

* **CPU hosts.** ``MooncakeConnectorWorker`` asks ``torch.accelerator.current_device_index()``, which
  raises on a host without an accelerator. When no accelerator is present the call is answered with 0
  (device 0 is what the CPU platform uses everywhere else); on GPU hosts nothing is changed.
* **Per-request transfer log.** vLLM aggregates Mooncake transfer statistics per step, without request
  ids. When ``DISAGG_KV_TRANSFER_LOG`` names a file, the prefill side appends one JSON line per batch of
  blocks it writes to a decode instance: ``{"t": wall time, "transfer_ids": [...], "duration_s",
  "bytes", "blocks": [...], "ok"}``. ``transfer_id`` is the id the suite's proxy sends with both halves
  of a request, so the router can attribute the KV transfer time and bytes to the request.

``SuiteMultiConnector`` is vLLM's ``MultiConnector`` (the pool connector and the P/D connector on one
instance) with two fixes for combining ``MooncakeConnector`` with another connector in vLLM 0.32:

* loading it through this module imports the module in the API-server process too, where
  ``MultiConnector`` rebuilds its children's statistics by looking their names up in vLLM's connector
  registry (importing this module registers ``SuiteMooncakeConnector`` there);
* ``MooncakeConnector`` has no Prometheus metrics yet, and ``MultiConnector``'s metrics assert that every
  child reporting statistics has them, which kills the API server after the first P/D transfer; the
  suite's version skips children without Prometheus metrics.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake import mooncake_connector as _mc
from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import (
    MultiConnector,
    MultiKVConnectorPromMetrics,
)

logger = logging.getLogger(__name__)

TRANSFER_LOG_ENV = "DISAGG_KV_TRANSFER_LOG"


def _accelerator_missing() -> bool:
    try:
        return not torch.accelerator.is_available()
    except Exception:  # older torch without torch.accelerator.is_available
        return True


def _answer_device_zero_without_accelerator() -> None:
    """Make ``torch.accelerator.current_device_index()`` return 0 on hosts that have no accelerator."""
    if not _accelerator_missing() or getattr(torch.accelerator, "_disagg_cpu_patch", False):
        return
    torch.accelerator.current_device_index = lambda: 0  # type: ignore[assignment]
    torch.accelerator._disagg_cpu_patch = True  # type: ignore[attr-defined]
    logger.info("no accelerator: torch.accelerator.current_device_index() answers 0 for the Mooncake worker")


class _TransferLog:
    """Appends one JSON line per block batch to the file named by ``DISAGG_KV_TRANSFER_LOG``."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._lock, open(self._path, "a", encoding="utf-8") as fh:
            fh.write(line)


def _n_blocks(block_ids: Any) -> int:
    """Blocks of one request (vLLM keeps one id list per KV-cache group; the first group counts)."""
    if block_ids and isinstance(block_ids[0], list | tuple):
        return len(block_ids[0])
    return len(block_ids)


class SuiteMooncakeConnectorWorker(_mc.MooncakeConnectorWorker):
    """The Mooncake worker, logging which transfer ids each block batch carried."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        path = os.environ.get(TRANSFER_LOG_ENV)
        self._transfer_log = _TransferLog(path) if path else None
        self._batch_ids: dict[int, tuple[list[str], list[int]]] = {}

    async def _build_transfer_params(self, ready_reqs, *args: Any, **kwargs: Any):  # type: ignore[override]
        result = await super()._build_transfer_params(ready_reqs, *args, **kwargs)
        if self._transfer_log is not None and result[0]:
            ids = [meta.transfer_id for _, meta in ready_reqs]
            blocks = [_n_blocks(meta.local_block_ids) for _, meta in ready_reqs]
            self._batch_ids[id(result[0])] = (ids, blocks)
        return result

    def _send_blocks(self, remote_session: str, src_ptrs: list[int], dst_ptrs: list[int],
                     lengths: list[int]) -> int:
        start = time.perf_counter()
        ret = super()._send_blocks(remote_session, src_ptrs, dst_ptrs, lengths)
        duration = time.perf_counter() - start
        if self._transfer_log is not None:
            ids, blocks = self._batch_ids.pop(id(src_ptrs), ([], []))
            self._transfer_log.write({"t": time.time(), "transfer_ids": ids, "blocks": blocks,
                                      "duration_s": duration, "bytes": int(sum(lengths)), "ok": ret == 0})
        return ret


class SuiteMooncakeConnector(_mc.MooncakeConnector):
    """vLLM's ``MooncakeConnector``, runnable on CPU hosts, with a per-request transfer log."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        _answer_device_zero_without_accelerator()
        original = _mc.MooncakeConnectorWorker
        _mc.MooncakeConnectorWorker = SuiteMooncakeConnectorWorker  # type: ignore[misc]
        try:
            super().__init__(vllm_config, role, kv_cache_config)
        finally:
            _mc.MooncakeConnectorWorker = original  # type: ignore[misc]


class _MultiPromMetricsSkippingUnsupported(MultiKVConnectorPromMetrics):
    """``MultiConnector``'s Prometheus metrics, ignoring children that have none."""

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for connector_id, stats_data in transfer_stats_data.items():
            prom = self._prom_metrics.get(connector_id)
            if prom is not None:
                prom.observe(stats_data, engine_idx)


class SuiteMultiConnector(MultiConnector):
    """vLLM's ``MultiConnector``; see the module docstring for what differs."""

    @classmethod
    def build_prom_metrics(cls, vllm_config: Any, metric_types: Any, labelnames: Any,
                           per_engine_labelvalues: Any) -> Any:
        base = super().build_prom_metrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        return _MultiPromMetricsSkippingUnsupported(vllm_config, metric_types, labelnames, per_engine_labelvalues,
                                                    base._prom_metrics)


def _register() -> None:
    if "SuiteMooncakeConnector" not in KVConnectorFactory._registry:
        KVConnectorFactory.register_connector("SuiteMooncakeConnector", __name__, "SuiteMooncakeConnector")


_register()
