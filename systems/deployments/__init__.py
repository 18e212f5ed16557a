"""The real deployments behind the engine contract (:mod:`systems.contract`): the vLLM baseline
(:mod:`.vllm_baseline`), disaggregated vLLM (:mod:`.disagg`), SGLang (:mod:`.sglang`) and a service the user
started (:mod:`.endpoint`); :mod:`.http_point` measures one point over HTTP for all of them. The factory
that picks one is ``harness.engines``."""
