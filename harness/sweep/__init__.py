"""Sweeps (``python -m harness --multirun ...``): deterministic job folders, resume by config hash,
continue on error, dry runs, and the sweep table that joins every job's summary with its overrides.

- :mod:`harness.sweep.naming`: a job's folder name from its overrides (``hydra.sweep.subdir``);
- :mod:`harness.sweep.config_hash`: the hash of a job's resolved config kept in ``summary.json``;
- :mod:`harness.sweep.resume`: what a job does with the folder an earlier run left (skip, rerun, refuse);
- :mod:`harness.sweep.plan`: the jobs a sweep command expands to, and the dry run that lists them;
- :mod:`harness.sweep.table`: ``sweep.csv``, one row per job;
- :mod:`harness.sweep.report`: the Hydra callback that writes the table and figures and sets the exit code.
"""
