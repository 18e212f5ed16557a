"""Real processes: starting, watching and stopping the servers a deployment is made of.

Modules: ``processes`` (process groups, readiness, teardown), ``lifecycle`` (the context-manager life
cycle and health check every real deployment shares), ``ports`` (free and busy ports), ``vllm_server``
(vLLM command lines and servers), ``sglang_commands`` (SGLang command lines), ``mooncake_store`` (the
Mooncake Store master, pool nodes and client config), ``pool_node`` (the pool-node process),
``kv_transfer_config`` / ``kv_connectors`` / ``kv_bootstrap`` (the KV hand-off between instances),
``model_path`` (device and checkpoint), ``tiny_model`` (a locally built Llama checkpoint), ``prometheus``
(the text exposition format and vLLM's prefix-cache counters), ``shm`` (shared-memory clean-up),
``supervisor`` (the parent of every server: takes its group down when the harness dies), ``pidfile`` /
``leftovers`` (records of running servers; a dead harness's leftovers are stopped, ``python -m
systems.launch.leftovers``), ``groups`` / ``procfs`` (stopping a group, reading ``/proc``), ``child_env``
(the allow-listed environment servers get), ``hosting`` (where the servers run: this host or a Ray
cluster's nodes).
"""
