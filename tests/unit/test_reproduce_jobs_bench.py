"""benchmarks.reproduce_jobs_bench: the presets it times and how it reads each preset's seconds from the log."""

from __future__ import annotations

from benchmarks.reproduce_jobs_bench import preset_seconds, simulator_presets


def test_each_presets_seconds_are_read_one_at_a_time_and_side_by_side():
    one_at_a_time = "[1/2] a: what (~0.1 min)\n      done in 3 s\n[2/2] b: what (~1 min)\n      FAILED (exit 1) in 40 s\n"
    assert preset_seconds(one_at_a_time) == {"a": 3.0, "b": 40.0}
    side_by_side = ("[2/2] b: what (~1 min; output in x/b.log)\n[1/2] a: what (~0.1 min; output in x/a.log)\n"
                    "      a done in 3 s\n      b done in 41 s\nsimulator presets: 41 s (2 at a time)\n")
    assert preset_seconds(side_by_side) == {"a": 3.0, "b": 41.0}


def test_only_simulator_presets_are_timed():
    default, full = simulator_presets(full=False), simulator_presets(full=True)
    assert "disagg_cpu" not in default and "calibrate_cpu" not in full and "sim_vs_real_cpu" not in full
    assert set(default) < set(full) and "splitwise_provisioning_full" in full
