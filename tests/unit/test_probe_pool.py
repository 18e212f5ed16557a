"""The probe pool (harness/probe_pool.py): results in input order, worker log records replayed here,
errors raised here, the backend chosen from the Hydra launcher's real config (the plugins' own
dataclasses) or the explicit setting, and a clear one-line error when no Ray cluster answers."""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from pathlib import Path

import pytest

from harness.probe_pool import (
    PROBE_JOBS_FOLDER,
    InProcessPool,
    JoblibPool,
    Launcher,
    RayPool,
    RayUnavailable,
    SubmititPool,
    check_parallel,
    choose_backend,
    current_launcher,
    make_pool,
    probe_pool,
    replay,
    run_captured,
)
from vocab.errors import ConfigError

log = logging.getLogger("tests.probe_pool")


def square_plus(offset: int, x: int) -> tuple[int, int]:
    """x * x + offset and the process it ran in; logs one line per call."""
    log.info("square of %d", x)
    return x * x + offset, os.getpid()


def fail_on(bad: int, x: int) -> int:
    if x == bad:
        raise ConfigError(f"study.params.x: {x} is bad")
    return x


def slow_first(x: int) -> int:
    """The first task finishes last: the results must still come back in input order."""
    time.sleep(0.5 if x == 0 else 0.0)
    return x


# -- running -------------------------------------------------------------------------------------------
def test_in_process_pool_runs_here_in_order(caplog):
    caplog.set_level(logging.INFO, logger="tests.probe_pool")
    out = InProcessPool().map(functools.partial(square_plus, 1), [3, 1, 2])
    assert [v for v, _ in out] == [10, 2, 5] and {pid for _, pid in out} == {os.getpid()}
    assert [r.getMessage() for r in caplog.records if r.name == log.name] == [f"square of {x}" for x in (3, 1, 2)]


@pytest.mark.integration
def test_joblib_pool_runs_in_worker_processes_in_input_order(caplog):
    caplog.set_level(logging.INFO)
    items = list(range(6))
    out = JoblibPool(workers=2).map(functools.partial(square_plus, 1), items, desc="squares")
    assert [v for v, _ in out] == [x * x + 1 for x in items]
    assert os.getpid() not in {pid for _, pid in out}  # it ran elsewhere
    replayed = [r for r in caplog.records if r.name == log.name]
    assert [r.getMessage() for r in replayed] == [f"square of {x}" for x in items]  # in input order
    assert {r.process for r in replayed} == {pid for _, pid in out}  # each record keeps its worker's pid
    assert JoblibPool(workers=2).map(slow_first, [0, 1, 2, 3]) == [0, 1, 2, 3]


@pytest.mark.integration
def test_a_workers_error_is_raised_here_with_its_type():
    with pytest.raises(ConfigError, match=r"^study\.params\.x: 2 is bad"):
        JoblibPool(workers=2).map(functools.partial(fail_on, 2), [0, 1, 2, 3])


def test_captured_records_replay_with_their_level_and_logger(caplog):
    caplog.set_level(logging.DEBUG)

    def work(x: int) -> int:
        logging.getLogger("tests.a").warning("warn %s", x)
        logging.getLogger("tests.b").debug("hidden %s", x)
        return x + 1

    outcome = run_captured(work, logging.INFO, 4)
    assert [(e["name"], e["levelname"], e["msg"]) for e in outcome.records] == [("tests.a", "WARNING", "warn 4")]
    assert replay(outcome) == 5
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [("tests.a", logging.WARNING, "warn 4")]


@pytest.mark.integration
def test_submitit_local_jobs_write_under_the_job_folder(tmp_path, monkeypatch):
    # the jobs are fresh interpreters: they import this test module by name, as pytest put it on sys.path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    pool = SubmititPool(tmp_path / PROBE_JOBS_FOLDER, cluster="local", parameters={"timeout_min": 5})
    out = pool.map(functools.partial(square_plus, 0), [2, 3])
    assert [v for v, _ in out] == [4, 9] and os.getpid() not in {pid for _, pid in out}
    assert any((tmp_path / PROBE_JOBS_FOLDER).iterdir())


# -- choosing ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "multirun", "backend"), [
    ("", False, "none"), ("BasicLauncher", False, "joblib"), ("BasicLauncher", True, "joblib"),
    ("JoblibLauncher", False, "joblib"), ("JoblibLauncher", True, "none"), ("RayLauncher", True, "ray"),
    ("SlurmLauncher", False, "slurm"), ("LocalLauncher", False, "submitit_local"),
])
def test_auto_follows_the_launcher(name, multirun, backend):
    assert choose_backend("auto", Launcher(name, {}, multirun), cpus=2) == backend
    assert choose_backend("none", Launcher(name, {}, multirun), cpus=2) == "none"  # an explicit setting wins


