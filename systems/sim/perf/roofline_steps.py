"""The roofline model's arithmetic on Python floats where a simulation spends its time: every stretch of
decode-only steps, and every prefill and mixed iteration. Plain functions over the model's coefficients, and
:class:`RooflineKernel`, which binds them to one model's coefficients for a simulated instance to call, so that
they compile with the simulator's core (:mod:`systems.compiled_core`) while
:class:`~systems.sim.perf.roofline.RooflineModel` stays an ordinary class (pickled to worker processes,
introspected by the registry).

Each function repeats what ``RooflineModel`` computes, the same operations in the same order, so the results
are the same doubles: a decode stretch the array path of ``RooflineModel.decode_step_time_s`` one float at a
time (see ``RooflineModel._segment_ends``), an iteration ``RooflineModel._combine`` on scalars. The compiled
build is made with ``-ffp-contract=off`` (:mod:`systems.compiled_core_build`): no multiply-add is fused into one
rounding where Python rounds twice.
"""

from __future__ import annotations


def roofline_segment_ends(b: float, c: float, n: int, now: float, attn: float, kv: float, weights: float,
                          overhead: float, flop: float, under: float, comm_fixed: float, comm_token: float,
                          full_overlap: bool, no_comm: bool) -> list[float]:
    """End times of ``n`` decode steps of ``b`` sequences from context ``c`` (growing by ``b`` a step), starting
    at ``now``: compute ``= c * attn + b * flop``, memory ``= (c + b) * kv + weights``, the step ``max`` of the
    two (NumPy's ``maximum``: NaN wins), plus ``under`` times the smaller unless ``full_overlap``, plus
    ``comm_fixed + comm_token * b`` unless ``no_comm``, plus ``overhead``; summed left to right from 0.0 and each
    sum added to ``now``."""
    bf = b * flop
    out: list[float] = []
    acc = 0.0
    if full_overlap and no_comm:  # the common case, without the per-step checks
        last = c + (n - 1) * b  # the context at the last step (exact, as c += b gives it)
        if attn >= 0.0 and kv >= 0.0 and last * attn + bf <= (c + b) * kv + weights:
            # memory-bound at every step: compute and memory never decrease as c grows (correctly rounded
            # products by non-negative constants and sums), so compute at the last step bounding memory at the
            # first bounds it everywhere; np.maximum then gives memory (or an equal compute)
            for _ in range(n):
                acc += ((c + b) * kv + weights) + overhead
                out.append(acc + now)
                c += b
            return out
        for _ in range(n):
            compute = c * attn + bf
            memory = (c + b) * kv + weights
            acc += (compute if compute >= memory or compute != compute else memory) + overhead  # np.maximum
            out.append(acc + now)
            c += b
        return out
    comm_b = comm_token * b
    for _ in range(n):
        compute = c * attn + bf
        memory = (c + b) * kv + weights
        t = compute if compute >= memory or compute != compute else memory  # np.maximum (NaN wins)
        if not full_overlap:
            t = t + under * (compute if compute <= memory or compute != compute else memory)  # np.minimum
        if not no_comm:
            t = t + comm_fixed + comm_b
        acc += t + overhead
        out.append(acc + now)
        c += b
    return out


def roofline_iteration_s(compute: float, memory: float, tokens: float, under: float, comm_fixed: float,
                         comm_token: float, overhead: float, full_overlap: bool, no_comm: bool) -> float:
    """One iteration from its compute and memory times, as ``RooflineModel._combine`` on scalars: the larger
    (Python's ``max``: ``compute`` unless ``memory`` is greater), plus ``under`` times the smaller (``min``:
    ``compute`` unless ``memory`` is less) unless ``full_overlap``, plus ``comm_fixed + comm_token * tokens``
    unless ``no_comm``, plus ``overhead``, left to right."""
    t = memory if memory > compute else compute
    if not full_overlap:
        t = t + under * (memory if memory < compute else compute)
    if not no_comm:
        t = t + comm_fixed + comm_token * tokens
    return t + overhead


