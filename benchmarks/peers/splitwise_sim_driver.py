"""Runs splitwise-sim in-process on one trace; executed by the peer's interpreter, never imported by the suite.

``python splitwise_sim_driver.py JOB.json OUT.json``. ``JOB`` holds ``root`` (a splitwise-sim checkout),
``trace`` (a CSV in its trace format), ``overrides`` (Hydra overrides of its ``configs/config.yaml``) and
``workdir`` (where its CSVs go). It composes the config as its ``run.py`` does (Hydra, ``eval`` resolver,
``random.seed(cfg.seed)``), calls ``run.run_simulation`` and writes ``OUT``: the seconds that call took and
the per-request rows of its ``detailed/0.csv``. It imports nothing from the suite (the peer's interpreter may
not have the suite's packages).
"""

from __future__ import annotations

import csv
import json
import os
import random
import resource
import sys
import time
from pathlib import Path


def cpu_s() -> float:
    """CPU seconds of this process and of its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(job_path: str, out_path: str) -> int:
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    root = Path(job["root"]).resolve()
    workdir = Path(job["workdir"]).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(root))
    t_import = time.perf_counter()
    import run as peer_run  # registers the "eval" resolver, as its command line does
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    overrides = [*job["overrides"], f"trace.dir={Path(job['trace']).parent}/",
                 f"trace.filename={Path(job['trace']).stem}", f"output_dir={workdir}"]
    with initialize_config_dir(config_dir=str(root / "configs"), version_base=None):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.cwd = str(root)  # get_original_cwd(): where its relative paths start
    HydraConfig.instance().set_config(cfg)
    import_s = time.perf_counter() - t_import
    os.chdir(workdir)  # its CSVs are written to the working directory (Hydra's job.chdir)
    random.seed(cfg.seed)
    cpu0, start = cpu_s(), time.perf_counter()
    peer_run.run_simulation(cfg)
    sim_s, sim_cpu_s = time.perf_counter() - start, cpu_s() - cpu0
    with open(workdir / "detailed" / "0.csv", newline="", encoding="utf-8") as fh:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    Path(out_path).write_text(json.dumps({"simulate_s": sim_s, "simulate_cpu_s": sim_cpu_s, "setup_s": import_s, "requests": rows}),
                              encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