def test_auto_under_the_basic_launcher_stays_in_process_on_one_cpu_or_when_the_study_says():
    assert choose_backend("auto", Launcher("BasicLauncher", {}, False), cpus=1) == "none"
    assert choose_backend("auto", Launcher("BasicLauncher", {}, False), cpus=16) == "joblib"
    assert choose_backend("auto", Launcher("BasicLauncher", {}, False), cpus=16, local_pool=False) == "none"
    assert choose_backend("auto", Launcher("RayLauncher", {}, True), cpus=16, local_pool=False) == "ray"


@pytest.mark.parametrize(("mode", "workers", "key"), [
    ("threads", None, "study.params.parallel"), ("joblib", 0, "study.params.parallel_workers"),
    ("joblib", True, "study.params.parallel_workers"), ("ray", "2", "study.params.parallel_workers"),
])
def test_bad_settings_name_the_key(mode, workers, key):
    with pytest.raises(ConfigError, match=rf"^{key}"):
        check_parallel(mode, workers)


def hydra_launcher(tmp_path: Path, overrides: list[str]) -> Launcher:
    """``current_launcher()`` inside a Hydra context composed with the launcher plugins' own configs."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    (conf / "config.yaml").write_text("x: 1\n")
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    try:
        return current_launcher()
    finally:
        HydraConfig.instance().cfg = None


def test_outside_hydra_probes_run_in_process():
    assert current_launcher() == Launcher()
    assert isinstance(make_pool("auto"), InProcessPool)


def test_joblib_launcher_gives_its_n_jobs(tmp_path):
    launcher = hydra_launcher(tmp_path, ["hydra/launcher=joblib", "hydra.launcher.n_jobs=3"])
    assert launcher.name == "JoblibLauncher" and not launcher.multirun
    pool = make_pool("auto", launcher=launcher)
    assert isinstance(pool, JoblibPool) and pool.workers == 3
    assert make_pool("auto", workers=2, launcher=launcher).workers == 2  # parallel_workers caps it
    assert isinstance(make_pool("none", launcher=launcher), InProcessPool)


def test_ray_launcher_gives_its_address(tmp_path):
    launcher = hydra_launcher(tmp_path, ["hydra/launcher=ray", "+hydra.launcher.ray.init.address=10.1.2.3:6379"])
    pool = make_pool("auto", launcher=launcher)
    assert isinstance(pool, RayPool) and pool.init == {"address": "10.1.2.3:6379"}
    assert "10.1.2.3:6379" in pool.describe()


def test_slurm_launcher_gives_its_slurm_settings(tmp_path):
    launcher = hydra_launcher(tmp_path, ["hydra/launcher=submitit_slurm", "hydra.launcher.partition=cpu",
                                         "hydra.launcher.account=lab", "hydra.launcher.timeout_min=30",
                                         "hydra.launcher.cpus_per_task=2"])
    pool = make_pool("auto", folder=tmp_path / "job", launcher=launcher)
    assert isinstance(pool, SubmititPool) and pool.cluster == "slurm"
    assert pool.folder == tmp_path / "job" / PROBE_JOBS_FOLDER
    assert {k: pool.parameters[k] for k in ("slurm_partition", "slurm_account", "timeout_min", "cpus_per_task")} == \
        {"slurm_partition": "cpu", "slurm_account": "lab", "timeout_min": 30, "cpus_per_task": 2}
    local = make_pool("auto", launcher=hydra_launcher(tmp_path, ["hydra/launcher=submitit_local"]))
    assert isinstance(local, SubmititPool) and local.cluster == "local"


def test_explicit_joblib_without_a_joblib_launcher_uses_every_cpu():
    pool = make_pool("joblib", launcher=Launcher("SlurmLauncher", {"n_jobs": 7, "partition": "x"}))
    assert isinstance(pool, JoblibPool) and pool.workers is None


@pytest.mark.integration
@pytest.mark.parametrize("source", ["launcher", "RAY_ADDRESS"])
def test_no_ray_at_the_address_is_one_line_naming_it(source, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    monkeypatch.setenv("RAY_ADDRESS", address if source == "RAY_ADDRESS" else "")
    init = {"address": address} if source == "launcher" else {"address": None}
    launcher = Launcher("RayLauncher", {"ray": {"init": init, "remote": {}}})
    with pytest.raises(RayUnavailable) as info, probe_pool("auto", launcher=launcher) as pool:
        assert isinstance(pool, RayPool)
        pool.map(functools.partial(square_plus, 0), [1])
    message = str(info.value)
    assert "\n" not in message and address in message and "python -m tests.clusters.ray_local up" in message
