"""A roofline performance model: FLOPs and bytes of one iteration against the hardware's achievable peaks.

Per iteration on an instance of ``n = tp * pp`` GPUs (bf16 weights, ``P`` parameters):

- FLOPs: ``2 * P`` per token through the linear layers, plus attention: ``4 * layers * heads * head_dim``
  per (query, key) pair. A prefill batch has about ``sum_sq_tokens / 2`` pairs under the causal mask;
  a decode step has ``sum_context`` pairs.
- Bytes: the weights once per iteration, plus the KV cache read by decode (``sum_context`` tokens)
  and written by every new token.
- Time: ``max(t_compute, t_memory) + (1 - overlap) * min(...)`` where ``t_compute = FLOPs / (peak *
  compute_efficiency * n)`` (attention's FLOPs at ``attention_efficiency``: the constructor's, else the
  hardware's, else ``compute_efficiency``) and ``t_memory = bytes / (bandwidth * memory_efficiency * n)``
  (``overlap = 1``, the default, is the plain roofline), plus tensor-parallel communication, plus the
  hardware's fixed ``iteration_overhead_ms``.
- TP: two all-reduces per layer of ``tokens * hidden * 2`` bytes each, as a ring
  (``2 (tp-1)/tp`` of the bytes over one direction of the interconnect, i.e. ``interconnect_gbps / 2``
  at ``interconnect_efficiency``), plus ``allreduce_latency_us * log2(tp)`` each.
- PP (DistServe's assumption): the returned time is one pipeline stage's time, i.e. the instance's
  throughput interval: the work is divided over all ``tp * pp`` GPUs, each stage runs ``layers / pp``
  layers' all-reduces, and a stage adds one point-to-point send of the activations. The latency of one
  batch through the whole pipeline is about ``pp`` times this; DistServe's simulator makes the same
  simplification (prefill ``time / pp``).
- KV capacity: ``(mem_gib * n * gpu_memory_utilization - weights - activation_reserve_gib * n) /
  kv_bytes_per_token``; a model whose weights do not fit raises ``ValueError``.

The efficiency factors live in ``conf/hardware/*.yaml`` and were calibrated against public profiles
(``python -m benchmarks.perf_model_accuracy``).
"""

from __future__ import annotations

import logging
import math
import types
from typing import Optional

import numpy as np

from systems.config import HardwareConfig, ModelConfig
from systems.sim.perf.base import SCALAR_SEGMENT_MAX, ArrayLike, InstanceShape, ShapedPerfModel
from systems.sim.perf.roofline_steps import (
    RooflineKernel,
    roofline_mixed_s,
    roofline_prefill_s,
    roofline_segment_ends,
)

logger = logging.getLogger(__name__)

# whether the decode-stretch loop is the compiled core's (systems.compiled_core): compiled, it times longer
# stretches than from its Python source before NumPy's arrays are cheaper (their fixed cost per call, several
# microseconds, against tens of nanoseconds a step for the loop's floats and the timeline's copy of them:
# python -m benchmarks.stretch_timing_bench). The floats are the same either way
# (tests/unit/test_sim_scale_constant.py)
STRETCH_LOOP_COMPILED = not isinstance(roofline_segment_ends, types.FunctionType)
COMPILED_SEGMENT_MAX = 192
LOOP_SEGMENT_MAX = COMPILED_SEGMENT_MAX if STRETCH_LOOP_COMPILED else SCALAR_SEGMENT_MAX  # longest stretch the loop times

GIB = 1024**3
WEIGHT_BYTES_PER_PARAM = 2  # bf16


def weight_bytes(model: ModelConfig) -> float:
    """Bytes of the model's bf16 weights."""
    return model.params_billion * 1e9 * WEIGHT_BYTES_PER_PARAM


def check_shape(model: ModelConfig, hw: HardwareConfig, shape: InstanceShape) -> None:
    """Reject layouts the engines cannot run (names the offending value)."""
    if shape.hardware != hw.name:
        raise ValueError(f"instance shape names hardware {shape.hardware!r} but the hardware config is {hw.name!r}")
    if shape.tp < 1 or shape.pp < 1:
        raise ValueError(f"tp and pp must be >= 1, got tp={shape.tp} pp={shape.pp}")
    if model.num_attention_heads % shape.tp:
        raise ValueError(f"tp={shape.tp} does not divide the {model.num_attention_heads} attention heads of "
                         f"model {model.name}")
    if shape.pp > model.num_layers:
        raise ValueError(f"pp={shape.pp} exceeds the {model.num_layers} layers of model {model.name}")


