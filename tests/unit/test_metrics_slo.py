"""SLOConfig validation, SLO scaling and its use as a Hydra structured-config schema."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from harness.metrics import request_frame, slo_mask
from harness.slo import SLOConfig
from vocab.records import RequestRecord, RequestStatus


@pytest.mark.parametrize("key", ["ttft_ms", "tpot_ms", "tbt_ms", "e2e_ms"])
@pytest.mark.parametrize("value", [-1, 0, float("nan")])
def test_bounds_must_be_positive(key: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"^slo\.{key}: must be > 0, got"):
        SLOConfig(**{key: value})


def test_error_message_names_key_and_value() -> None:
    with pytest.raises(ValueError) as err:
        SLOConfig(ttft_ms=-1)
    assert str(err.value) == "slo.ttft_ms: must be > 0, got -1"


def test_bound_must_be_a_number() -> None:
    with pytest.raises(ValueError, match=r"slo\.tpot_ms: must be a number"):
        SLOConfig(tpot_ms="fast")  # type: ignore[arg-type]


@pytest.mark.parametrize("target", [0, -0.1, 1.01])
def test_attainment_target_range(target: float) -> None:
    with pytest.raises(ValueError, match=r"slo\.attainment_target: must be in \(0, 1\]"):
        SLOConfig(attainment_target=target)


def test_valid_configs() -> None:
    assert SLOConfig(attainment_target=1.0).attainment_target == 1.0
    slo = SLOConfig(name="x", ttft_ms=250, tpot_ms=100)
    assert slo.bounds == {"ttft_ms": 250.0, "tpot_ms": 100.0}
    assert not slo.is_empty and SLOConfig().is_empty


def test_scaled_multiplies_every_bound() -> None:
    slo = SLOConfig(name="chat", ttft_ms=250, tpot_ms=100, e2e_ms=1000, attainment_target=0.9)
    half = slo.scaled(0.5)
    assert (half.ttft_ms, half.tpot_ms, half.e2e_ms, half.tbt_ms) == (125.0, 50.0, 500.0, None)
    assert half.attainment_target == 0.9
    assert half.name == "chat@0.5x"
    assert slo.ttft_ms == 250  # the original is unchanged


@pytest.mark.parametrize("factor", [0, -1, float("inf"), float("nan")])
def test_scaled_rejects_bad_factor(factor: float) -> None:
    with pytest.raises(ValueError, match="scale factor"):
        SLOConfig(ttft_ms=1).scaled(factor)


def test_scaling_changes_attainment() -> None:
    r = RequestRecord(0, RequestStatus.OK, 0.0, 0.0, 0.2, 0.2, 10, 1, 1, (0.2,))
    frame = request_frame([r])
    slo = SLOConfig(ttft_ms=150)
    assert slo_mask(frame, slo).tolist() == [False]
    assert slo_mask(frame, slo.scaled(2)).tolist() == [True]


def test_structured_config_schema() -> None:
    base = OmegaConf.structured(SLOConfig)
    merged = OmegaConf.merge(base, {"name": "d", "ttft_ms": 250, "tpot_ms": 100})
    slo = OmegaConf.to_object(merged)
    assert isinstance(slo, SLOConfig)
    assert slo.ttft_ms == 250.0 and slo.tbt_ms is None
    # OmegaConf nodes work in slo_mask too (bounds are read by attribute)
    r = RequestRecord(0, RequestStatus.OK, 0.0, 0.0, 0.3, 0.3, 10, 1, 1, (0.3,))
    assert slo_mask(request_frame([r]), merged).tolist() == [False]
    with pytest.raises(Exception, match="ttft_ms"):
        OmegaConf.to_object(OmegaConf.merge(base, {"ttft_ms": -5}))
