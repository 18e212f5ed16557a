"""Servers listen where the deployment says: ``engine.extra_args`` cannot move a server's host or port
(``--host 0.0.0.0`` appended to the command line would expose it on every interface)."""

from __future__ import annotations

import pytest

from vocab.errors import ConfigError


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("args", ["[--host,0.0.0.0]", "[--port,8000]", "['--host=0.0.0.0']", "[--enforce-eager,'--port=1']"])
def test_listener_flags_in_extra_args_are_refused(compose, engine: str, args: str) -> None:
    with pytest.raises(ConfigError, match=r"engine.extra_args: '--(host|port).*' is refused.*remove --(host|port)"):
        compose([f"engine={engine}", f"engine.extra_args={args}"])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_other_extra_args_pass(compose, engine: str) -> None:
    cfg = compose([f"engine={engine}", "engine.extra_args=[--enforce-eager,--hostname-alias]"])
    assert list(cfg.engine.extra_args) == ["--enforce-eager", "--hostname-alias"]
