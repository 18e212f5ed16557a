"""``python -m figures``: regenerate every known figure from the job folders under ``results/``.

Only finished jobs (``summary.json`` with ``status: ok``) are drawn. Nothing is run or recomputed:
each figure is drawn from the tables its job wrote. A figure that fails is logged and the others are
drawn; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from figures.render import KINDS, FigureError, render_job
from figures.study_tables import finished_jobs

log = logging.getLogger("figures")


def find_jobs(results_dir: Path, experiment: str | None = None) -> list[tuple[Path, str]]:
    """(job folder, kind) of every finished job under ``results_dir``."""
    return [(folder, str(summary.get("kind", ""))) for folder, summary in finished_jobs(results_dir)
            if not experiment or summary.get("experiment") == experiment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m figures", description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=Path("results"), help="root of the job folders")
    parser.add_argument("--experiment", default=None, help="only jobs of this experiment")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.results_dir.is_dir():
        log.error("results directory %s does not exist: run a job first (make run)", args.results_dir)
        return 1
    count, failed = 0, 0
    for job_dir, kind in find_jobs(args.results_dir, args.experiment):
        if kind not in KINDS:
            log.warning("%s: no figures known for job kind %r", job_dir, kind)
            continue
        try:
            paths = render_job(job_dir, kind)
        except FigureError as exc:
            log.error("%s: %s", job_dir, exc)
            failed += 1
            continue
        for path in paths:
            log.info("%s", path)
            count += 1
    log.info("%d files written%s", count, f"; {failed} job(s) with failed figures" if failed else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
