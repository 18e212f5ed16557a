"""Two peer simulators' timing rules, offered as explicit ``engine=sim`` options (off by default).

Neither rule is part of our performance models; each reproduces what a peer simulator does, so a run can
show how much of a difference against that peer comes from the rule:

- ``engine.iteration_overhead: simdistserve``. DistServe's simulator (LLMServe/DistServe,
  ``simdistserve/base/worker.py``, ``Worker.add_ray_overhead``) adds ``2 ms + 1e-4 ms x tokens`` to every
  iteration of the first pipeline stage, where ``tokens`` is the sum of ``Request.current_context_len``
  over the iteration's requests (``do_prefill``: prefills and piggy-backed decodes; ``do_decode``: the
  decodes). A decode's ``current_context_len`` is its prompt plus the tokens decoded so far, which is our
  per-sequence decode context (``sum_context``), so a decode step gets ``2 + 1e-4 * sum_context`` ms. A
  prefill's is its whole prompt; our prefill interface passes the iteration's new tokens (``sum_tokens``),
  which is the same number for prompts neither chunked nor served partly from a prefix cache (DistServe's
  search runs neither). A mixed iteration gets ``2 + 1e-4 * (sum_tokens + sum_context)`` ms, once. Our
  time of a PP instance is one stage's, so the overhead is added once per iteration, as upstream adds it
  on the first stage only.
- ``engine.token_phase_timing: splitwise_sim`` (``engine.perf_model=splitwise`` only). splitwise-sim
  (Mutinifni/splitwise-sim, ``performance_model.py``, ``DatabasePerformanceModel``) builds its token
  predictor in ``init_predictor`` as a linear ``interp1d(..., fill_value="extrapolate")`` of the median
  ``token_time`` per ``batch_tokens = prompt_size * batch_size`` over every row of ``perf_model.csv`` for
  the (model, hardware, tp), and ``get_iteration_duration`` evaluates it, for a token-only batch, at
  ``batch_tokens = len(batch)`` (each token task counts 1). The batch size is thus looked up on an axis of
  prompt tokens: batches of 1-127 fall below the smallest point (128) and are extrapolated from the
  batch-1 runs of prompts 128 and 256, so a decode step costs about the same whatever the batch
  (llama2-70b TP 8 on a100-80gb: 42.6 ms at batch 1, 42.8 ms at 64, against 44.9 and 71.6 ms measured),
  and the context length plays no part. With this option a decode step takes that value (floored at 0),
  from the raw rows (no run is dropped as failed, no running maximum). Prefill and mixed iterations keep
  the splitwise model's rules, which follow splitwise-sim's (``prompt_time`` per batch tokens; mixed: the
  prompt time of all the iteration's tokens x 1.1).

:func:`apply_peer_timing` wraps a performance model in :class:`PeerTimedModel` only when an option asks
for it; with the defaults it returns the model unchanged, so default runs are untouched.
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from typing import Any, Optional

import numpy as np

from systems.sim.perf.base import SCALAR_SEGMENT_MAX, ArrayLike, PerfModel, ShapedPerfModel
from systems.sim.perf.profiles import SPLITWISE_CSV, find_profile
from systems.sim.perf.splitwise_profile import HARDWARE_NAMES, MODEL_NAMES, ProfileRow, load_rows

ITERATION_OVERHEADS = ("none", "simdistserve")
TOKEN_PHASE_TIMINGS = ("ours", "splitwise_sim")
SIMDISTSERVE_BASE_MS = 2.0  # Worker.add_ray_overhead: base_overhead
SIMDISTSERVE_MS_PER_TOKEN = 1e-4  # Worker.add_ray_overhead: k


def simdistserve_overhead_s(context_tokens: ArrayLike) -> ArrayLike:
    """simdistserve's per-iteration overhead for an iteration over ``context_tokens`` tokens, in seconds."""
    return (SIMDISTSERVE_BASE_MS + SIMDISTSERVE_MS_PER_TOKEN * context_tokens) / 1e3


