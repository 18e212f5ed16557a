"""Compile the simulator's hot modules (:data:`systems.compiled_core.COMPILED_MODULES`) with mypyc into this
virtualenv: ``python -m systems.compiled_core_build [--force]`` (the set-up runs it: ``.ci/bootstrap.sh``, and
``make`` again when a compiled module's source changed).

It type-checks and compiles the modules into a temporary folder (in a child process, its output in
``build.log`` beside the build), then moves the result to :func:`systems.compiled_core.build_dir` with a
manifest of the sources' sha256, written last, so a build that fails or is interrupted leaves no manifest
and the simulator imports its sources. An up-to-date build is left alone unless ``--force``. Needs mypy (the
``native`` extra) and a C compiler with Python's headers; exits non-zero, saying what is missing, when the
build fails (the simulator still runs from its sources).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from systems.compiled_core import (
    COMPILED_MODULES,
    GROUP,
    MANIFEST,
    PROJECT_ROOT,
    build_dir,
    check_build,
    source_hashes,
    source_path,
)

log = logging.getLogger("systems.compiled_core_build")

# no fused multiply-add (one rounding where Python rounds twice; GCC fuses by default where the target has FMA,
# as aarch64 does): the compiled arithmetic gives the sources' doubles
C_FLAGS = ("-ffp-contract=off",)
MYPY_FLAGS = ("--ignore-missing-imports",)


class CompiledCoreBuildError(RuntimeError):
    """The compiled core could not be built (the message says what is missing)."""


def check_toolchain() -> None:
    """``CompiledCoreBuildError`` naming what is missing: mypy, a C compiler, Python's headers."""
    try:
        import mypyc.build  # noqa: F401
    except ImportError as exc:
        raise CompiledCoreBuildError(f"mypy (with mypyc) is not installed ({exc}); pip install -e '.[native]'") from exc
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        raise CompiledCoreBuildError(f"no C compiler: {compiler!r} is not on PATH (Debian: apt-get install gcc)")
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not header.is_file():
        ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
        raise CompiledCoreBuildError(f"Python's headers are missing: no {header} (Debian: apt-get install python{ver}-dev)")


def compile_into(out: Path, work: Path) -> None:
    """mypyc-compile :data:`COMPILED_MODULES` (C sources under ``work``), the extensions into ``out``."""
    from mypyc.build import mypycify
    from setuptools import Distribution

    paths = [str(source_path(m).relative_to(PROJECT_ROOT)) for m in COMPILED_MODULES]
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the compiler commands, into build.log
    # a package without type information (tqdm has none, its stubs are a separate package) is typed Any: its calls
    # are made as the interpreter makes them
    extensions = mypycify([*MYPY_FLAGS, *paths], opt_level="3", group_name=GROUP, target_dir=str(work / "c"))
    for extension in extensions:
        extension.extra_compile_args = [*(extension.extra_compile_args or []), *C_FLAGS]
    dist = Distribution({"name": GROUP, "ext_modules": extensions, "script_name": "compiled_core_build",
                         "script_args": ["build_ext", "--build-lib", str(out), "--build-temp", str(work / "o")]})
    dist.parse_command_line()
    dist.run_commands()


def build(force: bool = False) -> Path:
    """Build the compiled core unless it is up to date; its directory. ``CompiledCoreBuildError`` when it fails.
    The compiler's output goes to ``build.log`` beside the build."""
    target = build_dir()
    hashes = source_hashes()
    if not force and check_build(target, hashes) is None:
        log.info("simulator core: the build in %s is up to date", target)
        return target
    check_toolchain()
    started = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    log_path = target.parent / "build.log"
    with tempfile.TemporaryDirectory(prefix="compiled-core-", dir=target.parent) as tmp:
        work, out = Path(tmp) / "work", Path(tmp) / "out"
        # in a child: mypy ends a failed type check with SystemExit, and the compiler writes to the process's fds
        code = f"from pathlib import Path; from systems.compiled_core_build import compile_into; " \
               f"compile_into(Path({str(out)!r}), Path({str(work)!r}))"
        with log_path.open("w", encoding="utf-8") as fh:
            proc = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                  check=False)
        if proc.returncode != 0:
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-4000:]
            raise CompiledCoreBuildError(f"mypyc could not compile {', '.join(COMPILED_MODULES)} (exit {proc.returncode}; "
                                   f"the whole output is in {log_path}):\n{tail}")
        (out / MANIFEST).write_text(json.dumps({"sources": hashes, "python": sys.version, "group": GROUP},
                                               indent=1) + "\n", encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(out), str(target))
    log.info("simulator core: compiled %d modules into %s in %.0f s", len(COMPILED_MODULES), target,
             time.perf_counter() - started)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systems.compiled_core_build", description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when the build is up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        build(force=args.force)
    except CompiledCoreBuildError as exc:
        log.error("simulator core not compiled (simulations run from the Python sources, slower): %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
