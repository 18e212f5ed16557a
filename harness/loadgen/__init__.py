"""The suite's load generator: issues a fixed schedule of streamed completion requests and records them.

``run_load`` sends every ``RequestSpec`` to an OpenAI-compatible ``/v1/completions`` endpoint on its
open- or closed-loop schedule and returns one ``RequestRecord`` per spec, timed from one monotonic clock
relative to t0 (see docs/metrics.md). ``mock_server`` is a streaming server with injected delays for tests
and benchmarks.
"""

from harness.loadgen.api import run_load, run_load_async
from harness.loadgen.config import LoadGenOptions, LoadResult, TargetConfig

__all__ = ["LoadGenOptions", "LoadResult", "TargetConfig", "run_load", "run_load_async"]
