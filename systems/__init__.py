"""What is deployed: the system topology (:mod:`systems.topology`), the engine contract
(:mod:`systems.contract`), the schemas of systems, models, hardware and engines, the simulator
(``sim/``), the real deployments (``deployments/``), process launchers (``launch/``), the routers
(``router/``), the routing and scheduling policies both drivers share (``policies/``) and prefix-cache
replay (``kvcache/``). Imports only ``vocab`` and ``workloads``."""
