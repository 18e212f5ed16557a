"""peer_agreement's pure helpers: peer discovery, the peers' input formats, one latency definition on both sides."""

from __future__ import annotations

import csv
import io
import marshal
import sys

import numpy as np
import pytest

from benchmarks import peer_agreement
from benchmarks.peers import distserve as ds
from benchmarks.peers import splitwise as sw
from benchmarks.peers.common import (
    compare_latencies,
    latency_stats,
    locate_peer,
    max_abs_diff,
    missing_modules,
    record_latencies,
    relative_diff,
    tpot_ms,
)
from vocab.records import RequestRecord, RequestSpec, RequestStatus

SPECS = [RequestSpec(0, 0.5, 100, 1), RequestSpec(1, 0.75, 200, 10), RequestSpec(2, 2.0, 300, 3)]


def test_locate_peer_from_path_env_or_nowhere(tmp_path, monkeypatch):
    monkeypatch.delenv("PEER_TEST_DIR", raising=False)
    (tmp_path / "simdistserve").mkdir()
    (tmp_path / "simdistserve" / "marker.py").write_text("")
    found = locate_peer("x", str(tmp_path), "PEER_TEST_DIR", ["simdistserve/marker.py"], sys.executable)
    assert found.found and found.root == tmp_path.resolve()
    monkeypatch.setenv("PEER_TEST_DIR", str(tmp_path))
    assert locate_peer("x", None, "PEER_TEST_DIR", ["simdistserve/marker.py"], sys.executable).found
    wrong = locate_peer("x", str(tmp_path), "PEER_TEST_DIR", ["run.py"], sys.executable)
    assert not wrong.found and "not a x checkout: no run.py" in wrong.reason
    monkeypatch.delenv("PEER_TEST_DIR")
    absent = locate_peer("x", None, "PEER_TEST_DIR", ["run.py"], sys.executable)
    assert not absent.found and "not installed" in absent.reason


@pytest.mark.integration
def test_missing_modules():
    assert missing_modules(sys.executable, ["json", "no_such_module_xyz"]) == ["no_such_module_xyz"]
    assert missing_modules("/no/such/python", ["json"]) == ["json"]


@pytest.mark.integration
def test_absent_peers_are_reported_and_the_script_exits_0(monkeypatch, capsys):
    for var in ("SIMDISTSERVE_DIR", "SPLITWISE_SIM_DIR"):
        monkeypatch.delenv(var, raising=False)
    assert peer_agreement.main(["--peer-python", sys.executable]) == 0
    out = capsys.readouterr().out
    assert out.count("nothing compared") == 2 and "docs/peers.md" in out
    assert "git clone https://github.com/LLMServe/DistServe" in out and "Mutinifni/splitwise-sim" in out


def test_simdistserve_inputs_same_work_and_as_recorded():
    assert [ds.peer_output_len(n, "same_work") for n in (1, 10)] == [0, 9]
    assert ds.peer_output_len(10, "as_recorded") == 10
    with pytest.raises(ValueError, match="same_work, as_recorded"):
        ds.peer_output_len(3, "exact")
    wl = ds.simdistserve_workload(SPECS)
    assert wl[1] == {"start_time": 0.75, "prompt_len": 200, "output_len": 9}
    data = marshal.loads(ds.sharegpt_ds(SPECS, "as_recorded"))
    assert data["reqs"] == [("", 100, 1), ("", 200, 10), ("", 300, 3)]
    assert ds.config_label([1, 2, 1, 1, 2]) == "P tp2pp1 + D tp1pp2"


def test_simdistserve_latencies_in_spec_order():
    out = {"req_id": [2, 0, 1], "first_token_latency": [30.0, 10.0, 20.0], "decoding_latency": [20.0, 0.0, 90.0],
           "total_latency": [50.0, 10.0, 110.0]}
    lat = ds.peer_latencies(out, SPECS, "same_work")
    np.testing.assert_allclose(lat["ttft_ms"], [10.0, 20.0, 30.0])
    np.testing.assert_allclose(lat["e2e_ms"], [10.0, 110.0, 50.0])
    assert np.isnan(lat["tpot_ms"][0]) and lat["tpot_ms"][1] == pytest.approx(10.0) and lat["tpot_ms"][2] == 10.0


