"""``engine=endpoint``: replay workloads against an OpenAI-compatible service that is already running
(for example a multi-node deployment started elsewhere), with the suite's load generator and records.
Its ``/metrics`` is scraped when reachable (vLLM's prefix-cache counters)."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from systems.contract import DeploymentConfig, DeploymentError, EngineResult, JobFolder, LoadDriver
from systems.deployments.http_point import run_http_point, scrape
from systems.engine_config import EndpointEngineConfig
from systems.launch.processes import http_get
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)


class EndpointDeployment:
    """A service the suite does not own: checked at start, never started or stopped."""

    def __init__(self, cfg: DeploymentConfig, folder: JobFolder, driver: LoadDriver) -> None:
        self.cfg = cfg
        self.engine: EndpointEngineConfig = cfg.engine
        self.driver = driver
        self.base_url = self.engine.url.rstrip("/")
        self.metrics_url = self.engine.metrics_url or f"{self.base_url}/metrics"
        self.kv_block_size = int(self.engine.kv_block_size)
        self.context_limit: int | None = int(cfg.model.max_model_len)
        self.model = self.engine.model
        self.api_key = os.environ.get(self.engine.api_key_env) if self.engine.api_key_env else None
        self.metrics_reachable = False

    def _models(self) -> list[dict[str, Any]]:
        try:
            status, body = http_get(f"{self.base_url}/v1/models", timeout_s=10.0)
        except OSError as exc:
            raise DeploymentError(f"engine.url={self.base_url}: not reachable ({exc})") from exc
        if status != 200:
            raise DeploymentError(f"engine.url={self.base_url}: GET /v1/models answered HTTP {status}")
        return list(json.loads(body).get("data", []))

    def __enter__(self) -> EndpointDeployment:
        models = self._models()
        if self.model is None:
            if not models:
                raise DeploymentError(f"{self.base_url}/v1/models lists no model; set engine.model")
            self.model = str(models[0]["id"])
        served = {str(m.get("id")): m for m in models}
        if self.model in served and served[self.model].get("max_model_len"):
            self.context_limit = int(served[self.model]["max_model_len"])
        self.metrics_reachable = scrape(self.metrics_url) is not None
        log.info("endpoint %s: model %s, context %s tokens, /metrics %s", self.base_url, self.model,
                 self.context_limit, "scraped" if self.metrics_reachable else "not reachable")
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def run_point(self, requests: WorkloadRequests, folder: JobFolder) -> EngineResult:
        metrics = {"endpoint": self.metrics_url} if self.metrics_reachable else {}
        return run_http_point(self.driver, requests, self.base_url, metrics, n_gpus=int(self.engine.n_gpus),
                              served_model=str(self.model), api_key=self.api_key)

    def check_health(self) -> None:
        self._models()

    def describe(self) -> dict[str, Any]:
        return {"url": self.base_url, "model": self.model, "metrics_url": self.metrics_url,
                "metrics_reachable": self.metrics_reachable}
