"""Which figures each kind of job has, and rendering them for one job folder."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from figures.cache_hit import plot_global_vs_local, plot_hit_rate_curve
from figures.disagg_compare import plot_disagg_comparison
from figures.serving import plot_latency_vs_rate
from figures.sim_studies import plot_sim_study

log = logging.getLogger(__name__)

FIGURES_BY_KIND: Mapping[str, tuple[Callable[[Path], list[Path]], ...]] = MappingProxyType({
    "cache_study": (plot_hit_rate_curve, plot_global_vs_local),
    "serve": (plot_latency_vs_rate,),
    "sim_study": (plot_sim_study,),
    "workload": (),
    "compare": (plot_disagg_comparison,),
})


def render_job(job_dir: Path, kind: str) -> list[Path]:
    """Render every figure known for ``kind`` from the tables in ``job_dir``; return the files written."""
    written: list[Path] = []
    for plot in FIGURES_BY_KIND.get(kind, ()):
        written.extend(plot(Path(job_dir)))
    for path in written:
        log.debug("wrote %s", path)
    return written
