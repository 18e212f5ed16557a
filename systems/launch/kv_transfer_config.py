"""vLLM ``--kv-transfer-config`` values and Mooncake settings for the disaggregated systems (pure functions).

* The prefill->decode hand-off: on CPU hosts the suite's ``SuiteMooncakeConnector`` (vLLM's
  ``MooncakeConnector`` loaded through ``systems.launch.kv_connectors``) over TCP; on GPU hosts vLLM's
  ``MooncakeConnector`` over RDMA or ``NixlConnector``. Prefill instances register with an external
  bootstrap registry (``bootstrap_server_address``, see :mod:`systems.launch.kv_bootstrap`).
* The cluster pool: vLLM's ``MooncakeStoreConnector`` configured by a JSON file named in
  ``MOONCAKE_CONFIG_PATH`` (:func:`systems.launch.mooncake_store.mooncake_store_json`), with ``lookup_async``
  and a load-failure policy.
* Both on one prefill instance: ``SuiteMultiConnector`` (vLLM's ``MultiConnector``) with the pool first,
  so a prefix found in the pool is loaded by the store connector and the rest computed.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

SUITE_CONNECTORS = "systems.launch.kv_connectors"
Role = Literal["kv_producer", "kv_consumer", "kv_both"]


def pd_connector(role: Role, device: str, connector: str = "auto", protocol: str = "auto",
                 bootstrap_address: Optional[str] = None) -> dict[str, Any]:
    """The P/D hand-off connector of one instance (``bootstrap_address`` is ``host:port``, prefill only)."""
    if connector == "nixl":
        extra: dict[str, Any] = {}
        cfg: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": role, "kv_connector_extra_config": extra}
        if device == "cpu":
            cfg["kv_buffer_device"] = "cpu"
        return cfg
    proto = protocol if protocol != "auto" else ("tcp" if device == "cpu" else "rdma")
    extra = {"mooncake_protocol": proto}
    if bootstrap_address:
        extra["bootstrap_server_address"] = bootstrap_address
    cfg = {"kv_connector": "MooncakeConnector", "kv_role": role, "kv_connector_extra_config": extra}
    if device == "cpu":
        cfg.update(kv_connector="SuiteMooncakeConnector", kv_connector_module_path=SUITE_CONNECTORS)
    return cfg


def store_connector(lookup_async: bool = True, load_failure_policy: str = "recompute") -> dict[str, Any]:
    """vLLM's ``MooncakeStoreConnector`` (reads and writes the cluster pool)."""
    return {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"lookup_async": lookup_async},
            "kv_load_failure_policy": load_failure_policy}


def multi_connector(children: list[dict[str, Any]], role: Role, load_failure_policy: str = "recompute",
                    device: str = "cpu") -> dict[str, Any]:
    """Several connectors on one instance (the first that has a prefix loads it)."""
    cfg: dict[str, Any] = {"kv_connector": "MultiConnector", "kv_role": role,
                           "kv_load_failure_policy": load_failure_policy,
                           "kv_connector_extra_config": {"connectors": children}}
    if device == "cpu" or any(c.get("kv_connector_module_path") == SUITE_CONNECTORS for c in children):
        cfg.update(kv_connector="SuiteMultiConnector", kv_connector_module_path=SUITE_CONNECTORS)
    return cfg
