"""Drawing a job's figures in a second process whose imports overlap the job.

Importing matplotlib and a job's figure modules takes about half a second, as long as a whole simulator
serving run's simulation on a small cluster. :class:`FigureWorker` starts ``python -m
figures.render_worker KIND`` when the job starts (it imports while the job runs, on another core), and hands
it the job folder once the tables are written; the parent waits for the answer, so the job still ends
after its figures, with the same files and the same ``FigureError`` when a figure fails. If the process
cannot be started the figures are drawn in this process instead. The worker runs in its own process group
and is killed by that group when the job fails before its figures (or the answer does not come in time).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Optional

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
STDERR_TAIL = 4000


class FigureWorker:
    """One job's figure process (a context manager: leaving it stops a process that is still running)."""

    def __init__(self, kind: str, timeout_s: float = 600.0) -> None:
        self.kind = kind
        self.timeout_s = timeout_s
        self._proc: Optional[subprocess.Popen[str]] = None

    def start(self) -> bool:
        """Start the process; False (logged) when it cannot be started: :meth:`render` then draws here."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "figures.render_worker", self.kind], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=PROJECT_ROOT,
                start_new_session=True)
        except OSError as exc:
            log.warning("could not start the figure process (%s); figures are drawn in this process", exc)
            self._proc = None
        return self._proc is not None

    def render(self, job_dir: Path) -> list[Path]:
        """The job's figures (``figures.render.render_job``'s result and errors), drawn by the process."""
        from figures.render import FigureError, render_job
        from figures.render_worker import EXIT_FIGURES_FAILED

        proc = self._proc
        if proc is None:
            return render_job(job_dir, self.kind)
        resolved = Path(job_dir).resolve()
        request = json.dumps({"job_dir": str(resolved)}) + "\n"
        try:
            out, err = proc.communicate(request, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            self.close()
            raise FigureError(f"the figure process drew nothing within {self.timeout_s:.0f} s; python -m figures "
                              f"--results-dir {Path(job_dir).parent} draws the figures") from None
        finally:
            self._proc = None if proc.returncode is not None else proc
        answer = _answer(out)
        ok = proc.returncode == 0 and "written" in answer
        for line in err.splitlines():
            log.log(logging.DEBUG if ok else logging.WARNING, "figure process: %s", line)
        if ok:  # the paths as render_job gives them here: under job_dir as the caller spelled it
            return [_under(Path(job_dir), resolved, Path(p)) for p in answer["written"]]  # type: ignore[union-attr]
        if proc.returncode == EXIT_FIGURES_FAILED and "error" in answer:
            raise FigureError(answer["error"])
        raise FigureError(f"the figure process failed (exit status {proc.returncode}): {err[-STDERR_TAIL:].strip()}")

    def close(self) -> None:
        """Stop the process if it is still running (by its process group)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()

    def __enter__(self) -> FigureWorker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _under(job_dir: Path, resolved: Path, path: Path) -> Path:
    try:
        return job_dir / path.relative_to(resolved)
    except ValueError:
        return path


def _answer(out: str) -> dict[str, object]:
    lines = out.strip().splitlines()
    if not lines:
        return {}
    try:
        answer = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {}
    return answer if isinstance(answer, dict) else {}
