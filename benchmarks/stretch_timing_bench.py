"""What a decode stretch costs the simulator on each of its two paths, by length: the grounds for
``systems.sim.perf.roofline.COMPILED_SEGMENT_MAX``. Run by hand:
``python -m benchmarks.stretch_timing_bench [--lengths 32 64 ...] [--repeats 7]``.

A stretch of ``n`` decode steps is timed either by the loop of :mod:`systems.sim.perf.roofline_steps` (a list of
``n`` Python floats, copied into the instance's timeline with ``array.fromlist``) or by NumPy (one array for the
whole stretch, copied with ``frombytes``); both give the same doubles. The loop costs a little per step, NumPy a
fixed cost per call. For each length the bench prints the median microseconds per stretch of both, timed in this
process, on Llama-3-8B on one A100 (the scale benchmark's model), and the longest length at which the loop is
still the cheaper. It says whether the loop ran compiled (:mod:`systems.compiled_core`): from its Python source the
loop is far slower per step, and the simulator then hands NumPy every stretch longer than
``SCALAR_SEGMENT_MAX``.
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from array import array
from collections.abc import Callable

import numpy as np
from omegaconf import OmegaConf

from systems import compiled_core
from systems.config import CONF_DIR, ModelConfig
from systems.hardware_catalog import load_hardware
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.roofline import COMPILED_SEGMENT_MAX, RooflineModel
from systems.sim.perf.roofline_steps import roofline_segment_ends


def llama3_8b_on_a100() -> RooflineModel:
    node = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF_DIR / "model" / "llama3_8b.yaml"))
    model: ModelConfig = OmegaConf.to_object(node)  # type: ignore[assignment]
    return RooflineModel(model, load_hardware("a100_80gb"), InstanceShape("a100_80gb", 1))


def stretch_paths(model: RooflineModel, n: int, batch: int = 8, context: int = 20_000
                  ) -> tuple[Callable[[], None], Callable[[], None]]:
    """The two ways of timing one stretch of ``n`` steps and appending it to a timeline: (loop, numpy)."""
    timeline = array("d")

    def loop() -> None:
        timeline.fromlist(roofline_segment_ends(float(batch), float(context), n, 5.0, *model._stretch))
        del timeline[:]

    def arrays() -> None:
        ends = PerfModel.decode_segment_ends(model, batch, context, n, 5.0)
        if isinstance(ends, list):  # PerfModel times up to SCALAR_SEGMENT_MAX steps with the model's loop
            ctx = np.arange(context, context + batch * n, batch, dtype=np.float64)
            ends = np.cumsum(model.decode_step_time_s(batch, ctx))
            ends += 5.0
        timeline.frombytes(np.asarray(ends, dtype=np.float64).tobytes())
        del timeline[:]

    return loop, arrays


def median_us(fn: Callable[[], None], repeats: int, number: int = 2000) -> float:
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeats)) / number * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 48, 96, 128, 160, 192, 256, 384, 512, 1024])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    core = compiled_core.status()
    model = llama3_8b_on_a100()
    print(f"decode stretch timing, Llama-3-8B on one A100; the loop {'compiled' if core.active else 'from its source'}"
          f" ({core.reason}); COMPILED_SEGMENT_MAX = {COMPILED_SEGMENT_MAX}")
    print(f"{'steps':>6} {'loop us':>9} {'numpy us':>9} {'loop/numpy':>11}")
    cheaper = 0
    for n in args.lengths:
        loop, arrays = stretch_paths(model, n)
        t_loop, t_np = median_us(loop, args.repeats), median_us(arrays, args.repeats)
        if t_loop <= t_np:
            cheaper = max(cheaper, n)
        print(f"{n:>6} {t_loop:>9.2f} {t_np:>9.2f} {t_loop / t_np:>10.2f}x")
    print(f"longest measured stretch where the loop is the cheaper: {cheaper} steps")


if __name__ == "__main__":
    main()
