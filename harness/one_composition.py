"""One Hydra composition for a single run (``python -m harness`` without ``--multirun``).

Hydra's ``main`` composes the config twice for a plain run: once to read ``hydra.mode`` (``get_mode``,
composed as for a multirun, its result thrown away) and once more for the run itself, about a sixth of a
second each. :func:`install` makes ``get_mode`` compose the way the run will (``RunMode.RUN``, sweep
overrides validated) and hands that config to the run's composition instead of composing again.

The run composes with the same overrides plus ``hydra.mode=RUN`` when the config leaves the mode unset (what
Hydra's ``_run_app`` appends); the kept config gets exactly what that override does (``hydra.mode`` set, the
override listed in ``hydra.overrides.hydra``), so the job, its ``.hydra/`` files and the callbacks see the
same config as before. Everything else is Hydra's own path, unchanged:

* a composition that fails in run mode (a sweep override ``a=1,2``, a missing group default, a bad key) falls
  back to Hydra's ``get_mode``, so the error, or the multirun, is what it was;
* ``--multirun``, a config whose ``hydra.mode`` is ``MULTIRUN``, ``--cfg``, ``--help``, ``--info`` and
  shell completion compose as Hydra does (the kept config is handed over only to the very next composition,
  and only when it asks for exactly the same run);
* the sweep's jobs (``load_sweep_config``) compose each job as before.
"""

from __future__ import annotations

from typing import Any, Optional

from hydra._internal.hydra import Hydra
from hydra.types import RunMode
from omegaconf import DictConfig

RUN_OVERRIDE = "hydra.mode=RUN"  # what hydra._internal.utils._run_app appends when the config sets no mode
_MARK = "_harness_composes_once"


def install() -> None:
    """Make Hydra compose a single run's config once (idempotent; the process's ``Hydra`` class is patched)."""
    if getattr(Hydra.get_mode, _MARK, False):
        return
    hydra_get_mode = Hydra.get_mode

    def get_mode(self: Hydra, config_name: Optional[str], overrides: list[str]) -> Any:
        loader = self.config_loader
        try:
            cfg = loader.load_configuration(config_name=config_name, overrides=list(overrides),
                                            run_mode=RunMode.RUN)
        except Exception:  # noqa: BLE001 - Hydra's own get_mode decides (and its run reports the error)
            return hydra_get_mode(self, config_name, overrides)
        mode = cfg.hydra.mode
        if mode is None:
            _keep_for_next(loader, cfg, config_name, [*overrides, RUN_OVERRIDE], add_run_override=True)
        elif mode == RunMode.RUN:
            _keep_for_next(loader, cfg, config_name, list(overrides), add_run_override=False)
        return mode

    setattr(get_mode, _MARK, True)
    Hydra.get_mode = get_mode  # type: ignore[method-assign]


def _keep_for_next(loader: Any, cfg: DictConfig, kept_name: Optional[str], kept_overrides: list[str],
                   add_run_override: bool) -> None:
    """Answer ``loader``'s next ``load_configuration`` with ``cfg`` when it asks for the run of ``kept_name``
    with ``kept_overrides``; any other request composes as usual. Either way only the next call is answered."""
    compose = loader.load_configuration  # the bound method of the loader's class

    def load_configuration(config_name: Optional[str], overrides: list[str], run_mode: RunMode,
                           from_shell: bool = True, validate_sweep_overrides: bool = True) -> DictConfig:
        del loader.load_configuration  # back to the class's method for every later composition
        if (config_name == kept_name and list(overrides) == kept_overrides and run_mode == RunMode.RUN
                and from_shell and validate_sweep_overrides):
            if add_run_override:
                cfg.hydra.mode = RunMode.RUN
                cfg.hydra.overrides.hydra.append(RUN_OVERRIDE)
            return cfg
        return compose(config_name=config_name, overrides=overrides, run_mode=run_mode, from_shell=from_shell,
                       validate_sweep_overrides=validate_sweep_overrides)

    loader.load_configuration = load_configuration
