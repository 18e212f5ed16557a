"""Fingerprints of the simulator presets' outputs, to show a change left results alone (run by hand):
``python -m benchmarks.output_fingerprint [--results-dir results]``.

For the newest finished job of every experiment under the results folder (as the report picks it) it prints the sha256 of
``requests.parquet`` (the raw bytes) and of ``study.csv`` with its wall-clock columns (``*wall_s``, how
long a simulation took on this machine) removed and every other byte kept. Run it on two checkouts (or
before and after a change) on the same machine and compare the lines: identical lines mean identical
records and identical study tables.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from benchmarks.compare_checkouts import WALL_CLOCK_SUFFIX, csv_without_wall_clock
from figures.report import find_latest_jobs
from vocab.result_files import REQUESTS_FILE, STUDY_FILE


def study_fingerprint(path: Path) -> str:
    """sha256 of ``path`` (a CSV) without the columns whose name ends in ``wall_s``."""
    return hashlib.sha256(csv_without_wall_clock(path)).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.output_fingerprint",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    jobs = {name: job.path for name, job in find_latest_jobs([args.results_dir]).items()}
    if not jobs:
        print(f"no finished jobs under {args.results_dir}", file=sys.stderr)
        return 1
    for experiment, job in sorted(jobs.items()):
        requests = job / REQUESTS_FILE
        if requests.is_file():
            print(f"{hashlib.sha256(requests.read_bytes()).hexdigest()}  {experiment}/{REQUESTS_FILE}")
        study = job / STUDY_FILE
        if study.is_file():
            print(f"{study_fingerprint(study)}  {experiment}/{STUDY_FILE} (without *{WALL_CLOCK_SUFFIX})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
