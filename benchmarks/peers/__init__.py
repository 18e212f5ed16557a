"""Running a peer simulator (DistServe's simdistserve, splitwise-sim) beside ours for
``python -m benchmarks.peer_agreement``.

The peers are never dependencies of the suite: each is a checkout installed by hand (``docs/peers.md``)
and run by its own interpreter through a driver script here (``*_driver.py``), which imports nothing from
the suite. The other modules build the shared scenario, run our side and compare.
"""
