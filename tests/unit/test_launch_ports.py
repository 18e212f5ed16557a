"""Free-port selection and the clear error for a port that is already taken."""

from __future__ import annotations

import os
import socket

import pytest

from systems.launch.ports import (
    PortInUseError,
    describe_port_holder,
    ensure_port_free,
    free_port,
    port_is_free,
)

pytestmark = pytest.mark.integration  # opens sockets


def test_free_port_is_bindable_on_loopback():
    port = free_port()
    assert 0 < port < 65536
    assert port_is_free(port)
    ensure_port_free(port)  # no error


def test_taken_port_raises_naming_port_and_holder():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not port_is_free(port)
        with pytest.raises(PortInUseError) as info:
            ensure_port_free(port)
        assert info.value.port == port
        assert str(port) in str(info.value)
        assert f"pid {os.getpid()}" in str(info.value)
        assert describe_port_holder(port).startswith(f"pid {os.getpid()}")
    assert port_is_free(port)
