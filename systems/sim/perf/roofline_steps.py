"""The roofline model's decode stretches on Python floats: the hot loop of a simulation (every stretch of
decode-only steps of at most ``SCALAR_SEGMENT_MAX`` steps), as a plain function over the model's coefficients so
that it compiles with the simulator's core (:mod:`systems.sim.native`) while
:class:`~systems.sim.perf.roofline.RooflineModel` stays an ordinary class (pickled to worker processes,
introspected by the registry).

Each step repeats the array path of ``RooflineModel.decode_step_time_s`` one float at a time, the same
operations in the same order (see ``RooflineModel._segment_ends``), so the results are the same doubles. The
compiled build is made with ``-ffp-contract=off`` (:mod:`systems.sim.native_build`): no multiply-add is fused
into one rounding where Python rounds twice.
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
