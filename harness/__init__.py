"""Composition root of the suite: Hydra app, records, metrics, results, tracking and benchmarks."""
