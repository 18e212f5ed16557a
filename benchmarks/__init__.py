"""Hand-run benchmark scripts (timing and sanity figures), never part of the default test run."""
