"""Tidy tables read from the ``study.csv`` and ``capacity.csv`` of ``job=sim_study`` folders, shared by
the figures (``figures.sim_studies``) and the reproduction report (``figures.report``).

Nothing here recomputes a metric: the study wrote every metric, including the highest load meeting the
SLO (``capacity.csv``, :mod:`harness.capacity`). The helpers parse variant labels into columns, pick and
reshape rows, and mark what a plot needs to show: the lower-left Pareto front of a point cloud
(:func:`pareto_mask`) and load over time (:func:`load_series`, from ``load.csv``).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from vocab.result_files import CAPACITY_FILE, CONFIG_FILE, STUDY_FILE, SUMMARY_FILE

log = logging.getLogger(__name__)

DEFAULT_TARGET = 0.9
CAPACITY_TEXT_COLUMNS = {"variant": str, "attainment": str, "load": str, "bound": str, "label": str}
THRESHOLD_COLUMN = re.compile(r"^attainment_tbt_(\d+(?:\.\d+)?)ms$")

# Fixed orders the papers use (unknown labels follow, in table order).
SCHEDULING_ORDER = ("random", "load_balancing", "local_cache_aware", "global_cache_aware")
REJECTION_ORDER = ("none", "baseline", "early", "predictive")
MODE_ALIASES = {"no_rejection": "none"}


# ---------------------------------------------------------------------------------------------- job folders

class MissingCapacity(FileNotFoundError):
    """A study folder has no ``capacity.csv`` (written by an older version of the suite)."""


@dataclass
class JobFolder:
    """One finished job folder: its resolved config, its summary and its tables, read lazily."""

    path: Path
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    @property
    def config(self) -> dict[str, Any]:
        if "config" not in self._cache:
            file = self.path / CONFIG_FILE
            self._cache["config"] = (yaml.safe_load(file.read_text(encoding="utf-8")) or {}) if file.is_file() else {}
        return self._cache["config"]

    @property
    def summary(self) -> dict[str, Any]:
        if "summary" not in self._cache:
            file = self.path / SUMMARY_FILE
            self._cache["summary"] = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
        return self._cache["summary"]

    def setting(self, dotted: str, default: Any = None) -> Any:
        """A value of the resolved config by dotted path (``study.figure``), or ``default``."""
        node: Any = self.config
        for key in dotted.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    def table(self, name: str = STUDY_FILE) -> pd.DataFrame:
        """A CSV table of the job (``FileNotFoundError`` naming it when absent)."""
        if name not in self._cache:
            file = self.path / name
            if not file.is_file():
                raise FileNotFoundError(f"{file}: the job wrote no {name}")
            self._cache[name] = pd.read_csv(file)
        return self._cache[name]

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def json(self, name: str) -> dict[str, Any]:
        file = self.path / name
        if not file.is_file():
            raise FileNotFoundError(f"{file}: the job wrote no {name}")
        return json.loads(file.read_text(encoding="utf-8"))


def finished_jobs(root: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """``(job folder, summary)`` of every job under ``root`` whose ``summary.json`` says ``ok`` (an
    unreadable summary is logged and skipped), in path order."""
    for path in sorted(Path(root).rglob(SUMMARY_FILE)):
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            log.warning("skipping %s: unreadable summary (%s)", path, exc)
            continue
        if summary.get("status") == "ok":
            yield path.parent, summary


def split_label(label: str) -> tuple[str, str]:
    """``"group/name"`` -> ``("group", "name")`` at the last slash; no slash -> ``("", label)``."""
    group, _, name = str(label).rpartition("/")
    return group, name


def ordered(values: pd.Series | list[str], first: tuple[str, ...]) -> list[str]:
    """``first`` (those present) then the other values in order of appearance."""
    seen = list(dict.fromkeys(str(v) for v in values))
    return [v for v in first if v in seen] + [v for v in seen if v not in first]


def attainment_target(table: pd.DataFrame, default: float = DEFAULT_TARGET) -> float:
    """The SLO attainment target the study ran with (its ``slo_attainment_target`` column)."""
    if "slo_attainment_target" in table and table["slo_attainment_target"].notna().any():
        return float(table["slo_attainment_target"].dropna().iloc[0])
    return default


# ---------------------------------------------------------------------------------------------- capacity

def tbt_thresholds(table: pd.DataFrame) -> list[tuple[float, str]]:
    """``(threshold_ms, column)`` of every ``attainment_tbt_<x>ms`` column, by threshold."""
    found = [(float(m.group(1)), c) for c in table.columns if (m := THRESHOLD_COLUMN.match(str(c)))]
    return sorted(found)


def attainment_long(table: pd.DataFrame) -> pd.DataFrame:
    """The capacity study in long form: trace, system, speedup, offered rate, TBT threshold, attainment.

    Variants are ``<trace>/<system>``; without ``attainment_tbt_*`` columns the study's own
    ``slo_attainment`` is used (threshold = the SLO's TBT bound, unknown here: NaN).
    """
    base = table.assign(trace=[split_label(v)[0] or "all" for v in table["variant"]],
                        system=[split_label(v)[1] for v in table["variant"]])
    columns = tbt_thresholds(table) or [(math.nan, "slo_attainment")]
    frames = []
    for threshold, column in columns:
        keep = [c for c in ("trace", "system", "variant", "point", "speedup", "offered_rate_rps") if c in base]
        part = base[keep].copy()
        part["tbt_threshold_ms"] = threshold
        part["attainment"] = base[column].astype(float)
        frames.append(part)
    return pd.concat(frames, ignore_index=True)


def effective_shares(table: pd.DataFrame) -> pd.DataFrame:
    """Mooncake's effective request capacity as FAST'25 measures it: per trace x system x TBT threshold,
    the share of all issued requests with TTFT and TBT within the bounds (the study's ``attainment_tbt_<x>ms``
    columns), at the trace's own load: a study with one point per variant, or the speedup-1 point of a sweep.

    ``ValueError`` when the study has no TBT thresholds or more than one point at the trace's own load."""
    if not tbt_thresholds(table):
        raise ValueError("study.csv has no attainment_tbt_<x>ms columns (set study.tbt_thresholds_ms)")
    long = attainment_long(table)
    if "speedup" in long:
        speedup = long["speedup"].astype(float)
        long = long[speedup.isna() | np.isclose(speedup, 1.0)]
    if long.empty:
        raise ValueError("study.csv has no point at the trace's own load (no speedup 1 or unscaled point)")
    if long.duplicated(["variant", "tbt_threshold_ms"]).any():
        raise ValueError("study.csv has several points at the trace's own load for one variant (a rate sweep?)")
    keep = ["trace", "system", "variant", "tbt_threshold_ms", "attainment"]
    return long[keep].rename(columns={"attainment": "effective_share"}).reset_index(drop=True)


def _capacity_rows(job: JobFolder, load: str) -> pd.DataFrame:
    """The rows of the job's ``capacity.csv`` over load column ``load`` (``MissingCapacity`` when absent)."""
    if not job.has(CAPACITY_FILE):
        raise MissingCapacity(f"{job.path}: the study wrote no {CAPACITY_FILE} (rerun it with this version)")
    cap = pd.read_csv(job.path / CAPACITY_FILE, dtype=CAPACITY_TEXT_COLUMNS)
    return cap[cap["load"] == load]


def capacity_table(job: JobFolder) -> pd.DataFrame:
    """Effective request capacity (req/s of offered rate) per trace x system x TBT threshold (Mooncake
    FAST'25), from ``capacity.csv``; the study's own SLO attainment when it has no TBT thresholds."""
    cap = _capacity_rows(job, "offered_rate_rps")
    by_threshold = cap[cap["attainment"].astype(str).str.match(THRESHOLD_COLUMN)]
    cap = by_threshold if not by_threshold.empty else cap[cap["attainment"] == "slo_attainment"]
    parts = [split_label(v) for v in cap["variant"]]
    out = cap.assign(trace=[t or "all" for t, _ in parts], system=[n for _, n in parts])
    keep = ["trace", "system", "tbt_threshold_ms", "capacity", "bound", "lowest_measured", "highest_measured",
            "target", "label"]
    return out[keep].rename(columns={"capacity": "capacity_rps"}).reset_index(drop=True)


def is_vllm(name: str) -> bool:
    return str(name).lower().replace("-", "_") in ("vllm", "vllm_baseline")


def capacity_ratios(cap: pd.DataFrame, system: str = "mooncake") -> pd.DataFrame:
    """Per trace x threshold: ``system``'s capacity, vLLM's, their ratio and the gain in percent
    (inf when vLLM's capacity is 0 and ``system``'s is not, NaN when both are 0)."""
    rows = []
    for (trace, threshold), group in cap.groupby(["trace", "tbt_threshold_ms"], sort=False, dropna=False):
        mine = group[group["system"].str.lower() == system.lower()]
        base = group[group["system"].map(is_vllm)]
        if mine.empty or base.empty:
            continue
        a, b = mine.iloc[0], base.iloc[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = float(np.float64(a["capacity_rps"]) / np.float64(b["capacity_rps"]))
        rows.append({"trace": trace, "tbt_threshold_ms": threshold, "system_capacity_rps": a["capacity_rps"],
                     "system_bound": a["bound"], "system_lowest": a["lowest_measured"], "system_label": a["label"],
                     "vllm_capacity_rps": b["capacity_rps"], "vllm_bound": b["bound"],
                     "vllm_lowest": b["lowest_measured"], "vllm_label": b["label"], "ratio": ratio,
                     "gain_pct": (ratio - 1.0) * 100.0})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- SLO attainment

def slo_frame(table: pd.DataFrame, default_workload: str = "") -> pd.DataFrame:
    """The SLO-attainment study with ``workload`` and ``system`` parsed from ``<workload>/<System>``
    (a label without a slash gets ``default_workload``)."""
    parts = [split_label(v) for v in table["variant"]]
    return table.assign(workload=[w or default_workload or "default" for w, _ in parts],
                        system=[s for _, s in parts])


def slo_goodput_table(job: JobFolder, default_workload: str = "") -> pd.DataFrame:
    """Per workload x system: the highest per-GPU rate with SLO attainment >= target (``capacity.csv``)."""
    cap = _capacity_rows(job, "per_gpu_rate")
    cap = cap[cap["attainment"] == "slo_attainment"]
    parts = [split_label(v) for v in cap["variant"]]
    out = cap.assign(workload=[w or default_workload or "default" for w, _ in parts], system=[n for _, n in parts])
    keep = ["workload", "system", "capacity", "bound", "lowest_measured", "highest_measured", "target", "label"]
    return out[keep].rename(columns={"capacity": "goodput_rps_per_gpu"}).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------- Pareto

def pareto_mask(x: Any, y: Any) -> np.ndarray:
    """True for the points no other point dominates when both coordinates are minimised (another point
    dominates when it is <= in both and < in one). Identical points are all kept; NaN is never on it."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    valid = ~(np.isnan(xs) | np.isnan(ys))
    mask = np.zeros(len(xs), dtype=bool)
    for i in np.flatnonzero(valid):
        others = valid & (xs <= xs[i]) & (ys <= ys[i]) & ((xs < xs[i]) | (ys < ys[i]))
        mask[i] = not others.any()
    return mask


def pareto_table(table: pd.DataFrame, ttft_ms: float, tpot_ms: float) -> pd.DataFrame:
    """The Pareto study: system (first word of the layout), layout, batching limit, p90 TTFT and TPOT,
    whether the point is on its system's front, and ``slo_scale`` = max(p90 TTFT / TTFT SLO,
    p90 TPOT / TPOT SLO): the point meets an SLO scaled by this factor (<= 1: inside the SLO box)."""
    parts = [split_label(v) for v in table["variant"]]
    layouts = [g or n for g, n in parts]
    out = pd.DataFrame({
        "variant": table["variant"],
        "system": [lay.split(" ", 1)[0] for lay in layouts],
        "layout": [lay.split(" ", 1)[1] if " " in lay else lay for lay in layouts],
        "max_num_seqs": table["max_num_seqs"] if "max_num_seqs" in table else [n for _, n in parts],
        "p90_ttft_ms": table["p90_ttft_ms"].astype(float),
        "p90_tpot_ms": table["p90_tpot_ms"].astype(float),
        "slo_attainment": table["slo_attainment"].astype(float),
    })
    out["on_front"] = False
    for _, group in out.groupby("system", sort=False):
        out.loc[group.index, "on_front"] = pareto_mask(group["p90_ttft_ms"], group["p90_tpot_ms"])
    out["slo_scale"] = np.maximum(out["p90_ttft_ms"] / ttft_ms, out["p90_tpot_ms"] / tpot_ms)
    out["inside_slo"] = out["slo_scale"] <= 1.0
    return out


# ---------------------------------------------------------------------------------------------- rejection

def _split_of(row: pd.Series) -> str:
    group, _ = split_label(row["variant"])
    if group:
        return group
    if "prefill" in row and "decode" in row and pd.notna(row["prefill"]) and pd.notna(row["decode"]):
        return f"{int(row['prefill'])}P{int(row['decode'])}D"
    return "all"


def replay_speed(table: pd.DataFrame) -> pd.Series:
    """How many times faster than its own timestamps each row replayed its trace: the load point's
    ``speedup`` (1 when none) over the variant's ``arrival_time_scale`` (1 when the study did not write it)."""
    ones = pd.Series(1.0, index=table.index)
    speedup = table["speedup"].astype(float).fillna(1.0) if "speedup" in table else ones
    scale = table["arrival_time_scale"].astype(float).fillna(1.0) if "arrival_time_scale" in table else ones
    return speedup / scale


def rejection_table(table: pd.DataFrame) -> pd.DataFrame:
    """The rejection study: split (``<split>/<mode>`` label, else ``<prefill>P<decode>D``), mode, counts, the
    replay speed (:func:`replay_speed`; NaN when the study wrote neither of its columns) and, when the study
    wrote them, the decode load threshold and the requests rejected after their prefill
    (``sim_n_rejected_after_prefill``: 0 where the counter is absent, a run that rejected none)."""
    split = table.apply(_split_of, axis=1)
    mode = [MODE_ALIASES.get(split_label(v)[1], split_label(v)[1]) for v in table["variant"]]
    keep = [c for c in ("variant", "point", "n_rejected", "n_issued", "slo_attainment", "mean_ttft_ms",
                        "p90_tpot_ms", "goodput_rps", "goodput_rps_per_gpu", "sim_n_rejected_after_prefill",
                        "sim_wasted_prefill_tokens", "sim_prefill_tokens_computed", "decode_load_threshold")
            if c in table]
    speed = replay_speed(table) if {"speedup", "arrival_time_scale"} & set(table.columns) else math.nan
    out = table[keep].assign(split=list(split), mode=mode, speed=speed)
    if "sim_n_rejected_after_prefill" in out:
        out["sim_n_rejected_after_prefill"] = out["sim_n_rejected_after_prefill"].astype(float).fillna(0.0)
    return out


def rejection_sweep_table(table: pd.DataFrame) -> pd.DataFrame:
    """The rejection sweep (``experiment=mooncake_rejection_sweep``): per row its split
    (``<prefill>P<decode>D``), decode load threshold, replay speed, and the shares of issued requests rejected
    in all and rejected after their prefill, sorted by split, threshold and speed."""
    for column in ("n_rejected", "n_issued", "prefill", "decode", "decode_load_threshold"):
        if column not in table:
            raise KeyError(f"study.csv has no column {column} (a rejection sweep writes it)")
    after = (table["sim_n_rejected_after_prefill"].astype(float).fillna(0.0)
             if "sim_n_rejected_after_prefill" in table else pd.Series(0.0, index=table.index))
    issued = table["n_issued"].astype(float)
    out = pd.DataFrame({
        "variant": table["variant"],
        "split": [f"{int(p)}P{int(d)}D" for p, d in zip(table["prefill"], table["decode"], strict=True)],
        "prefill": table["prefill"].astype(int),
        "decode_load_threshold": table["decode_load_threshold"].astype(float),
        "speed": replay_speed(table),
        "n_issued": table["n_issued"].astype(int),
        "n_rejected": table["n_rejected"].astype(int),
        "n_rejected_after_prefill": after.astype(int),
        "rejected_share": table["n_rejected"].astype(float) / issued,
        "after_prefill_share": after / issued,
    })
    return (out.sort_values(["prefill", "decode_load_threshold", "speed"], ascending=[True, True, True])
            .drop(columns="prefill").reset_index(drop=True))


def load_series(load: pd.DataFrame, variants: pd.DataFrame) -> pd.DataFrame:
    """Prefill and decode load over time per variant (first load point of each): the mean over prefill
    instances of ``queued_prefill_s``, and the mean over decode instances of ``kv_utilization`` and (when
    sampled) of the estimated decode step ``step_s``, the TBT behind Mooncake's TBT ratio.
    ``variants`` maps ``variant`` to ``split`` and ``mode`` (:func:`rejection_table`)."""
    first = load.groupby("variant")["point"].transform("min")
    load = load[load["point"] == first]
    measures = (("prefill", "queued_prefill_s", "prefill: mean queued prefill (s)"),
                ("decode", "kv_utilization", "decode: mean KV utilization"),
                ("decode", "step_s", "decode: mean estimated TBT (s)"))
    frames = []
    for role, column, label in measures:
        part = load[load["role"] == role]
        if part.empty or column not in part or part[column].isna().all():
            continue
        mean = part.groupby(["variant", "time_s"], sort=False)[column].mean().reset_index(name="value")
        mean["load"] = label
        frames.append(mean)
    if not frames:
        return pd.DataFrame(columns=["variant", "split", "mode", "time_s", "load", "value"])
    series = pd.concat(frames, ignore_index=True)
    keys = variants[["variant", "split", "mode"]].drop_duplicates("variant")
    return series.merge(keys, on="variant", how="left")[["variant", "split", "mode", "time_s", "load", "value"]]


# ---------------------------------------------------------------------------------------------- Splitwise

def splitwise_chosen(table: pd.DataFrame) -> pd.DataFrame:
    """The chosen candidate of every trace x budget x design (feasible rows only)."""
    chosen = table["chosen"].astype(bool) & table.get("feasible", pd.Series(True, index=table.index)).astype(bool)
    keep = [c for c in ("trace", "budget", "design", "split", "n_machines", "max_rate_rps", "cost_usd_hr",
                        "power_kw", "throughput_per_usd_hr", "throughput_per_kw") if c in table]
    keep += [c for c in table.columns if c.startswith(("throughput_vs_", "per_usd_hr_vs_", "per_kw_vs_"))]
    return table.loc[chosen, keep].reset_index(drop=True)
