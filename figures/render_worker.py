"""A figure process started beside a job (``python -m figures.render_worker KIND``).

It imports the plotting code of jobs of ``KIND`` (matplotlib and the figure modules: about half a second)
while the job itself runs in the parent process, then waits for one line on stdin: a JSON object with the
job folder (``{"job_dir": ...}``). It draws that folder's figures (:func:`figures.render.render_job`) and
answers with one JSON line on stdout: ``{"written": [paths]}`` or, when figures failed,
``{"error": message}`` (exit status 3). An empty stdin (the parent gave up) ends it without drawing.
Log records go to stderr; :mod:`harness.figure_worker` is the parent's side.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

EXIT_FIGURES_FAILED = 3


def _preload(kind: str) -> None:
    """Import what drawing a job of ``kind`` needs, before the job's tables exist."""
    import importlib

    from figures.render import FIGURES_BY_KIND

    modules = {name.partition(":")[0] for name in FIGURES_BY_KIND.get(kind, ())}
    if kind == "sim_study":
        modules.add("figures.sim_studies")
    for module in sorted(modules):
        importlib.import_module(module)
    _warm_up()


def _warm_up() -> None:
    """Draw a small figure with text and markers into memory: a process's first draw also imports the Agg
    canvas, loads the fonts and the PNG writer (about half a second), and this one runs while the job does."""
    import io

    from figures.style import new_figure

    fig, axes = new_figure(figsize=(1.0, 1.0))
    ax = axes[0][0]
    ax.plot([0.0, 1.0], [0.0, 1.0], marker="o", label="warm-up")
    ax.set_title("warm-up")
    ax.legend(fontsize=6)
    fig.savefig(io.BytesIO(), format="png")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m figures.render_worker KIND\n")
        return 2
    kind = args[0]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    _preload(kind)
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    request = json.loads(line)
    from figures.render import FigureError, render_job

    try:
        written = render_job(Path(request["job_dir"]), kind)
    except FigureError as exc:
        sys.stdout.write(json.dumps({"error": str(exc)}) + "\n")
        return EXIT_FIGURES_FAILED
    sys.stdout.write(json.dumps({"written": [str(p) for p in written]}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
