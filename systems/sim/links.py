"""KV-cache transfer links: bandwidth and latency of the paths KV moves over, and a FIFO link model.

Bandwidths are the nominal line rates (NVLink and PCIe per GPU, network per node) times an achievable
fraction; the fraction and latencies are stated here, not fitted. A transfer of ``b`` bytes takes
``latency + b / (bandwidth * efficiency)``; transfers on one link queue behind each other (one NIC).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinkSpec:
    """One kind of link."""

    name: str
    bandwidth_gbps: float  # GB/s (bytes), nominal
    latency_s: float
    efficiency: float = 0.8  # achievable fraction of the nominal bandwidth

    def transfer_time_s(self, n_bytes: float) -> float:
        """Seconds to move ``n_bytes`` on an idle link."""
        if n_bytes <= 0:
            return 0.0
        return self.latency_s + n_bytes / (self.bandwidth_gbps * 1e9 * self.efficiency)


def _gbit(gbps: float) -> float:
    return gbps / 8.0


LINKS: dict[str, LinkSpec] = {
    # NVLink 3 (A100) 600 GB/s and NVLink 4 (H100) 900 GB/s bidirectional per GPU; one direction is half.
    "nvlink_a100": LinkSpec("nvlink_a100", 300.0, 5e-6),
    "nvlink_h100": LinkSpec("nvlink_h100", 450.0, 5e-6),
    # PCIe Gen4 x16: 32 GB/s per direction; Gen5 x16: 64 GB/s.
    "pcie_gen4": LinkSpec("pcie_gen4", 32.0, 10e-6),
    "pcie_gen5": LinkSpec("pcie_gen5", 64.0, 10e-6),
    # RDMA (InfiniBand / RoCE) per node at the given line rate, e.g. Mooncake's 8 x 100 Gbps = 800 Gbps.
    "rdma_100": LinkSpec("rdma_100", _gbit(100), 10e-6),
    "rdma_200": LinkSpec("rdma_200", _gbit(200), 10e-6),
    "rdma_400": LinkSpec("rdma_400", _gbit(400), 10e-6),
    "rdma_800": LinkSpec("rdma_800", _gbit(800), 10e-6),
    # Kernel TCP over 25 GbE: lower efficiency and higher latency than RDMA.
    "tcp_25g": LinkSpec("tcp_25g", _gbit(25), 100e-6, efficiency=0.6),
    "tcp": LinkSpec("tcp", _gbit(10), 200e-6, efficiency=0.6),
}


def get_link(name: str) -> LinkSpec:
    """The link named ``name``; ``ValueError`` listing the known names otherwise."""
    try:
        return LINKS[name]
    except KeyError:
        raise ValueError(f"unknown link {name!r}; known: {', '.join(sorted(LINKS))}") from None


class FifoLink:
    """A link that serves one transfer at a time, in request order (a node's NIC)."""

    __slots__ = ("busy_until", "bytes_moved", "spec")

    def __init__(self, spec: LinkSpec) -> None:
        self.spec = spec
        self.busy_until = 0.0
        self.bytes_moved = 0.0

    def transfer(self, now: float, n_bytes: float) -> tuple[float, float]:
        """Queue a transfer at ``now``; returns (start, end) times."""
        start = max(now, self.busy_until)
        end = start + self.spec.transfer_time_s(n_bytes)
        self.busy_until = end
        self.bytes_moved += n_bytes
        return start, end
