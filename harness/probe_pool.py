"""Running independent probe tasks in parallel: ``pool.map(fn, items)`` returns ``[fn(item) ...]`` in input
order, computed in this process, in joblib (loky) worker processes, as Ray tasks or as submitit jobs (Slurm
or local processes). The studies that search many independent candidates (the placement search, the
Splitwise provisioning study) send each candidate's whole search through one pool; ``docs/parallel_probes.md``
says how the backend is chosen.

The backend is ``study.params.parallel``: ``none`` (in-process, the default outside Hydra), ``joblib``,
``ray``, ``slurm``, ``submitit_local``, or ``auto`` (what the configured Hydra launcher is: the joblib,
Ray or submitit launcher; under Hydra's basic launcher joblib over the host's CPUs for a study whose tasks
outweigh starting the workers, else in-process). Worker counts and cluster settings come from the launcher's config (``hydra.launcher.n_jobs``,
``hydra.launcher.ray.init``, the Slurm partition, account, time limit and CPUs);
``study.params.parallel_workers`` caps the workers.

``fn`` must be picklable for every backend but ``none``: a module-level function, or a
``functools.partial`` of one, over plain data. A worker's log records are sent back with its result and
logged here, in input order, so the job's log reads as an in-process run's does (each task's records
together). joblib, Ray and submitit are imported only when their backend runs.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol, TypeVar

from vocab.errors import ConfigError, UserError

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

MODES = ("auto", "none", "joblib", "ray", "slurm", "submitit_local")
RAY_START_HINT = "start one with `python -m tests.clusters.ray_local up` (or `ray start --head`)"
RAY_ENV_HINT = 'export what it needs: eval "$(python -m tests.clusters.ray_local env)"'
RAY_LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # unset: Ray dials the host's address for 127.0.0.1
# Hydra launcher class names (the last part of hydra.launcher._target_) -> the probe backend they imply
LAUNCHER_BACKENDS = {"JoblibLauncher": "joblib", "RayLauncher": "ray", "RayAWSLauncher": "ray",
                     "SlurmLauncher": "slurm", "LocalLauncher": "submitit_local"}
# submitit launcher keys passed on to the probe jobs (AutoExecutor parameter names)
SUBMITIT_KEYS = {"timeout_min": "timeout_min", "cpus_per_task": "cpus_per_task", "mem_gb": "mem_gb",
                 "partition": "slurm_partition", "account": "slurm_account", "qos": "slurm_qos",
                 "comment": "slurm_comment", "constraint": "slurm_constraint", "exclude": "slurm_exclude",
                 "mem_per_cpu": "slurm_mem_per_cpu", "additional_parameters": "slurm_additional_parameters",
                 "setup": "slurm_setup", "array_parallelism": "slurm_array_parallelism"}
BASIC_LAUNCHER = "BasicLauncher"  # Hydra's own: one job at a time in this process
PROBE_JOBS_FOLDER = "probe_jobs"  # submitit's folder under the job folder


class RayUnavailable(UserError, ConnectionError):
    """No Ray cluster answers at the configured address."""


class SubmissionFailed(UserError, RuntimeError):
    """submitit could not submit the probe jobs (e.g. no Slurm controller answers)."""


# -- settings -----------------------------------------------------------------------------------------
def check_parallel(mode: Any, workers: Any, key: str = "study.params") -> None:
    """``ConfigError`` unless ``mode`` is one of :data:`MODES` and ``workers`` null or an integer >= 1."""
    if mode not in MODES:
        raise ConfigError(f"{key}.parallel: expected one of {', '.join(MODES)}, got {mode!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"{key}.parallel_workers: must be an integer >= 1 or null, got {workers!r}")


@dataclass(frozen=True)
class Launcher:
    """What the probe pool reads of the running job's Hydra launcher: its class name, its config (plain
    data; interpolations that cannot be resolved are left out) and whether the job is part of a multirun."""

    name: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    multirun: bool = False


def current_launcher() -> Launcher:
    """The running Hydra job's launcher (an empty :class:`Launcher` outside a Hydra app)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hydra = HydraConfig.get()
    except (ImportError, ValueError):
        return Launcher()
    from hydra.types import RunMode
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    node = hydra.launcher
    config: dict[str, Any] = {}
    for key in node:
        try:
            value = node[key]
            config[str(key)] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except OmegaConfBaseException:  # an interpolation only the launcher resolves (e.g. hydra.sweep.dir)
            continue
    target = str(config.get("_target_") or "")
    return Launcher(target.rsplit(".", 1)[-1], config, hydra.mode == RunMode.MULTIRUN)