def splitwise_sim_token_table(rows: tuple[ProfileRow, ...], model: str, hardware: str,
                              tp: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """splitwise-sim's token predictor points: (batch tokens, median ``token_time`` ms), sorted.

    ``model`` and ``hardware`` are upstream names (``llama2-70b``, ``a100-80gb``); ``ValueError`` when the
    rows hold nothing for them.
    """
    groups: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if (r.model, r.hardware, r.tp) == (model, hardware, tp):
            groups[r.prompt_size * r.batch_size].append(r.token_ms)
    if not groups:
        raise ValueError(f"{SPLITWISE_CSV} has no rows for {model} on {hardware} at tp={tp}")
    xs = sorted(groups)
    return tuple(float(x) for x in xs), tuple(float(statistics.median(groups[x])) for x in xs)


def interp_extrapolate(x: ArrayLike, xs: tuple[float, ...], ys: tuple[float, ...]) -> ArrayLike:
    """Piecewise-linear through (xs, ys), extended by the end segments (scipy ``interp1d`` with
    ``fill_value="extrapolate"``); scalar in, float out."""
    xa, ya = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(xa) == 1:
        return np.full_like(np.asarray(x, dtype=float), ya[0]) if isinstance(x, np.ndarray) else float(ya[0])
    xv = np.asarray(x, dtype=float)
    i = np.clip(np.searchsorted(xa, xv, side="right"), 1, len(xa) - 1)
    out = ya[i - 1] + (ya[i] - ya[i - 1]) * (xv - xa[i - 1]) / (xa[i] - xa[i - 1])
    return out if isinstance(x, np.ndarray) else float(out)


class PeerTimedModel(PerfModel):
    """A performance model with a peer's timing rule on top (see the module docstring).

    ``token_table`` (batch tokens, ms) replaces decode-only step times with splitwise-sim's lookup;
    ``overhead`` adds simdistserve's per-iteration overhead to every iteration.
    """

    def __init__(self, inner: PerfModel, overhead: bool = False,
                 token_table: Optional[tuple[tuple[float, ...], tuple[float, ...]]] = None) -> None:
        self.inner = inner
        self.overhead = overhead
        self.token_table = token_table
        self.name = inner.name
        self._token_steps: dict[float, float] = {}  # batch size -> splitwise-sim's step (s), looked up once

    def _token_step_s(self, batch_size: float) -> float:
        """splitwise-sim's decode step for ``batch_size`` (the token table's value, floored at 0, in s)."""
        step = self._token_steps.get(batch_size)
        if step is None:
            assert self.token_table is not None
            step = max(float(interp_extrapolate(float(batch_size), *self.token_table)), 0.0) / 1e3
            self._token_steps[batch_size] = step
        return step

    @property
    def kv_bytes_per_token(self) -> int:
        return self.inner.kv_bytes_per_token

    @property
    def kv_capacity_tokens(self) -> int:
        return self.inner.kv_capacity_tokens

    def _decode(self, batch_size: ArrayLike, sum_context: ArrayLike) -> ArrayLike:
        if self.token_table is None:
            return self.inner.decode_step_time_s(batch_size, sum_context)
        if isinstance(batch_size, np.ndarray) or isinstance(sum_context, np.ndarray):
            bs, _ = np.broadcast_arrays(np.asarray(batch_size, dtype=float), np.asarray(sum_context, dtype=float))
            return np.maximum(interp_extrapolate(np.array(bs), *self.token_table), 0.0) / 1e3
        return self._token_step_s(float(batch_size))

    def decode_segment_ends(self, batch_size: int, context: int, n: int, now: float) -> list[float] | np.ndarray:
        """With the token table alone, every step of a stretch takes the same time (the context plays no part):
        the step is looked up once and summed left to right, as the base class's array path sums the array of
        equal steps (the same floats, without evaluating the table per step)."""
        if self.token_table is None or self.overhead:
            return super().decode_segment_ends(batch_size, context, n, now)
        step = self._token_step_s(float(batch_size))
        if n > SCALAR_SEGMENT_MAX:
            sums = np.full(n, step).cumsum()
            sums += now
            return sums
        ends, total = [], 0.0
        for _ in range(n):
            total += step
            ends.append(now + total)
        return ends

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        t = self.inner.prefill_time_s(sum_tokens, sum_sq_tokens, n_seqs)
        if self.overhead and sum_tokens > 0:
            t += float(simdistserve_overhead_s(sum_tokens))
        return t

    def decode_step_time_s(self, batch_size: ArrayLike, sum_context: ArrayLike) -> ArrayLike:
        t = self._decode(batch_size, sum_context)
        if self.overhead:
            t = t + simdistserve_overhead_s(sum_context)
        return t

    def decode_monotone_in_context(self) -> bool:
        # the token table ignores the context; the overhead grows with it
        return self.token_table is not None or self.inner.decode_monotone_in_context()

    def mixed_step_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int,
                          batch_size: int, sum_context: float) -> float:
        if sum_tokens <= 0:
            return float(self.decode_step_time_s(batch_size, sum_context))
        if batch_size <= 0:
            return self.prefill_time_s(sum_tokens, sum_sq_tokens, n_seqs)
        t = self.inner.mixed_step_time_s(sum_tokens, sum_sq_tokens, n_seqs, batch_size, sum_context)
        if self.overhead:
            t += float(simdistserve_overhead_s(sum_tokens + sum_context))
        return t

    def __getattr__(self, attr: str) -> Any:
        # the wrapped model's own extras (e.g. the splitwise model's measured_points); only reached for
        # names this class does not define
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def describe(self) -> dict[str, object]:
        return {**self.inner.describe(), "iteration_overhead": "simdistserve" if self.overhead else "none",
                "token_phase_timing": "ours" if self.token_table is None else "splitwise_sim"}


def apply_peer_timing(perf: PerfModel, iteration_overhead: str = "none", token_phase_timing: str = "ours",
                      profiles_dir: Optional[str | os.PathLike[str]] = None) -> PerfModel:
    """``perf`` with the peer rules the options ask for; ``perf`` itself when both are the defaults.

    ``ValueError`` for an unknown option value, or ``splitwise_sim`` on a model other than ``splitwise``.
    """
    if iteration_overhead not in ITERATION_OVERHEADS:
        raise ValueError(f"iteration_overhead must be one of {', '.join(ITERATION_OVERHEADS)}, "
                         f"got {iteration_overhead!r}")
    if token_phase_timing not in TOKEN_PHASE_TIMINGS:
        raise ValueError(f"token_phase_timing must be one of {', '.join(TOKEN_PHASE_TIMINGS)}, "
                         f"got {token_phase_timing!r}")
    table = None
    if token_phase_timing == "splitwise_sim":
        if perf.name != "splitwise" or not isinstance(perf, ShapedPerfModel):
            raise ValueError(f"token_phase_timing=splitwise_sim reads splitwise-sim's {SPLITWISE_CSV}, which only "
                             f"the splitwise performance model uses (this one is {perf.name!r})")
        rows = load_rows(str(find_profile(SPLITWISE_CSV, profiles_dir)))
        table = splitwise_sim_token_table(rows, MODEL_NAMES[perf.model.name], HARDWARE_NAMES[perf.hw.name],
                                          perf.shape.tp)
    if iteration_overhead == "none" and table is None:
        return perf
    return PeerTimedModel(perf, overhead=iteration_overhead == "simdistserve", token_table=table)
