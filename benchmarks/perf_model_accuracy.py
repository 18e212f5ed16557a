"""How far the roofline model is from the public profiles: DistServe's fits and splitwise-sim's measurements.

Run by hand: ``python -m benchmarks.perf_model_accuracy [--profiles-dir DIR] [--out errors.csv]``.

References (all public, found through the profiles directory, see ``systems/sim/perf/profiles.py``):

- ``distserve`` / ``distserve-vllm``: DistServe's fitted latencies (its own engine / vLLM) for OPT-13B
  (TP 1, 2, 4) and OPT-66B (TP 2, 4, 8) on A100-80GB, evaluated on a grid: prefill batches of 1-16
  prompts of 64-2048 tokens (at most 8,192 tokens), decode batches of 1-256 at 128-2048 context tokens
  per sequence (within the KV capacity).
- ``splitwise``: splitwise-sim's measured medians for Llama-2-70B (TP 2, 4, 8) on a100-80gb,
  h100-80gb and h100-80gb-pcap, at every measured (prompt, batch, output) configuration: prefill of
  ``batch`` prompts of ``prompt`` tokens, and a decode step at the run's mean context
  (``prompt + output / 2`` per sequence).

For each (reference, model, hardware, tp, phase) it prints the number of points, the median and p90
absolute relative error ``|roofline - reference| / reference``, and the median ratio roofline /
reference (above 1: the roofline is slower). ``--out`` writes the table as CSV.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np
from omegaconf import OmegaConf

from systems.config import HardwareConfig, ModelConfig
from systems.hardware_catalog import CONF_DIR, load_hardware
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.distserve_fit import DistServeFitModel
from systems.sim.perf.roofline import RooflineModel
from systems.sim.perf.splitwise_profile import SplitwiseProfileModel

DISTSERVE_CASES = (("opt_13b", (1, 2, 4)), ("opt_66b", (2, 4, 8)))
SPLITWISE_CASES = (("llama2_70b", ("a100_80gb", "h100_80gb", "h100_80gb_pcap"), (2, 4, 8)),)
PREFILL_BATCHES = (1, 2, 4, 8, 16)
PREFILL_LENGTHS = (64, 128, 256, 512, 1024, 2048)
PREFILL_MAX_TOKENS = 8192
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DECODE_CONTEXTS = (128, 256, 512, 1024, 2048)
COLUMNS = ("reference", "model", "hardware", "tp", "phase", "n", "median_abs_rel_err", "p90_abs_rel_err",
           "median_ratio")


def load_model(name: str, conf_dir: Path = CONF_DIR) -> ModelConfig:
    """A validated ``ModelConfig`` from ``conf/model/<name>.yaml``."""
    node = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(conf_dir / "model" / f"{name}.yaml"))
    return OmegaConf.to_object(node)  # type: ignore[return-value]


def _hardware(name: str, overrides: dict[str, dict[str, Any]]) -> HardwareConfig:
    return dataclasses.replace(load_hardware(name), **overrides.get(name, {}))


# One point: (phase, reference seconds, roofline seconds).
Point = tuple[str, float, float]


def _distserve_points(ref: PerfModel, roof: PerfModel) -> Iterator[Point]:
    for b in PREFILL_BATCHES:
        for length in PREFILL_LENGTHS:
            if b * length <= PREFILL_MAX_TOKENS:
                args = (float(b * length), float(b * length**2), b)
                yield "prefill", ref.prefill_time_s(*args), roof.prefill_time_s(*args)
    cap = ref.kv_capacity_tokens
    for b in DECODE_BATCHES:
        for ctx in DECODE_CONTEXTS:
            if b * ctx <= cap:
                args2 = (b, float(b * ctx))
                yield "decode", float(ref.decode_step_time_s(*args2)), float(roof.decode_step_time_s(*args2))


def _splitwise_points(ref: SplitwiseProfileModel, roof: PerfModel) -> Iterator[Point]:
    for prompt, batch, out, prompt_ms, token_ms in ref.measured_points():
        yield "prefill", prompt_ms / 1e3, roof.prefill_time_s(float(prompt * batch), float(batch * prompt**2), batch)
        yield "decode", token_ms / 1e3, float(roof.decode_step_time_s(batch, batch * (prompt + out / 2)))


def evaluate(profiles_dir: Optional[str] = None, hw_overrides: Optional[dict[str, dict[str, Any]]] = None,
             roofline_params: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
    """One row per (reference, model, hardware, tp, phase) with the roofline's error statistics."""
    overrides = hw_overrides or {}
    params = roofline_params or {}
    groups: dict[tuple[str, str, str, int, str], list[tuple[float, float]]] = defaultdict(list)
    a100 = _hardware("a100_80gb", overrides)
    for model_name, tps in DISTSERVE_CASES:
        model = load_model(model_name)
        for tp in tps:
            shape = InstanceShape("a100_80gb", tp)
            roof = RooflineModel(model, a100, shape, **params)
            for engine, label in (("distserve", "distserve"), ("vllm", "distserve-vllm")):
                ref = DistServeFitModel(model, a100, shape, profiles_dir=profiles_dir, engine=engine)
                for phase, want, got in _distserve_points(ref, roof):
                    groups[(label, model_name, "a100_80gb", tp, phase)].append((want, got))
    for model_name, hws, tps in SPLITWISE_CASES:
        model = load_model(model_name)
        for hw_name in hws:
            hw = _hardware(hw_name, overrides)
            for tp in tps:
                shape = InstanceShape(hw_name, tp)
                roof = RooflineModel(model, hw, shape, **params)
                ref = SplitwiseProfileModel(model, hw, shape, profiles_dir=profiles_dir)
                for phase, want, got in _splitwise_points(ref, roof):
                    groups[("splitwise", model_name, hw_name, tp, phase)].append((want, got))
    rows = []
    for key, pairs in groups.items():
        want = np.array([w for w, _ in pairs])
        got = np.array([g for _, g in pairs])
        err = np.abs(got - want) / want
        rows.append(dict(zip(COLUMNS, (*key, len(pairs), float(np.median(err)), float(np.percentile(err, 90)),
                                       float(np.median(got / want))), strict=True)))
    return rows


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles-dir", default=None, help="directory holding distserve/ and splitwise_sim/")
    parser.add_argument("--out", default=None, help="write the table as CSV here")
    args = parser.parse_args(argv)
    rows = evaluate(args.profiles_dir)
    print(f"{'reference':15} {'model':10} {'hardware':15} {'tp':>2} {'phase':7} {'n':>3} "
          f"{'med|err|':>8} {'p90|err|':>8} {'med ratio':>9}")
    for r in rows:
        print(f"{r['reference']:15} {r['model']:10} {r['hardware']:15} {r['tp']:>2} {r['phase']:7} {r['n']:>3} "
              f"{r['median_abs_rel_err']:8.1%} {r['p90_abs_rel_err']:8.1%} {r['median_ratio']:9.2f}")
    med = [r["median_abs_rel_err"] for r in rows]
    print(f"\nall groups: median of the medians {statistics.median(med):.1%}, worst median {max(med):.1%}")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