def usable_cpus() -> int:
    """The CPUs this process may use (its affinity where the OS says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def choose_backend(mode: str, launcher: Launcher, cpus: Optional[int] = None, local_pool: bool = True) -> str:
    """The :data:`MODES` value ``auto`` resolves to (``mode`` itself otherwise): the backend of the
    configured launcher; under Hydra's basic launcher, joblib over this host's CPUs when it has more than one
    (``cpus``: :func:`usable_cpus`) and the study's tasks outweigh starting the workers (``local_pool``);
    ``none`` outside Hydra and for a job that a joblib launcher runs in a multirun (its sweep already fills the
    host's cores)."""
    if mode != "auto":
        return mode
    if launcher.name == BASIC_LAUNCHER:
        return "joblib" if local_pool and (usable_cpus() if cpus is None else cpus) > 1 else "none"
    backend = LAUNCHER_BACKENDS.get(launcher.name, "none")
    if backend == "joblib" and launcher.multirun:
        log.info("probes run in-process: this job is one of a joblib multirun (study.params.parallel=joblib "
                 "fans them out anyway)")
        return "none"
    return backend


# -- the pools ----------------------------------------------------------------------------------------
class Pool(Protocol):
    """What the studies use: ``map(fn, items, desc=...)`` -> ``[fn(item) for item in items]``."""

    name: str
    progress: bool

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, desc: str = "") -> list[R]: ...

    def describe(self) -> str: ...


class InProcessPool:
    """Runs the tasks here, one after the other (today's behaviour; log records go out as they happen)."""

    name = "none"
    workers = 1

    def __init__(self, progress: bool = False) -> None:
        self.progress = progress

    def describe(self) -> str:
        return "this process"

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, desc: str = "") -> list[R]:
        from tqdm.auto import tqdm

        return [fn(item) for item in tqdm(items, desc=desc, unit="task", disable=not self.progress)]


@dataclass
class _Outcome:
    """A task's result and the log records it emitted (as plain dicts)."""

    value: Any
    records: list[dict[str, Any]]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        entry = dict(record.__dict__)
        entry["msg"], entry["args"] = record.getMessage(), None
        if record.exc_info:
            entry["exc_text"] = logging.Formatter().formatException(record.exc_info)
        entry["exc_info"] = None
        entry.pop("message", None)
        self.records.append({k: v for k, v in entry.items() if _plain(v)})


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def run_captured(fn: Callable[[T], R], level: int, item: T) -> _Outcome:
    """``fn(item)`` in a worker, with every log record at ``level`` or above kept for the caller (the
    worker's own handlers are detached meanwhile, so nothing is printed twice)."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    capture = _Capture()
    root.handlers[:] = [capture]
    root.setLevel(level)
    try:
        value = fn(item)
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    return _Outcome(value, capture.records)


def replay(outcome: _Outcome) -> Any:
    """Log a worker's records here (their original time, logger and level) and return its result."""
    for entry in outcome.records:
        record = logging.makeLogRecord(entry)
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)
    return outcome.value


class _RemotePool:
    """Shared by the pools that run tasks elsewhere: log capture around ``fn`` and a progress bar."""

    name = ""
    workers: Optional[int] = None
    progress = False

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, desc: str = "") -> list[R]:
        from functools import partial

        from tqdm.auto import tqdm

        if not items:
            return []
        task = partial(run_captured, fn, logging.getLogger().getEffectiveLevel())
        start = time.perf_counter()
        out = []
        with tqdm(total=len(items), desc=desc, unit="task", disable=not self.progress) as bar:
            for outcome in self._run(task, list(items)):
                out.append(replay(outcome))
                bar.update()
        log.info("%s: %d tasks on %s in %.1f s", desc or "probes", len(items), self.describe(),
                 time.perf_counter() - start)
        return out

    def describe(self) -> str:
        return self.name

    def _run(self, task: Callable[[Any], _Outcome], items: list[Any]) -> Iterator[_Outcome]:
        raise NotImplementedError


