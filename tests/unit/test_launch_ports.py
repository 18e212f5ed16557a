"""Free-port selection and the clear error for a port that is already taken."""

from __future__ import annotations

import os
import socket

import pytest

from systems.launch import ports
from systems.launch.ports import (
    LISTEN_PORTS_FROM,
    PortInUseError,
    describe_port_holder,
    ensure_port_free,
    ephemeral_start,
    free_port,
    port_is_free,
)

pytestmark = pytest.mark.integration  # opens sockets


def test_free_port_is_bindable_on_loopback():
    port = free_port()
    assert 0 < port < 65536
    assert port_is_free(port)
    ensure_port_free(port)  # no error


def test_free_ports_stay_out_of_the_range_outgoing_connections_use():
    # an outgoing connection's source port cannot take a listener's port between its choice and its bind
    drawn = {free_port() for _ in range(20)}
    assert all(LISTEN_PORTS_FROM <= p < ephemeral_start() for p in drawn), drawn
    assert len(drawn) > 1  # drawn at random, not one fixed port


def test_without_room_below_the_ephemeral_range_the_os_picks(monkeypatch):
    kernel_start = ephemeral_start()
    monkeypatch.setattr(ports, "ephemeral_start", lambda: 1024)  # e.g. ip_local_port_range "1024 65535"
    port = free_port()
    assert port >= kernel_start and port_is_free(port)  # bound to port 0: the kernel's ephemeral range


def test_ephemeral_start_reads_the_kernel_setting(tmp_path):
    path = tmp_path / "range"
    path.write_text("40000\t60999\n")
    assert ephemeral_start(path) == 40000
    assert ephemeral_start(tmp_path / "absent") == 32768


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
