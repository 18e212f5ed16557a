"""Names of the files and folders a job writes into its results folder, declared once.

The harness writes them, ``figures`` and the report read them; this module imports nothing, so both
sides (and tests) share the names without depending on each other. What each file holds is in the
README's "Reading the results" table.
"""

from __future__ import annotations

# every job
CONFIG_FILE = "config.yaml"  # the resolved config plus the Hydra choices and overrides (_run)
SUMMARY_FILE = "summary.json"  # status, provenance, metrics, validity, files
LOG_FILE = "harness.log"  # the job's log (Hydra's job logging)
FIGURES_DIR = "figures"  # <name>.png plus the <name>.csv it plotted
REFUSED_FILE = "refused.txt"  # a sweep job that refused this folder (ok results of another config): why

# a sweep's folder (hydra.sweep.dir)
SWEEP_TABLE_FILE = "sweep.csv"  # one row per job (or measured point): overrides, status, summary metrics
SWEEP_FIGURES_DIR = "sweep_figures"  # <metric>_vs_<key>.png plus the .csv each plotted

# serving and simulator runs
REQUESTS_FILE = "requests.parquet"  # one RequestRecord per issued request
POINTS_FILE = "points.csv"  # job=serve: one row of metrics per measured point
LOAD_FILE = "load.csv"  # simulator: per-instance load over simulated time
SERVERS_DIR = "servers"  # real engines: each server's and the router's log

# studies
STUDY_FILE = "study.csv"  # job=sim_study / job=compare: one row per variant and load point
CAPACITY_FILE = "capacity.csv"  # job=sim_study sim_sweep: highest load meeting the attainment target
SLO_SCALE_FILE = "slo_scale.csv"  # sim_sweep with study.slo_scales: attainment at each scaled SLO
SLO_CROSSING_FILE = "slo_crossing.csv"  # sim_sweep with study.slo_scales: where attainment crosses the target
PROBES_FILE = "probes.csv"  # splitwise_provisioning: every simulation of the rate searches
SENSITIVITY_FILE = "sensitivity.csv"  # splitwise_provisioning with study.params.scenarios: the same rows per scenario
PLACEMENT_FILE = "placement.json"  # placement_search: the chosen configuration
REPLAY_FILE = "replay.csv"  # real_replay: one row per measured run and metric (measured, predicted, error, target)
REPLAY_RUNS_FILE = "replay_runs.csv"  # real_replay: one row per measured run
REPLAY_FIT_FILE = "replay_fit.csv"  # real_replay: the fitted profile corrections and the layout choice
VARIANTS_DIR = "variants"  # job=compare: each variant's own job folder
CACHE_HIT_FILE = "cache_hit.csv"  # job=cache_study: hit rate per trace, policy and capacity
GLOBAL_LOCAL_FILE = "global_local.csv"  # job=cache_study: one global pool vs private caches

# job=calibrate and job=sim_vs_real
PROFILE_FILE = "profile.json"  # the fitted performance profile (engine.perf_model=fitted engine.profile=...)
CALIBRATION_SAMPLES_FILE = "samples.csv"  # every calibration measurement with its fitted value
CALIBRATION_FILE = "calibration.csv"  # sim_vs_real: design, rate_rps, metric, measured, predicted, rel_error

# job=workload
WORKLOAD_FILE = "workload.parquet"  # one row per RequestSpec

# the reproduction report (results/ root)
REPORT_FILE = "REPORT.md"
