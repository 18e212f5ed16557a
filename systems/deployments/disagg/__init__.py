"""Real disaggregated vLLM deployments (``system=distserve|mooncake|splitwise engine=vllm``): bring-up and
measuring (:mod:`.deployment`), the router's config (:mod:`.router_config`) and what each point learns
from the deployment's logs and counters (:mod:`.facts`)."""

from systems.deployments.disagg.deployment import DisaggVllmDeployment, default_cores, reset_prefix_cache

__all__ = ["DisaggVllmDeployment", "default_cores", "reset_prefix_cache"]
