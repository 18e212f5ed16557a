"""Real processes: building the tiny local model, starting and stopping servers, ports, /metrics.

Modules: ``tiny_model`` (a locally built Llama checkpoint), ``processes`` (process groups, readiness,
teardown), ``ports`` (free and busy ports), ``vllm_server`` (vLLM command lines and servers),
``prometheus`` (the text exposition format and vLLM's prefix-cache counters).
"""
