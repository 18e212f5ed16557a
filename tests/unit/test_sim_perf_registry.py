"""Building performance models by name, and finding the public profiles (search order, not-found message)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from systems.config import ModelConfig
from systems.hardware_catalog import CONF_DIR, load_hardware
from systems.sim.perf import profiles
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.profiles import SPLITWISE_CSV, ProfileNotFoundError, find_profile, search_dirs
from systems.sim.perf.registry import PERF_MODELS, build_perf_model


def load_model(name: str) -> ModelConfig:
    node = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml"))
    return OmegaConf.to_object(node)


@pytest.mark.parametrize("kind,model,hardware,tp", [("roofline", "llama3_70b", "h200", 2),
                                                    ("distserve", "opt_66b", "a100_80gb", 4),
                                                    ("splitwise", "llama2_70b", "h100_80gb_pcap", 8)])
def test_every_kind_builds(kind, model, hardware, tp):
    assert kind in PERF_MODELS
    perf = build_perf_model(kind, load_model(model), load_hardware(hardware), InstanceShape(hardware, tp))
    assert isinstance(perf, PerfModel) and perf.name == kind
    assert perf.kv_capacity_tokens > 0
    assert 0 < perf.prefill_time_s(1024, 1024**2) < 10 and 0 < perf.decode_step_time_s(8, 8000.0) < 1
    assert perf.describe()["name"] == kind


def test_unknown_kind_and_parameter_are_rejected():
    model, hw, shape = load_model("llama3_8b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb")
    with pytest.raises(ValueError, match="roofline, distserve, splitwise"):
        build_perf_model("vidur", model, hw, shape)
    with pytest.raises(ValueError, match="no_such_param"):
        build_perf_model("roofline", model, hw, shape, no_such_param=1)
    assert build_perf_model("roofline", model, hw, shape, overlap=0.5).overlap == 0.5
    dist = build_perf_model("distserve", load_model("opt_13b"), hw, shape, engine="vllm")
    assert dist.engine == "vllm"


def test_unsupported_combination_names_what_exists():
    with pytest.raises(ValueError, match="tp 2, 3, 4, 8"):
        build_perf_model("distserve", load_model("opt_66b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 1))


def _put(root, rel=SPLITWISE_CSV):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x\n")
    return path


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No profiles anywhere: the cwd and the repo root point into an empty temporary tree."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.delenv(profiles.PROFILES_DIR_ENV, raising=False)
    monkeypatch.setattr(profiles, "_REPO_ROOT", tmp_path / "repo")
    return tmp_path


def test_search_order_explicit_env_data_shared(isolated, monkeypatch):
    explicit, env = _put(isolated / "explicit"), _put(isolated / "env")
    local = _put(isolated / "a" / "b" / "data" / "perf_profiles")
    shared = _put(isolated / "a" / "shared" / "perf_profiles")
    monkeypatch.setenv(profiles.PROFILES_DIR_ENV, str(isolated / "env"))
    assert find_profile(SPLITWISE_CSV, isolated / "explicit") == explicit
    assert find_profile(SPLITWISE_CSV) == env
    monkeypatch.delenv(profiles.PROFILES_DIR_ENV)
    assert find_profile(SPLITWISE_CSV) == local
    local.unlink()
    beside_repo = _put(isolated / "shared" / "perf_profiles")  # <repo root>/../shared/perf_profiles
    assert find_profile(SPLITWISE_CSV) == beside_repo
    beside_repo.unlink()
    assert find_profile(SPLITWISE_CSV) == shared  # ../shared/perf_profiles from the cwd
    assert search_dirs()[-2:] == [isolated / "shared" / "perf_profiles", isolated / "a" / "shared" / "perf_profiles"]


def test_missing_profile_names_file_dirs_and_upstream(isolated):
    with pytest.raises(FileNotFoundError) as info:
        find_profile(SPLITWISE_CSV)
    assert isinstance(info.value, ProfileNotFoundError)
    msg = str(info.value)
    assert SPLITWISE_CSV in msg and "Mutinifni/splitwise-sim" in msg and "data/perf_model.csv" in msg
    assert str(isolated / "a" / "b" / "data" / "perf_profiles") in msg
    with pytest.raises(FileNotFoundError, match="LLMServe/DistServe"):
        build_perf_model("distserve", load_model("opt_13b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb"))

