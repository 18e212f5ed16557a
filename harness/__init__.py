"""Composition root of the suite (``python -m harness``): config and validation, jobs, studies, metrics and
capacity, the load generator, results, tracking and benchmarks. It may import every other package; its
``records``, ``errors`` and ``result_files`` modules are the vocabulary all packages share."""
