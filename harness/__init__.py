"""Composition root of the suite (``python -m harness``): config and validation, jobs, studies, metrics and
capacity, the load generator, results, tracking and benchmarks. It may import every other package; its
``records``, ``errors`` and ``result_files`` modules are the vocabulary all packages share.

Importing it sets two allocation defaults, unless the environment already sets them (both must be set
before numpy and pyarrow are imported, which ``python -m harness`` does after this package):

- ``NUMPY_MADVISE_HUGEPAGE=0``: numpy asks the kernel for transparent huge pages on every large array.
  Where the kernel compacts memory on such a page fault (``/sys/kernel/mm/transparent_hugepage/defrag`` =
  ``madvise``, as on this project's VMs) the request costs far more than it saves: 1.7 to 2.5 s of system
  time in a 5 s run of the Azure conversation hour, against 0.2 s without it.
- ``ARROW_DEFAULT_MEMORY_POOL=system``: Arrow's default allocator (mimalloc) made writing that run's
  ``requests.parquet`` cost 1.2 to 1.5 s of system time in about half the runs; the C library's allocator
  costs 0.2 s every time. The files written are the same.

(Measured with ``python -m benchmarks.process_time_bench`` and ``/usr/bin/time``.)"""

import os

os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
