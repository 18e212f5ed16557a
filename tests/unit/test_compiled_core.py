"""The simulator's compiled core (systems/compiled_core.py): imported through the packages' ``__path__`` when the
build matches the sources, the same outputs as the Python sources for the four designs, and otherwise the sources
after one warning."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.sim_core_identity import DESIGN_NAMES, run_side
from systems import compiled_core, compiled_core_build

ROOT = Path(__file__).resolve().parents[2]


def _status_or_skip() -> compiled_core.CoreStatus:
    status = compiled_core.status()
    if not status.active:
        pytest.skip(f"the compiled core is not in use: {status.reason}")
    return status


def test_the_built_modules_are_the_ones_imported() -> None:
    status = _status_or_skip()
    import systems.policies.block_lru
    import systems.sim.events
    import systems.sim.perf.roofline_steps

    for name in compiled_core.COMPILED_MODULES:
        module = sys.modules[name] if name in sys.modules else __import__(name, fromlist=["_"])
        assert Path(module.__file__).is_relative_to(status.directory), (name, module.__file__)
    import systems.sim.simulated_deployment  # not compiled: from its source

    assert Path(systems.sim.simulated_deployment.__file__).is_relative_to(ROOT)
    assert systems.sim.events.__file__.endswith(".so") and systems.policies.block_lru.__file__.endswith(".so")


@pytest.mark.integration
@pytest.mark.slow
def test_compiled_and_source_runs_give_identical_outputs() -> None:
    """Records, record columns, load samples and counters of the four designs, byte for byte (each side in a
    child process; the compiled side fails unless the child imported the build)."""
    _status_or_skip()
    compiled = run_side(True, DESIGN_NAMES, 32, 2_000)["designs"]
    sources = run_side(False, DESIGN_NAMES, 32, 2_000)["designs"]
    assert {d: r["sha256"] for d, r in compiled.items()} == {d: r["sha256"] for d, r in sources.items()}
    assert len({r["sha256"] for r in compiled.values()}) == len(DESIGN_NAMES)  # the designs do differ
    assert all(r["requests"] == 2_000 and r["ok"] > 1_000 for r in compiled.values()), compiled


def _manifest(directory: Path, sources: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / compiled_core.MANIFEST).write_text(json.dumps({"sources": sources}), encoding="utf-8")


def test_a_build_from_other_sources_is_not_used(tmp_path: Path) -> None:
    hashes = compiled_core.source_hashes()
    assert set(hashes) == set(compiled_core.COMPILED_MODULES) and all(len(h) == 64 for h in hashes.values())
    assert "no build" in compiled_core.check_build(tmp_path / "missing", hashes)
    _manifest(tmp_path, hashes)
    assert compiled_core.check_build(tmp_path, hashes) is None
    assert compiled_core.plan({}, tmp_path).active
    assert compiled_core.plan({compiled_core.ENV_SWITCH: "0"}, tmp_path).reason == "DISAGG_SIM_NATIVE=0"
    _manifest(tmp_path, {**hashes, "systems.sim.instance": "0" * 64})
    why = compiled_core.check_build(tmp_path, hashes)
    assert why is not None and "systems.sim.instance changed" in why and "compiled_core_build" in why
    assert not compiled_core.plan({}, tmp_path).active
    (tmp_path / compiled_core.MANIFEST).write_text("{not json", encoding="utf-8")
    assert "unreadable" in compiled_core.check_build(tmp_path, hashes)


@pytest.mark.integration
def test_a_stale_build_gives_the_sources_and_one_warning(tmp_path: Path) -> None:
    """A child process whose build folder holds a build of other sources: every package imports its sources,
    and the run says why once."""
    _manifest(tmp_path, {**compiled_core.source_hashes(), "systems.sim.events": "0" * 64})
    code = (f"from pathlib import Path; import systems.compiled_core as c; c.build_dir = lambda prefix=None: "
            f"Path({str(tmp_path)!r})\n"
            "import systems.sim.events, systems.sim.perf.roofline_steps, systems.policies.block_lru\n"
            "print(systems.sim.events.__file__, systems.sim.perf.roofline_steps.__file__, "
            "systems.policies.block_lru.__file__)")
    env = {k: v for k, v in __import__("os").environ.items() if k != compiled_core.ENV_SWITCH}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    assert all(path.endswith(".py") for path in proc.stdout.split()), proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if compiled_core.FALLBACK_WARNING in line]
    assert len(warnings) == 1 and "systems.sim.events changed since" in warnings[0], proc.stderr


def test_a_missing_toolchain_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_core_build.shutil, "which", lambda name: None)
    with pytest.raises(compiled_core_build.CompiledCoreBuildError, match="no C compiler"):
        compiled_core_build.check_toolchain()
