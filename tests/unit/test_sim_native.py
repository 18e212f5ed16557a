"""The simulator's compiled core (systems/sim/native.py): in use after ``make``, the same outputs as the Python
sources for the four designs, and never used when it was built from other sources."""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys
from pathlib import Path

import pytest

from harness.bench.sim_core_identity import DESIGN_NAMES, run_side
from systems.sim import native, native_build


def test_the_compiled_core_is_in_use() -> None:
    """``make test`` builds it first (python -m systems.sim.native_build): a test run on the sources means the
    build failed or is stale, which users would pay for in every simulation."""
    status = native.status()
    assert status.active or os.environ.get(native.ENV_SWITCH) == "0", status.reason
    if status.active:
        for name in (*native.NATIVE_MODULES, *native.C_MODULES):
            module = sys.modules.get(name)
            if module is not None:  # imported from the build, not from the sources
                assert Path(module.__file__).is_relative_to(status.directory), (name, module.__file__)


@pytest.mark.slow
def test_compiled_and_source_runs_give_identical_outputs() -> None:
    """Records, record columns, load samples and counters of the four designs, byte for byte (each side in a
    child process; the compiled side fails unless the child imported the build)."""
    compiled = run_side(True, DESIGN_NAMES, 32, 2_000)["designs"]
    sources = run_side(False, DESIGN_NAMES, 32, 2_000)["designs"]
    assert {d: r["sha256"] for d, r in compiled.items()} == {d: r["sha256"] for d, r in sources.items()}
    assert len({r["sha256"] for r in compiled.values()}) == len(DESIGN_NAMES)  # the designs do differ
    assert all(r["requests"] == 2_000 and r["ok"] > 1_000 for r in compiled.values()), compiled


def _manifest(directory: Path, sources: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / native.MANIFEST).write_text(json.dumps({"sources": sources}), encoding="utf-8")


def test_a_build_from_other_sources_is_not_used(tmp_path: Path) -> None:
    hashes = native.source_hashes()
    assert set(hashes) == {*native.NATIVE_MODULES, *native.C_MODULES} and all(len(h) == 64 for h in hashes.values())
    assert native.source_path("systems.sim._arenas").name == "_arenas.c"
    assert "no build" in native.check_build(tmp_path / "missing", hashes)
    _manifest(tmp_path, hashes)
    assert native.check_build(tmp_path, hashes) is None
    assert native.plan({}, tmp_path).active
    assert native.plan({native.ENV_SWITCH: "0"}, tmp_path).reason == "DISAGG_SIM_NATIVE=0"
    _manifest(tmp_path, {**hashes, "systems.sim.instance": "0" * 64})
    why = native.check_build(tmp_path, hashes)
    assert why is not None and "systems.sim.instance changed" in why and "native_build" in why
    assert not native.plan({}, tmp_path).active
    (tmp_path / native.MANIFEST).write_text("{not json", encoding="utf-8")
    assert "unreadable" in native.check_build(tmp_path, hashes)


def test_the_finder_loads_only_the_compiled_modules(tmp_path: Path) -> None:
    finder = native.NativeFinder(tmp_path)
    assert finder.find_spec("json") is None and finder.find_spec("systems.sim.simulation") is None
    assert finder.find_spec("systems.sim.instance") is None  # listed, but not in this (empty) build
    folder = tmp_path / "systems" / "sim"
    folder.mkdir(parents=True)
    (folder / f"instance{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    spec = finder.find_spec("systems.sim.instance")
    assert spec is not None and Path(spec.origin).parent == folder
    assert isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)


def test_a_missing_toolchain_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_build.shutil, "which", lambda name: None)
    with pytest.raises(native_build.NativeBuildError, match="no C compiler"):
        native_build.check_toolchain()
