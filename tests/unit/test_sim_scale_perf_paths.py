"""The performance models' fast paths (issue #14 item 4) give the very floats of the formulas they shortcut,
and the models that claim a step time non-decreasing in the context keep that claim."""

from __future__ import annotations

import numpy as np
import pytest

from systems.hardware_catalog import load_hardware
from systems.sim.perf.base import InstanceShape
from systems.sim.perf.profiles import SPLITWISE_CSV, find_profile
from systems.sim.perf.roofline import RooflineModel
from systems.sim.perf.splitwise_profile import SplitwiseProfileModel, _interp
from tests.unit.test_sim_perf_roofline import load_model


def _roofline_reference(m: RooflineModel, batch, context):
    """The roofline decode step exactly as written before the fast paths: every term, left to right."""
    if isinstance(batch, np.ndarray) or isinstance(context, np.ndarray):
        batch, context = np.asarray(batch, dtype=float), np.asarray(context, dtype=float)
    compute = batch * m._t_flop_token + context * m._t_attn_ctx
    memory = m._t_weights + (context + batch) * m._t_kv_token
    if isinstance(compute, np.ndarray) or isinstance(memory, np.ndarray):
        hi, lo = np.maximum(compute, memory), np.minimum(compute, memory)
    else:
        hi, lo = max(compute, memory), min(compute, memory)
    return hi + (1.0 - m.overlap) * lo + m._comm_fixed + m._comm_token * batch + m._overhead


@pytest.mark.parametrize("model,hardware,tp", [("llama3_8b", "a100_80gb", 1), ("llama3_1_70b", "a800_80gb", 8)])
@pytest.mark.parametrize("overlap", [1.0, 0.4])
def test_roofline_fast_paths_give_the_same_floats(model: str, hardware: str, tp: int, overlap: float) -> None:
    m = RooflineModel(load_model(model), load_hardware(hardware), InstanceShape(hardware, tp), overlap=overlap)
    assert m.decode_monotone_in_context()
    rng = np.random.default_rng(0)
    for _ in range(300):
        b, c, n = int(rng.integers(1, 600)), int(rng.integers(0, 2_000_000)), int(rng.integers(2, 200))
        ctx = np.arange(c, c + b * n, b, dtype=np.float64)  # a decode segment's contexts
        assert np.array_equal(m.decode_step_time_s(b, ctx), _roofline_reference(m, b, ctx))
        assert m.decode_step_time_s(b, c) == _roofline_reference(m, b, c)
        tokens = int(rng.integers(1, 30_000))
        compute = tokens * m._t_flop_token + float(tokens) ** 2 * m._t_attn_sq
        memory = m._t_weights + tokens * m._t_kv_token
        hi, lo = max(compute, memory), min(compute, memory)
        want = hi + (1.0 - m.overlap) * lo + m._comm_fixed + m._comm_token * tokens + m._overhead
        assert m.prefill_time_s(tokens, float(tokens) ** 2) == want
        steps = m.decode_step_time_s(b, ctx)  # ... and never decreasing in the context
        assert np.all(np.diff(steps) >= 0)


def test_splitwise_memos_return_what_the_interpolation_computes() -> None:
    profiles_dir = str(find_profile(SPLITWISE_CSV)).removesuffix(SPLITWISE_CSV)
    m = SplitwiseProfileModel(load_model("llama2_70b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 8),
                              profiles_dir=profiles_dir)
    g = m.grid
    rng = np.random.default_rng(1)
    for _ in range(2):  # the second round reads the memos
        for tokens in (1, 7, 100, 2048, 2048.0, 8191, 100_000):
            assert m.prefill_time_s(tokens) == max(_interp(tokens, g.prefill_tokens, g.prefill_ms), 0.0) / 1e3
        for b in (1, 3, 64, 512):
            ctx = np.arange(5000, 5000 + b * 50, b, dtype=np.float64) + float(rng.integers(0, 1000))
            base = _interp(b, g.decode_batch, g.decode_ms) - g.context_slope_ms * b * g.context_ref
            assert np.array_equal(m.decode_step_time_s(b, ctx), np.maximum(base + g.context_slope_ms * ctx, 0.0) / 1e3)
    assert m.decode_monotone_in_context() == (g.context_slope_ms >= 0)