def kv_capacity_tokens_for(model: ModelConfig, hw: HardwareConfig, shape: InstanceShape,
                           gpu_memory_utilization: float = 0.9, activation_reserve_gib: float = 1.5) -> int:
    """KV-cache tokens an instance holds: memory budget less weights and activations, over KV bytes/token.

    Raises ``ValueError`` naming model, weights, tp, pp and hardware when the weights do not fit.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    n = shape.n_gpus
    weights = weight_bytes(model)
    usable = hw.mem_gib * GIB * n * gpu_memory_utilization - weights - activation_reserve_gib * GIB * n
    if usable <= 0:
        raise ValueError(
            f"model {model.name} ({weights / 1e9:.0f} GB of bf16 weights) does not fit tp={shape.tp} "
            f"pp={shape.pp} on {hw.name} ({hw.mem_gib:g} GiB x {n} at gpu_memory_utilization "
            f"{gpu_memory_utilization:g}, less {activation_reserve_gib:g} GiB per GPU for activations)")
    tokens = int(usable // model.kv_bytes_per_token)
    if tokens < model.max_model_len:
        logger.warning("model %s on %s tp=%d pp=%d: KV capacity %d tokens is below max_model_len %d",
                       model.name, hw.name, shape.tp, shape.pp, tokens, model.max_model_len)
    return tokens


class RooflineModel(ShapedPerfModel):
    """Analytical model from the hardware catalog's peaks and efficiencies (see the module docstring)."""

    name = "roofline"

    def __init__(self, model: ModelConfig, hw: HardwareConfig, shape: InstanceShape,
                 gpu_memory_utilization: float = 0.9, activation_reserve_gib: float = 1.5,
                 overlap: float = 1.0, attention_efficiency: Optional[float] = None,
                 iteration_overhead_ms: Optional[float] = None) -> None:
        check_shape(model, hw, shape)
        if not 0 <= overlap <= 1:
            raise ValueError(f"overlap must be in [0, 1], got {overlap}")
        if attention_efficiency is not None and not 0 < attention_efficiency <= 1:
            raise ValueError(f"attention_efficiency must be in (0, 1], got {attention_efficiency}")
        super().__init__(model, hw, shape)
        self.overlap = float(overlap)
        self._kv_bytes = model.kv_bytes_per_token
        self._kv_capacity = kv_capacity_tokens_for(model, hw, shape, gpu_memory_utilization, activation_reserve_gib)
        n, tp, pp = shape.n_gpus, shape.tp, shape.pp
        flop_rate = hw.peak_tflops_bf16 * 1e12 * hw.compute_efficiency * n
        attn_rate = hw.peak_tflops_bf16 * 1e12 * (attention_efficiency or hw.attention_efficiency
                                                   or hw.compute_efficiency) * n
        byte_rate = hw.mem_bandwidth_gbps * 1e9 * hw.memory_efficiency * n
        d_attn = model.num_attention_heads * model.head_dim
        self._t_weights = weight_bytes(model) / byte_rate
        self._t_flop_token = 2 * model.params_billion * 1e9 / flop_rate
        self._t_attn_sq = 2 * model.num_layers * d_attn / attn_rate  # 4*L*d per pair, sum_sq/2 causal pairs
        self._t_attn_ctx = 4 * model.num_layers * d_attn / attn_rate
        self._t_kv_token = self._kv_bytes / byte_rate
        overhead_ms = hw.iteration_overhead_ms if iteration_overhead_ms is None else iteration_overhead_ms
        self._overhead = overhead_ms / 1e3
        act_bytes = model.hidden_size * WEIGHT_BYTES_PER_PARAM  # one token's activations, bf16
        self._comm_fixed = 0.0
        self._comm_token = 0.0
        if tp > 1 or pp > 1:
            if hw.interconnect_gbps is None:
                raise ValueError(f"hardware {hw.name} has no interconnect_gbps; tp={tp} pp={pp} needs it")
            link = hw.interconnect_gbps / 2 * 1e9 * hw.interconnect_efficiency  # one direction
            lat = hw.allreduce_latency_us / 1e6
            if tp > 1:
                n_ar = 2 * model.num_layers / pp
                self._comm_fixed += n_ar * lat * math.log2(tp)
                self._comm_token += n_ar * act_bytes * 2 * (tp - 1) / tp / link
            if pp > 1:
                self._comm_fixed += lat
                self._comm_token += act_bytes / link
        # terms that add exactly 0.0 to a positive time are skipped (the result is the same float)
        self._full_overlap = self.overlap == 1.0
        self._no_comm = self._comm_fixed == 0.0 and self._comm_token == 0.0
        # the coefficients of a decode stretch, in roofline_segment_ends' order after (b, c, n, now); the
        # prefill and mixed iterations' functions take them after attn_sq
        self._stretch = (self._t_attn_ctx, self._t_kv_token, self._t_weights, self._overhead, self._t_flop_token,
                         1.0 - self.overlap, self._comm_fixed, self._comm_token, self._full_overlap, self._no_comm)

    def _combine(self, compute, memory, tokens):
        """``max + (1 - overlap) * min + comm_fixed + comm_token * tokens + overhead``, left to right."""
        if isinstance(compute, np.ndarray) or isinstance(memory, np.ndarray):
            t = np.maximum(compute, memory)
            if not self._full_overlap:
                t = t + (1.0 - self.overlap) * np.minimum(compute, memory)
        else:
            t = max(compute, memory)
            if not self._full_overlap:
                t = t + (1.0 - self.overlap) * min(compute, memory)
        if not self._no_comm:
            t = t + self._comm_fixed + self._comm_token * tokens
        return t + self._overhead

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        # _combine's arithmetic on floats (roofline_steps: compiled with the simulator's core); float() of an
        # integer is the conversion Python makes when it multiplies one by a float
        return roofline_prefill_s(float(sum_tokens), float(sum_sq_tokens), self._t_attn_sq, *self._stretch)

    def decode_step_time_s(self, batch_size: ArrayLike, sum_context: ArrayLike) -> ArrayLike:
        if isinstance(sum_context, np.ndarray) and not isinstance(batch_size, np.ndarray):
            # one batch size over a stretch of steps (the simulator's decode segments): the batch stays a
            # Python float (the same double arithmetic as a 0-d array, without converting it)
            # Python float (the same double arithmetic as a 0-d array), and new arrays updated in place (a + b
            # and b + a are the same float)
            b = float(batch_size)
            ctx = sum_context if sum_context.dtype == np.float64 else np.asarray(sum_context, dtype=float)
            compute = ctx * self._t_attn_ctx
            compute += b * self._t_flop_token
            memory = ctx + b
            memory *= self._t_kv_token
            memory += self._t_weights
            if self._full_overlap and self._no_comm:
                np.maximum(compute, memory, out=compute)
                compute += self._overhead
                return compute
            return self._combine(compute, memory, b)
        if isinstance(batch_size, np.ndarray) or isinstance(sum_context, np.ndarray):
            batch_size = np.asarray(batch_size, dtype=float)
            sum_context = np.asarray(sum_context, dtype=float)
        compute = batch_size * self._t_flop_token + sum_context * self._t_attn_ctx
        memory = self._t_weights + (sum_context + batch_size) * self._t_kv_token
        return self._combine(compute, memory, batch_size)

    def decode_segment_ends(self, batch_size: int, context: int, n: int, now: float) -> list[float] | np.ndarray:
        # PerfModel's, with the stretches the loop times (one step too: the same doubles as now +
        # decode_step_time_s, see roofline_steps) straight to it
        if n > LOOP_SEGMENT_MAX:
            return super().decode_segment_ends(batch_size, context, n, now)
        return roofline_segment_ends(float(batch_size), float(context), n, now, *self._stretch)

    def _segment_ends(self, batch_size: int, context: int, n: int, now: float) -> list[float] | None:
        # the array path above, one float at a time (roofline_steps; ctx and ctx + b are integers below 2**53:
        # exact)
        return roofline_segment_ends(float(batch_size), float(context), n, now, *self._stretch)

    def kernel(self) -> RooflineKernel:
        # a new one each time: nothing compiled is kept in the model (it is pickled to worker processes)
        return RooflineKernel(self._t_attn_sq, *self._stretch, LOOP_SEGMENT_MAX)

    def decode_monotone_in_context(self) -> bool:
        # the context enters compute and memory with non-negative factors; max, min, and adding
        # (1 - overlap) >= 0 times the smaller keep the order
        return self._t_attn_ctx >= 0 and self._t_kv_token >= 0 and 0 <= self.overlap <= 1

    def mixed_step_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int,
                          batch_size: int, sum_context: float) -> float:
        """Prefill chunks and decodes in one iteration: weights read once, FLOPs and KV traffic added."""
        return roofline_mixed_s(float(sum_tokens), float(sum_sq_tokens), float(batch_size), float(sum_context),
                                self._t_attn_sq, *self._stretch)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "hardware": self.hw.name, "tp": self.shape.tp, "pp": self.shape.pp,
                "overlap": self.overlap, "weights_time_s": self._t_weights,
                "pp_assumption": "per-stage (throughput) time, DistServe-style"}
