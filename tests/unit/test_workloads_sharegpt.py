"""ShareGPT length loader: DistServe's filters on the shipped table, the seeded sample, malformed files."""

from __future__ import annotations

import pytest

from workloads.config import ShareGPTLengthsConfig
from workloads.errors import TraceFormatError, WorkloadConfigError
from workloads.registry import build_workload
from workloads.sharegpt_lengths import load_sharegpt_lengths, read_length_rows

FILE = "sharegpt_lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
HEADER = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio"


def _write(tmp_path, rows, header=HEADER):
    path = tmp_path / "lengths.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def test_shipped_table_filtered_to_opt_context(shared_traces):
    loaded = load_sharegpt_lengths(shared_traces / FILE, sample_seed=None)
    stats = loaded.stats
    # SOURCES.md: 30,731 rows, 14,561 with prompt + output < 2,048 (prompt mean 606, output mean 395)
    assert (stats["n_rows"], stats["n_kept_rows"]) == (30731, 14561)
    assert stats["n_dropped_too_long"] == 30731 - 14561 and stats["n_dropped_too_short"] == 0
    assert all(s.input_length + s.output_length < 2048 for s in loaded.specs)
    assert stats["kept_input_len_mean"] == pytest.approx(606.1, abs=0.1)


def test_filters_and_seeded_sample(tmp_path):
    path = _write(tmp_path, ["100,50,150,2", "2000,48,2048,41", "3,2,5,1.5", "3,9,12,0.3", "700,300,1000,2.3"])
    kept = load_sharegpt_lengths(path, block_size=16, sample_seed=None)
    assert [(s.input_length, s.output_length) for s in kept.specs] == [(100, 50), (3, 9), (700, 300)]
    assert (kept.stats["n_dropped_too_long"], kept.stats["n_dropped_too_short"]) == (1, 1)
    assert [len(s.hash_ids) for s in kept.specs] == [7, 1, 44]  # ceil(prompt / 16), never shared
    assert len({h for s in kept.specs for h in s.hash_ids}) == 52
    a = load_sharegpt_lengths(path, sample_seed=3)
    b = load_sharegpt_lengths(path, sample_seed=3)
    assert [s.input_length for s in a.specs] == [s.input_length for s in b.specs]
    assert sorted(s.input_length for s in a.specs) == [3, 100, 700]
    everything = load_sharegpt_lengths(path, max_total_tokens=None, min_tokens=0, sample_seed=None)
    assert len(everything.specs) == 5


def test_workload_samples_the_first_n_of_a_seeded_shuffle(shared_traces):
    cfg = {"name": "s", "kind": "sharegpt_lengths", "file": FILE, "max_requests": 50,
           "arrival": {"kind": "poisson", "rate_rps": 2.0}}
    first = build_workload(cfg, data_dir=str(shared_traces)).requests()
    more = build_workload({**cfg, "max_requests": 100}, data_dir=str(shared_traces)).requests()
    assert [s.input_length for s in more.specs[:50]] == [s.input_length for s in first.specs]
    in_order = build_workload({**cfg, "sample_seed": None}, data_dir=str(shared_traces)).requests()
    assert [s.input_length for s in in_order.specs] != [s.input_length for s in first.specs]
    assert first.stats["kind"] == "sharegpt_lengths" and first.schedule.mode == "open"


@pytest.mark.parametrize(("rows", "header", "field"), [
    (["1,2,3,4"], "a,b,c", "header"),
    (["x,2,3,4"], HEADER, "num_prefill_tokens"),
    (["5,0,5,0"], HEADER, "num_decode_tokens"),
    (["5"], HEADER, "row"),
    ([], HEADER, "row"),
])
def test_malformed_tables_name_the_line_and_field(tmp_path, rows, header, field):
    with pytest.raises(TraceFormatError) as info:
        read_length_rows(_write(tmp_path, rows, header))
    assert info.value.field == field


def test_config_rejects_bad_values_naming_the_key():
    with pytest.raises(WorkloadConfigError, match=r"^workload.max_total_tokens"):
        ShareGPTLengthsConfig(name="s", kind="sharegpt_lengths", file="f", max_total_tokens=1)
    with pytest.raises(WorkloadConfigError, match=r"^workload.arrival.kind: 'trace' needs trace timestamps"):
        build_workload({"name": "s", "kind": "sharegpt_lengths", "file": "f", "arrival": {"kind": "trace"}})