def roofline_prefill_s(sum_tokens: float, sum_sq_tokens: float, attn_sq: float, attn: float, kv: float,
                       weights: float, overhead: float, flop: float, under: float, comm_fixed: float,
                       comm_token: float, full_overlap: bool, no_comm: bool) -> float:
    """A prefill iteration of ``sum_tokens`` tokens (``RooflineModel.prefill_time_s``); ``attn`` is unused (the
    coefficients come in the order of :func:`roofline_segment_ends`'s)."""
    if sum_tokens <= 0:
        return 0.0
    compute = sum_tokens * flop + sum_sq_tokens * attn_sq
    memory = weights + sum_tokens * kv
    return roofline_iteration_s(compute, memory, sum_tokens, under, comm_fixed, comm_token, overhead, full_overlap,
                                no_comm)


def roofline_mixed_s(sum_tokens: float, sum_sq_tokens: float, batch_size: float, sum_context: float, attn_sq: float,
                     attn: float, kv: float, weights: float, overhead: float, flop: float, under: float,
                     comm_fixed: float, comm_token: float, full_overlap: bool, no_comm: bool) -> float:
    """Prefill chunks and ``batch_size`` decodes in one iteration (``RooflineModel.mixed_step_time_s``). Token
    counts are integers below 2**53, so their float sums are exact, as Python's integer sums are."""
    tokens = sum_tokens + batch_size
    if tokens <= 0:
        return 0.0
    compute = tokens * flop + sum_sq_tokens * attn_sq + sum_context * attn
    memory = weights + (tokens + sum_context) * kv
    return roofline_iteration_s(compute, memory, tokens, under, comm_fixed, comm_token, overhead, full_overlap,
                                no_comm)


class RooflineKernel:
    """A roofline model's coefficients with the functions above bound to them: what a simulated instance calls
    for its iterations (``SimInstance``; ``RooflineModel.kernel`` makes one). Compiled with the simulator's core, an
    instance calls it without a Python frame, the arguments' conversions or a tuple of coefficients; the floats are
    those of ``RooflineModel``'s methods (the same functions on the same coefficients).
    ``max_loop_steps``: the longest decode stretch :meth:`segment_ends` is asked to time (longer ones go to the
    model's NumPy path)."""

    __slots__ = ("attn", "attn_sq", "comm_fixed", "comm_token", "flop", "full_overlap", "kv", "max_loop_steps",
                 "no_comm", "overhead", "under", "weights")

    def __init__(self, attn_sq: float, attn: float, kv: float, weights: float, overhead: float, flop: float,
                 under: float, comm_fixed: float, comm_token: float, full_overlap: bool, no_comm: bool,
                 max_loop_steps: int) -> None:
        self.attn_sq = attn_sq
        self.attn = attn
        self.kv = kv
        self.weights = weights
        self.overhead = overhead
        self.flop = flop
        self.under = under
        self.comm_fixed = comm_fixed
        self.comm_token = comm_token
        self.full_overlap = full_overlap
        self.no_comm = no_comm
        self.max_loop_steps = max_loop_steps

    def prefill_s(self, sum_tokens: float, sum_sq_tokens: float) -> float:
        """``RooflineModel.prefill_time_s``."""
        return roofline_prefill_s(sum_tokens, sum_sq_tokens, self.attn_sq, self.attn, self.kv, self.weights,
                                  self.overhead, self.flop, self.under, self.comm_fixed, self.comm_token,
                                  self.full_overlap, self.no_comm)

    def mixed_s(self, sum_tokens: float, sum_sq_tokens: float, batch_size: float, sum_context: float) -> float:
        """``RooflineModel.mixed_step_time_s``."""
        return roofline_mixed_s(sum_tokens, sum_sq_tokens, batch_size, sum_context, self.attn_sq, self.attn, self.kv,
                                self.weights, self.overhead, self.flop, self.under, self.comm_fixed, self.comm_token,
                                self.full_overlap, self.no_comm)

    def step_s(self, batch_size: float, sum_context: float) -> float:
        """``RooflineModel.decode_step_time_s`` on scalars."""
        compute = batch_size * self.flop + sum_context * self.attn
        memory = self.weights + (sum_context + batch_size) * self.kv
        return roofline_iteration_s(compute, memory, batch_size, self.under, self.comm_fixed, self.comm_token,
                                    self.overhead, self.full_overlap, self.no_comm)

    def segment_ends(self, b: float, c: float, n: int, now: float) -> list[float]:
        """``RooflineModel.decode_segment_ends`` for ``n <= max_loop_steps``."""
        return roofline_segment_ends(b, c, n, now, self.attn, self.kv, self.weights, self.overhead, self.flop,
                                     self.under, self.comm_fixed, self.comm_token, self.full_overlap, self.no_comm)
