"""Which figures each kind of job has, and rendering them for one job folder, one way everywhere.

Every figure a job has is attempted; a figure that fails is logged with its traceback and, once the
others are drawn, :func:`render_job` raises :class:`FigureError` naming each failed figure. The job then
ends ``failed`` with that reason (its tables are already written), and ``python -m figures`` redraws it.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

log = logging.getLogger(__name__)

PlotFn = Callable[[Path], list[Path]]

# "module:function" of each figure; a module is imported only when a job of its kind is drawn, so that a
# serving run does not import seaborn or the study figures
FIGURES_BY_KIND: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "cache_study": ("figures.cache_hit:plot_hit_rate_curve", "figures.cache_hit:plot_global_vs_local"),
    "serve": ("figures.serving:plot_latency_vs_rate",),
    "workload": (),
    "compare": ("figures.disagg_compare:plot_disagg_comparison", "figures.mechanisms:plot_mechanisms"),
    "calibrate": ("figures.calibration:plot_calibration_fit",),
    "sim_vs_real": ("figures.calibration:plot_sim_vs_real", "figures.calibration:plot_calibration_fit"),
})
KINDS = (*FIGURES_BY_KIND, "sim_study")


def _plot_function(name: str) -> PlotFn:
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


class FigureError(RuntimeError):
    """One or more figures of a job could not be drawn (the message names each and why)."""


def plots_for(job_dir: Path, kind: str) -> tuple[PlotFn, ...]:
    """The figures a job of ``kind`` has (a simulator study's depend on its ``study.figure``)."""
    if kind == "sim_study":
        from figures.sim_studies import sim_study_plots

        return sim_study_plots(Path(job_dir))
    return tuple(_plot_function(name) for name in FIGURES_BY_KIND.get(kind, ()))


def render_job(job_dir: Path, kind: str) -> list[Path]:
    """Render every figure known for ``kind`` from the tables in ``job_dir``; return the files written.
    ``FigureError`` after all were attempted when any failed."""
    written: list[Path] = []
    failed: list[str] = []
    for plot in plots_for(Path(job_dir), kind):
        try:
            written.extend(plot(Path(job_dir)))
        except Exception as exc:  # noqa: BLE001 - every figure is attempted, then the failures are raised together
            log.exception("%s: figure %s failed", job_dir, plot.__name__)
            failed.append(f"{plot.__name__}: {type(exc).__name__}: {exc}")
    for path in written:
        log.debug("wrote %s", path)
    if failed:
        raise FigureError(f"{len(failed)} figure(s) failed ({'; '.join(failed)}); the tables are written, "
                          f"python -m figures --results-dir {Path(job_dir).parent} redraws them")
    return written
