"""The load generator's entry points: ``run_load`` (own event loop) and ``run_load_async``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Optional

from harness.loadgen.config import LoadGenOptions, LoadResult, TargetConfig
from harness.loadgen.loops import loop_factory
from harness.loadgen.multiproc import run_multiprocess
from harness.loadgen.progress import Progress
from harness.loadgen.runner import LoadRunner
from vocab.records import RequestSpec
from workloads.arrivals import ArrivalSchedule


async def run_load_async(
    specs: Sequence[RequestSpec],
    schedule: ArrivalSchedule,
    prompts: Sequence[Sequence[int]],
    target: TargetConfig,
    options: Optional[LoadGenOptions] = None,
) -> LoadResult:
    """Issue ``specs`` on ``schedule`` against ``target`` from the running loop; one record per spec.

    With ``options.n_processes > 1`` the work runs in worker processes (this coroutine waits in a thread).
    """
    options = options or LoadGenOptions()
    if options.n_processes > 1:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, run_multiprocess, specs, schedule, prompts, target, options)
    progress = Progress(len(specs), options.progress)
    try:
        runner = LoadRunner(specs, schedule, prompts, target, options, on_tick=progress.update)
        return await runner.run()
    finally:
        progress.close()


def run_load(
    specs: Sequence[RequestSpec],
    schedule: ArrivalSchedule,
    prompts: Sequence[Sequence[int]],
    target: TargetConfig,
    options: Optional[LoadGenOptions] = None,
) -> LoadResult:
    """``run_load_async`` on a fresh event loop (uvloop when installed), or on worker processes."""
    options = options or LoadGenOptions()
    if options.n_processes > 1:
        return run_multiprocess(specs, schedule, prompts, target, options)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(run_load_async(specs, schedule, prompts, target, options))