class JoblibPool(_RemotePool):
    """joblib's loky worker processes (``workers``: None or -1 for every CPU)."""

    name = "joblib"

    def __init__(self, workers: Optional[int] = None, progress: bool = False) -> None:
        self.workers = workers
        self.progress = progress

    def describe(self) -> str:
        return f"joblib ({self.workers if self.workers and self.workers > 0 else 'all CPUs'} processes)"

    def _run(self, task: Callable[[Any], _Outcome], items: list[Any]) -> Iterator[_Outcome]:
        from joblib import Parallel, delayed

        n_jobs = self.workers if self.workers else -1
        parallel = Parallel(n_jobs=n_jobs, backend="loky", batch_size=1, pre_dispatch="all", return_as="generator")
        yield from parallel(delayed(task)(item) for item in items)


def _ray_target(address: str) -> Optional[tuple[str, int]]:
    """(host, port) of a ``host:port`` or ``ray://host:port`` address (None for ``auto``, ``local`` ...)."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RayPool(_RemotePool):
    """Ray tasks (one CPU each) on the cluster at ``init["address"]`` (else ``$RAY_ADDRESS``; neither:
    Ray's own rule, which starts a local instance). ``workers`` caps the tasks in flight."""

    name = "ray"

    def __init__(self, init: Optional[Mapping[str, Any]] = None, workers: Optional[int] = None,
                 progress: bool = False) -> None:
        self.init = {k: v for k, v in dict(init or {}).items() if v is not None}
        self.workers = workers
        self.progress = progress
        self._started = False

    def describe(self) -> str:
        return f"Ray at {self.init.get('address') or os.environ.get('RAY_ADDRESS') or 'a local instance'}"

    def connect(self) -> None:
        """Join the cluster (once); ``RayUnavailable`` naming the address when nothing answers there."""
        import ray

        if ray.is_initialized():  # e.g. this job is itself a Ray launcher's task
            return
        address = self.init.get("address") or os.environ.get("RAY_ADDRESS")
        target = _ray_target(str(address)) if address else None
        if target is not None:
            try:
                socket.create_connection(target, timeout=5.0).close()
            except OSError as exc:
                raise RayUnavailable(f"study.params.parallel=ray: no Ray cluster answers at {address} ({exc}); "
                                     f"{RAY_START_HINT}") from None
            if _loopback(target[0]) and RAY_LOOPBACK_VAR not in os.environ:
                # Ray would dial this host's network address instead, where a loopback cluster never answers,
                # and retry for ever
                raise RayUnavailable(f"study.params.parallel=ray: Ray at {address} is on loopback, but "
                                     f"{RAY_LOOPBACK_VAR} is not set; {RAY_ENV_HINT}")
        try:
            ray.init(**{"log_to_driver": False, **self.init, **({"address": address} if address else {})})
        except ConnectionError as exc:
            raise RayUnavailable(f"study.params.parallel=ray: cannot connect to Ray at {address or 'auto'} "
                                 f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                                 f"{RAY_START_HINT}, or {RAY_ENV_HINT}") from None
        self._started = True

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False

    def _run(self, task: Callable[[Any], _Outcome], items: list[Any]) -> Iterator[_Outcome]:
        import ray

        self.connect()
        remote = ray.remote(num_cpus=1, max_retries=0)(_ray_call)
        task_ref = ray.put(task)
        limit = self.workers or len(items)
        refs: list[Any] = []
        for i, item in enumerate(items):
            if i >= limit:  # at most `limit` in flight: wait until i - limit + 1 have finished
                ray.wait(refs, num_returns=i - limit + 1, fetch_local=False)
            refs.append(remote.remote(task_ref, item))
        for ref in refs:
            try:
                yield ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(exc.cause, Exception) else None
                if cause is not None:
                    raise cause from exc
                raise


def _ray_call(task: Callable[[Any], _Outcome], item: Any) -> _Outcome:
    return task(item)


class SubmititPool(_RemotePool):
    """One submitit job per task, as a job array (``cluster="slurm"``) or local processes (``"local"``),
    with ``parameters`` (AutoExecutor names: ``slurm_partition``, ``timeout_min``, ...) and the job files
    under ``folder``."""

    name = "submitit"

    def __init__(self, folder: Path, cluster: str = "slurm", parameters: Optional[Mapping[str, Any]] = None,
                 workers: Optional[int] = None, progress: bool = False) -> None:
        self.folder = Path(folder)
        self.cluster = cluster
        self.parameters = {k: v for k, v in dict(parameters or {}).items() if v is not None}
        self.workers = workers
        self.progress = progress

    def describe(self) -> str:
        where = self.parameters.get("slurm_partition", "the default partition")
        return f"submitit ({'Slurm, ' + str(where) if self.cluster == 'slurm' else 'local processes'})"

    def _run(self, task: Callable[[Any], _Outcome], items: list[Any]) -> Iterator[_Outcome]:
        import submitit

        executor = submitit.AutoExecutor(folder=self.folder / "%j", cluster=self.cluster)
        params = {"timeout_min": 60, "cpus_per_task": 1, "name": "probes", **self.parameters}
        if self.workers:
            params["slurm_array_parallelism"] = self.workers
        executor.update_parameters(**params)
        try:
            jobs = executor.map_array(task, items)
        except (submitit.core.utils.FailedJobError, OSError) as exc:
            last = [line for line in str(exc).splitlines() if line.strip()][-1:] or [type(exc).__name__]
            raise SubmissionFailed(f"study.params.parallel: submitting the probe jobs to {self.cluster} failed: "
                                   f"{last[0]}") from None
        log.info("submitted %d probe jobs (%s), files in %s", len(jobs), jobs[0].job_id if jobs else "-", self.folder)
        for job in jobs:
            yield job.result()


# -- choosing one ----------------------------------------------------------------------------------------
def make_pool(mode: str = "auto", workers: Optional[int] = None, folder: Optional[Path] = None,
              launcher: Optional[Launcher] = None, progress: bool = False, local_pool: bool = True) -> Pool:
    """The pool for ``mode`` (:data:`MODES`) under ``launcher`` (default: the running job's), with at
    most ``workers`` workers (None: the launcher's ``n_jobs`` for joblib, every CPU otherwise); submitit's
    job files go under ``folder/probe_jobs``; ``progress`` shows a progress bar per ``map``; ``local_pool``:
    whether ``auto`` under the basic launcher starts joblib workers (:func:`choose_backend`)."""
    check_parallel(mode, workers)
    launcher = current_launcher() if launcher is None else launcher
    backend = choose_backend(mode, launcher, local_pool=local_pool)
    own = LAUNCHER_BACKENDS.get(launcher.name) == backend  # the launcher's settings apply to this backend
    config = launcher.config if own else {}
    if backend == "joblib":
        n_jobs = config.get("n_jobs")
        return JoblibPool(workers or (int(n_jobs) if isinstance(n_jobs, int) else None), progress)
    if backend == "ray":
        init = (config.get("ray") or {}).get("init") or {}
        return RayPool(init, workers, progress)
    if backend in ("slurm", "submitit_local"):
        base = Path(folder) if folder is not None else Path.cwd()
        parameters = {SUBMITIT_KEYS[k]: v for k, v in config.items() if k in SUBMITIT_KEYS}
        return SubmititPool(base / PROBE_JOBS_FOLDER, "slurm" if backend == "slurm" else "local", parameters,
                            workers, progress)
    return InProcessPool(progress)


@contextmanager
def probe_pool(mode: str = "auto", workers: Optional[int] = None, folder: Optional[Path] = None,
               launcher: Optional[Launcher] = None, progress: bool = False, local_pool: bool = True) -> Iterator[Pool]:
    """:func:`make_pool` as a context manager (a Ray connection it opened is closed on exit)."""
    pool = make_pool(mode, workers, folder, launcher, progress, local_pool)
    if pool.name != "none":
        log.info("probes run on %s", pool.describe())
    try:
        yield pool
    finally:
        if isinstance(pool, RayPool):
            pool.close()
