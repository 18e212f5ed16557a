"""The narrow interface every performance model implements, and the instance shape it is built for.

Times are seconds. A *prefill* iteration computes a batch of prompt chunks: ``sum_tokens`` new tokens
in ``n_seqs`` sequences, where a chunk of ``c`` new tokens after ``p`` tokens already in the KV cache
(a prefix-cache hit or an earlier chunk) contributes ``c`` to ``sum_tokens`` and ``(p + c)**2 - p**2``
to ``sum_sq_tokens`` (the attention term: summed over a prompt's chunks it telescopes to ``len**2``).
A *decode* step generates one token for each of ``batch_size`` sequences whose contexts sum to
``sum_context`` tokens. Decode functions accept NumPy arrays (same shape) and return an array then:
the simulator evaluates whole stretches of decode-only steps at once (:meth:`PerfModel.decode_segment_ends`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional

import numpy as np

from systems.config import HardwareConfig, ModelConfig
from systems.sim.perf.roofline_steps import RooflineKernel

ArrayLike = float | int | np.ndarray

# a stretch of at most this many decode steps is timed with Python floats (the same operations, one step at a
# time): NumPy's fixed cost per call exceeds a short loop's (most stretches end at the next finish, a few
# steps away)
SCALAR_SEGMENT_MAX = 48


@dataclass(frozen=True)
class InstanceShape:
    """How one serving instance is laid out: parallelism and GPU type (a hardware catalog name)."""

    hardware: str
    tp: int = 1
    pp: int = 1

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp


class PerfModel(ABC):
    """Latency of one instance's iterations. Subclasses state their assumptions in their docstring."""

    name: str = ""

    @property
    @abstractmethod
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies on the whole instance (all layers, K and V, GQA-aware)."""

    @property
    @abstractmethod
    def kv_capacity_tokens(self) -> int:
        """Tokens of KV cache the instance holds after weights and activations (its HBM prefix cache too)."""

    @abstractmethod
    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        """One prefill iteration (see the module docstring for the arguments)."""

    @abstractmethod
    def decode_step_time_s(self, batch_size: ArrayLike, sum_context: ArrayLike) -> ArrayLike:
        """One decode step of ``batch_size`` sequences with ``sum_context`` context tokens in all."""

    def decode_segment_ends(self, batch_size: int, context: int, n: int, now: float) -> list[float] | np.ndarray:
        """End times of ``n`` decode steps of ``batch_size`` sequences starting at ``now`` with ``context`` tokens
        (the context grows by the batch each step): ``now + step`` for one step (the scalar
        :meth:`decode_step_time_s`); else ``now`` plus the running sums of the steps evaluated over
        ``context, context + batch_size, ...`` as one array, returned as that float64 array (the simulator
        copies it into its timeline as it is: no list of floats made and read back). Models override
        :meth:`_segment_ends` to give the same floats from Python arithmetic for short stretches, as a list
        (the same operations in the same order on the same doubles: each correctly rounded, so the results
        are identical)."""
        if n == 1:
            return [now + float(self.decode_step_time_s(batch_size, context))]
        ends = self._segment_ends(batch_size, context, n, now) if n <= SCALAR_SEGMENT_MAX else None
        if ends is not None:
            return ends
        ctx = np.arange(context, context + batch_size * n, batch_size, dtype=np.float64)  # context at each step
        arr = self.decode_step_time_s(batch_size, ctx)
        sums = arr.cumsum() if isinstance(arr, np.ndarray) else np.cumsum(arr)
        sums += now  # now + each partial sum
        return sums

    def _segment_ends(self, batch_size: int, context: int, n: int, now: float) -> list[float] | None:
        """:meth:`decode_segment_ends`'s array path as Python floats computed exactly as the arrays are: the
        step times :meth:`decode_step_time_s` gives for ``batch_size`` (an int) and the array ``context,
        context + batch_size, ..., context + (n - 1) * batch_size`` (float64), summed left to right from 0.0
        (as NumPy's ``cumsum`` adds) and each sum added to ``now``; None: no such path (the array is
        evaluated)."""
        return None

    def kernel(self) -> Optional[RooflineKernel]:
        """The model's iteration times as an object of the simulator's compiled core, which a simulated instance
        calls instead of :meth:`prefill_time_s`, :meth:`mixed_step_time_s`, scalar :meth:`decode_step_time_s` and
        :meth:`decode_segment_ends` (up to its ``max_loop_steps``): the same floats without a Python frame per
        call. Default: None (the instance calls the methods)."""
        return None

    def decode_monotone_in_context(self) -> bool:
        """True when ``decode_step_time_s(b, c)`` for a scalar ``b`` never decreases as an integer ``c`` grows,
        in floating point too (each operation on ``c`` is a correctly rounded add, or a multiply by a
        non-negative constant, or a max/min: all monotone). The simulator then prunes its decode choice with
        the step time at the smallest context as a lower bound. Default: no claim (the choice scans)."""
        return False

    def mixed_step_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int,
                          batch_size: int, sum_context: float) -> float:
        """One iteration that runs prefill chunks and decodes together (chunked prefill, colocated).

        Default: the prefill time plus the decode step's time beyond an empty step (the per-iteration
        fixed cost is paid once). Models with a better account override it.
        """
        if batch_size <= 0:
            return self.prefill_time_s(sum_tokens, sum_sq_tokens, n_seqs)
        if sum_tokens <= 0:
            return float(self.decode_step_time_s(batch_size, sum_context))
        extra = float(self.decode_step_time_s(batch_size, sum_context)) - float(self.decode_step_time_s(0, 0.0))
        return self.prefill_time_s(sum_tokens, sum_sq_tokens, n_seqs) + max(extra, 0.0)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "kv_bytes_per_token": self.kv_bytes_per_token,
                "kv_capacity_tokens": self.kv_capacity_tokens}


class ShapedPerfModel(PerfModel):
    """A performance model of one model on one instance shape of one hardware type: the KV bytes per
    token follow from the model, the KV capacity is what the subclass computed (``_kv_capacity``)."""

    _kv_capacity: int

    def __init__(self, model: ModelConfig, hw: HardwareConfig, shape: InstanceShape) -> None:
        self.model, self.hw, self.shape = model, hw, shape

    @property
    def kv_bytes_per_token(self) -> int:
        return self.model.kv_bytes_per_token

    @property
    def kv_capacity_tokens(self) -> int:
        return self._kv_capacity
