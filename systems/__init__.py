"""What is deployed: the system topology (:mod:`systems.topology`), the engine contract
(:mod:`systems.contract`), the schemas of systems, models, hardware and engines, the simulator
(``sim/``), the real deployments (``deployments/``), process launchers (``launch/``), the routers
(``router/``), the routing and scheduling policies both drivers share (``policies/``) and prefix-cache
replay (``kvcache/``). Imports only ``workloads`` and the shared vocabulary of ``harness``.

The simulator's hot modules load from their compiled build when one matches the sources
(:mod:`systems.sim.native`); the import hook goes in here, before any module under ``systems`` is imported."""

from systems.sim.native import install

install()