def test_splitwise_trace_and_latencies():
    rows = list(csv.DictReader(io.StringIO(sw.trace_csv(SPECS))))
    assert tuple(rows[0]) == sw.TRACE_COLUMNS
    assert [float(r["arrival_timestamp"]) for r in rows] == [1.0, 1.25, 2.5]  # first at ARRIVAL_OFFSET_S
    assert rows[1]["prompt_size"] == "200" and rows[1]["token_size"] == "10" and rows[1]["request_type"] == "2"
    lat = sw.peer_latencies([{"request_ids": 1.0, "ttft_times": 0.1, "response_times": 1.0, "token_sizes": 10.0},
                             {"request_ids": 0.0, "ttft_times": 0.2, "response_times": 0.2, "token_sizes": 1.0}])
    assert list(lat["request_id"]) == [0, 1] and np.isnan(lat["tpot_ms"][0])
    assert lat["tpot_ms"][1] == pytest.approx(100.0)  # 900 ms over 9 decode steps
    overrides = sw.peer_overrides(4, "h100_80gb", "llama2_70b")
    assert "cluster.servers.1.count=4" in overrides and "cluster.servers.0.count=0" in overrides
    assert "applications.0.model_architecture=llama2-70b" in overrides


def test_our_latencies_use_the_suite_definition():
    recs = [RequestRecord(1, RequestStatus.OK, 1.0, 1.0, 1.2, 2.1, 50, 10, 10),
            RequestRecord(0, RequestStatus.OK, 0.0, 0.0, 0.1, 0.1, 50, 1, 1),
            RequestRecord(2, RequestStatus.FAILED, 0.0, 0.0, 0.0, 0.0, 50, 1, 0)]
    lat = record_latencies(recs)
    assert list(lat["request_id"]) == [0, 1]
    np.testing.assert_allclose(lat["ttft_ms"], [100.0, 200.0])
    assert np.isnan(lat["tpot_ms"][0]) and lat["tpot_ms"][1] == pytest.approx(100.0)


def test_statistics_and_comparison():
    stats = latency_stats(np.array([1.0, 2.0, 3.0, np.nan]))
    assert stats["mean"] == 2.0 and stats["p50"] == 2.0
    assert np.isnan(latency_stats(np.array([np.nan]))["p90"])
    assert relative_diff(11.0, 10.0) == pytest.approx(0.1) and np.isnan(relative_diff(1.0, 0.0))
    np.testing.assert_allclose(tpot_ms(np.array([0.0, 0.0]), np.array([10.0, 10.0]), np.array([0, 5])), [np.nan, 2.0])
    lat = {"ttft_ms": np.array([10.0, 20.0]), "tpot_ms": np.array([1.0, 2.0]), "e2e_ms": np.array([100.0, 200.0])}
    rows = compare_latencies(lat, {k: v * 2 for k, v in lat.items()})
    assert len(rows) == 12 and all(r["diff"] == pytest.approx(-0.5) for r in rows)
    assert max_abs_diff(rows) == pytest.approx(0.5)


def test_placement_layouts_side_by_side():
    import pandas as pd

    assert ds.peer_layout([2, 1, 1, 2, 1]) == (1, 2, 2, 2)  # pp_cross multiplies both pipelines
    table = pd.DataFrame([{"prefill_tp": 2, "prefill_pp": 1, "decode_tp": 1, "decode_pp": 1, "per_gpu_rate": 1.09,
                           "status": "searched"},
                          {"prefill_tp": 4, "prefill_pp": 1, "decode_tp": 1, "decode_pp": 1, "per_gpu_rate": None,
                           "status": "skipped"}])
    ours = ds.our_layout_rates(table)
    assert ours == {(2, 1, 1, 1): 1.09}
    assert ds.our_layout_rates(pd.DataFrame({"phase": ["prefill"]})) == {}
    rows = ds.layout_rows(ours, [([1, 2, 1, 1, 1], 1.09375), ([1, 2, 1, 1, 2], 1.5625)])
    assert rows == [("P tp2pp1 + D tp1pp1", 1.09, 1.09375), ("P tp2pp1 + D tp1pp2", None, 1.5625)]
