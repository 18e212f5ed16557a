"""The hardware catalog: every conf/hardware YAML loads and validates; bad names and values are rejected."""

from __future__ import annotations

import shutil

import pytest

from systems.config import HardwareConfig
from systems.hardware_catalog import CONF_DIR, known_hardware, load_hardware
from vocab.errors import ConfigError

REQUIRED = {"a100_80gb", "h100_80gb", "h100_80gb_pcap", "h200", "a800_80gb", "h800_80gb", "a40", "l40", "cpu_host"}


def test_catalog_has_the_required_parts():
    assert set(known_hardware()) >= REQUIRED


@pytest.mark.parametrize("name", known_hardware())
def test_every_yaml_loads_and_validates(name):
    hw = load_hardware(name)
    assert isinstance(hw, HardwareConfig)
    assert hw.name == name
    if hw.kind == "gpu":
        assert hw.power_w and hw.interconnect_gbps, f"{name}: GPUs need power_w and interconnect_gbps"
        assert 0 < hw.compute_efficiency <= 1 and 0 < hw.memory_efficiency <= 1


def test_every_gpu_yaml_cites_its_numbers():
    for path in (CONF_DIR / "hardware").glob("*.yaml"):
        text = path.read_text()
        if "kind: gpu" in text:
            assert "data sheet" in text.lower(), f"{path.name} does not cite a data sheet"
            assert "calibrated" in text.lower(), f"{path.name} does not say where its efficiencies come from"


def test_derived_parts_match_their_base():
    a100, a800 = load_hardware("a100_80gb"), load_hardware("a800_80gb")
    h100, h800, pcap = load_hardware("h100_80gb"), load_hardware("h800_80gb"), load_hardware("h100_80gb_pcap")
    assert a800.interconnect_gbps == h800.interconnect_gbps == 400
    assert a800.peak_tflops_bf16 == a100.peak_tflops_bf16 and h800.peak_tflops_bf16 == h100.peak_tflops_bf16
    assert pcap.power_w == pytest.approx(0.7 * h100.power_w)
    assert pcap.compute_efficiency == pytest.approx(h100.compute_efficiency / 1.3, rel=0.01)
    assert a100.price_per_hour_usd == pytest.approx(17.6 / 8) and h100.price_per_hour_usd == pytest.approx(38 / 8)


def test_unknown_hardware_lists_the_known_names():
    with pytest.raises(ValueError) as info:
        load_hardware("tpu_v9")
    assert "tpu_v9" in str(info.value)
    for name in ("a100_80gb", "h100_80gb", "l40"):
        assert name in str(info.value)


@pytest.fixture
def conf_copy(tmp_path):
    shutil.copytree(CONF_DIR / "hardware", tmp_path / "hardware")
    return tmp_path


def test_bad_value_names_the_key(conf_copy):
    path = conf_copy / "hardware" / "a100_80gb.yaml"
    path.write_text(path.read_text().replace("compute_efficiency: 0.6", "compute_efficiency: 1.6"))
    with pytest.raises(ValueError, match=r"hardware\.compute_efficiency"):
        load_hardware("a100_80gb", conf_dir=conf_copy)


def test_unknown_key_is_rejected(conf_copy):
    path = conf_copy / "hardware" / "a100_80gb.yaml"
    path.write_text(path.read_text() + "no_such_key: 3\n")
    with pytest.raises(ValueError, match="no_such_key"):
        load_hardware("a100_80gb", conf_dir=conf_copy)


def test_file_name_and_name_must_agree(conf_copy):
    shutil.copy(conf_copy / "hardware" / "a100_80gb.yaml", conf_copy / "hardware" / "other.yaml")
    with pytest.raises(ValueError, match="hardware.name"):
        load_hardware("other", conf_dir=conf_copy)


@pytest.mark.parametrize("key,value", [("memory_efficiency", 0.0), ("interconnect_gbps", -1.0),
                                       ("allreduce_latency_us", -1.0), ("price_per_hour_usd", 0.0)])
def test_schema_checks_name_the_key(key, value):
    base = dict(name="x", peak_tflops_bf16=1.0, mem_bandwidth_gbps=1.0, mem_gib=1.0)
    with pytest.raises(ConfigError, match=rf"hardware\.{key}"):
        HardwareConfig(**base, **{key: value})
