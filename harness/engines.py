"""The factory that picks and builds the deployment a config describes (the engine contract itself is
:mod:`systems.contract`).

``engine=sim`` is the simulator; ``engine=vllm`` the vLLM baseline or a disaggregated vLLM deployment,
by the system's topology; ``engine=sglang`` SGLang servers; ``engine=endpoint`` a service the user
started. Which ``(system, engine, router)`` combinations exist was checked when the config was
validated (:mod:`systems.topology`); HTTP deployments get the harness's load generator as their
:class:`~systems.contract.LoadDriver`.
"""

from __future__ import annotations

from harness.config import Config
from systems.contract import Deployment, JobFolder
from systems.topology import topology_of


def open_deployment(cfg: Config, folder: JobFolder) -> Deployment:
    """The deployment of ``cfg`` as an unentered context manager (``with open_deployment(...) as d``)."""
    engine = cfg.engine.name
    if engine == "sim":
        from systems.sim.engine import SimEngine

        return SimEngine(cfg, folder)
    from harness.load_driver import LoadGenDriver  # the HTTP load generator: real engines only

    driver = LoadGenDriver(cfg.model, cfg.seed, cfg.engine.load)
    if engine == "endpoint":
        from systems.deployments.endpoint import EndpointDeployment

        return EndpointDeployment(cfg, folder, driver)
    if engine == "sglang":
        from systems.deployments.sglang import SglangDeployment

        return SglangDeployment(cfg, folder, driver)
    if topology_of(cfg.system.name).disaggregated:
        from systems.deployments.disagg import DisaggVllmDeployment

        return DisaggVllmDeployment(cfg, folder, driver)
    from systems.deployments.vllm_baseline import VllmBaselineDeployment

    return VllmBaselineDeployment(cfg, folder, driver)
