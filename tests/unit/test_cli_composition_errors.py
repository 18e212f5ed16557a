"""Hydra's own errors about the command line or the config tree: one line naming the key, exit status 2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

from harness.__main__ import composition_error
from harness.config import RENAMED_KEYS
from systems.compiled_core import FALLBACK_WARNING
from vocab.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("override, needle", [
    ("workload.no_such_key=1", "workload.no_such_key"),
    ("seed=abc", "seed=abc"),
    ("system=no_such_system", "system/no_such_system"),
    ("sweep.capacity_fractions=[0.5]", "sweep.capacity_fractions: renamed to sweep.saturation_fractions"),
])
@pytest.mark.integration
def test_a_bad_override_is_one_line_naming_it_with_exit_2(tmp_path, override, needle):
    proc = subprocess.run([sys.executable, "-m", "harness", override, f"results_dir={tmp_path}"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if FALLBACK_WARNING not in line]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert not list(tmp_path.rglob("summary.json"))  # nothing composed, nothing written


def test_other_exceptions_are_not_composition_errors():
    assert composition_error(RuntimeError("a bug")) is None
    wrapped = ConfigCompositionException("Could not override 'a.b'.")
    wrapped.__cause__ = KeyError("Key 'b' not in 'A'")
    assert composition_error(wrapped) == "Could not override 'a.b'; \"Key 'b' not in 'A'\""


@pytest.mark.parametrize("old, new", sorted(RENAMED_KEYS.items()))
def test_an_old_key_is_refused_with_its_new_name(compose, old, new):
    value = "[1]" if "capacit" in old else "ray"
    with pytest.raises(ConfigError, match=rf"^{re.escape(old)}: renamed to {re.escape(new)} "):
        compose([f"{old}={value}"], validated=False)
    with pytest.raises(ConfigError, match=rf"^{re.escape(old)}: renamed to {re.escape(new)} "):
        compose([f"+{old}={value}"])  # an added key passes Hydra, and validation refuses it
    wrapped = ConfigCompositionException(f"Could not override '{old}'.")
    assert composition_error(wrapped) == f"{old}: renamed to {new} (docs/architecture.md says what each word means)"
