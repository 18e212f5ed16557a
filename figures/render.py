"""Which figures each kind of job has, and rendering them for one job folder, one way everywhere.

Every figure a job has is attempted; a figure that fails is logged with its traceback and, once the
others are drawn, :func:`render_job` raises :class:`FigureError` naming each failed figure. The job then
ends ``failed`` with that reason (its tables are already written), and ``python -m figures`` redraws it.
Each kind's figure functions are imported when a job of that kind is drawn, so that a serving run does not
import the study figures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

log = logging.getLogger(__name__)

PlotFn = Callable[[Path], list[Path]]


def _serve_figures(job_dir: Path) -> tuple[PlotFn, ...]:
    from figures.serving import plot_latency_vs_rate

    return (plot_latency_vs_rate,)


def _cache_study_figures(job_dir: Path) -> tuple[PlotFn, ...]:
    from figures.cache_hit import plot_global_vs_local, plot_hit_rate_curve

    return (plot_hit_rate_curve, plot_global_vs_local)


def _compare_figures(job_dir: Path) -> tuple[PlotFn, ...]:
    from figures.disagg_compare import plot_disagg_comparison
    from figures.mechanisms import plot_mechanisms

    return (plot_disagg_comparison, plot_mechanisms)


def _calibrate_figures(job_dir: Path) -> tuple[PlotFn, ...]:
    from figures.calibration import plot_calibration_fit

    return (plot_calibration_fit,)


def _sim_vs_real_figures(job_dir: Path) -> tuple[PlotFn, ...]:
    from figures.calibration import plot_calibration_fit, plot_sim_vs_real

    return (plot_sim_vs_real, plot_calibration_fit)


def _sim_study_figures(job_dir: Path) -> tuple[PlotFn, ...]:
    from figures.sim_studies import sim_study_plots

    return sim_study_plots(job_dir)  # they depend on the study's ``study.figure``


def _no_figures(job_dir: Path) -> tuple[PlotFn, ...]:
    return ()


# the figure functions of each kind of job (``job=``), given its folder
FIGURES_BY_KIND: Mapping[str, Callable[[Path], tuple[PlotFn, ...]]] = MappingProxyType({
    "serve": _serve_figures, "cache_study": _cache_study_figures, "workload": _no_figures,
    "compare": _compare_figures, "calibrate": _calibrate_figures, "sim_vs_real": _sim_vs_real_figures,
    "sim_study": _sim_study_figures,
})
KINDS = tuple(FIGURES_BY_KIND)


class FigureError(RuntimeError):
    """One or more figures of a job could not be drawn (the message names each and why)."""


def plots_for(job_dir: Path, kind: str) -> tuple[PlotFn, ...]:
    """The figures a job of ``kind`` has."""
    figures = FIGURES_BY_KIND.get(kind)
    return figures(Path(job_dir)) if figures is not None else ()

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
