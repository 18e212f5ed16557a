"""The roofline probe (benchmarks/roofline_probe.py) on this machine's CPU with the tiny model: every shape is timed,
written beside the roofline's prediction for the hardware named, with its provenance; bad arguments are refused."""

from __future__ import annotations

import csv
import json

import pytest

from benchmarks import roofline_probe
from systems.hardware_catalog import load_hardware
from systems.sim.perf.base import InstanceShape
from systems.sim.perf.roofline import RooflineModel

pytest.importorskip("torch")


def test_the_probe_times_every_shape_beside_the_roofline(tmp_path, capsys):
    out = tmp_path / "probe.csv"
    assert roofline_probe.main(["--model", "tiny_llama", "--hardware", "a100_80gb", "--device", "cpu",
                                "--prefixes", "0,128", "--batches", "1,4", "--decode-context", "64",
                                "--warmup", "0", "--repeats", "2", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [(r["shape"], int(r["size"])) for r in rows] == [("prefill_chunk", 0), ("prefill_chunk", 128),
                                                             ("decode_step", 1), ("decode_step", 4)]
    model, hw = roofline_probe.load_model("tiny_llama"), load_hardware("a100_80gb")
    roofline = RooflineModel(model, hw, InstanceShape(hw.name, 1, 1))
    first = rows[1]  # 512 new tokens after 128 of prefix
    assert float(first["roofline_ms"]) == pytest.approx(
        roofline.prefill_time_s(512, float(640**2 - 128**2), 1) * 1e3, rel=1e-3)
    assert float(rows[3]["roofline_ms"]) == pytest.approx(float(roofline.decode_step_time_s(4, 256.0)) * 1e3, rel=1e-3)
    for r in rows:
        assert float(r["measured_ms"]) > 0
        assert float(r["measured_over_roofline"]) == pytest.approx(
            float(r["measured_ms"]) / float(r["roofline_ms"]), rel=1e-3)
    provenance = json.loads((tmp_path / "probe.csv.json").read_text(encoding="utf-8"))
    assert (provenance["device"], provenance["dtype"], provenance["model"], provenance["hardware"]) == \
        ("cpu", "float32", "tiny_llama", "a100_80gb")
    assert "decode_step" in capsys.readouterr().out


def test_a_longer_prefix_costs_more_on_both_sides(tmp_path):
    model, hw = roofline_probe.load_model("tiny_llama"), load_hardware("a100_80gb")
    roofline = RooflineModel(model, hw, InstanceShape(hw.name, 1, 1))
    rows = roofline_probe.probe(model, roofline, "cpu", 512, (0, 2048), (), 64, warmup=1, repeats=3)
    assert rows[1].roofline_ms > rows[0].roofline_ms
    assert rows[1].measured_ms > rows[0].measured_ms  # 2,560 keys per query against 512: far more attention work


@pytest.mark.parametrize("args, message", [
    (["--model", "no_such_model"], "--model no_such_model"),
    (["--hardware", "abacus"], "unknown hardware 'abacus'"),
    (["--prefixes", "1,x"], "expected comma-separated integers"),
    (["--device", "cuda:7"], "no CUDA device"),
])
def test_bad_arguments_are_refused_naming_them(args, message, capsys, tmp_path):
    import torch

    if "cuda:7" in args and torch.cuda.is_available():
        pytest.skip("a CUDA device is available here")
    with pytest.raises(SystemExit) as exc:
        roofline_probe.main(["--model", "tiny_llama", "--device", "cpu", "--out", str(tmp_path / "p.csv"), *args])
    assert exc.value.code == 2 and message in capsys.readouterr().err
