"""KV-cache transfer links: bandwidth and latency of the paths KV moves over, and a FIFO link model.

Bandwidths are the nominal line rates (NVLink and PCIe per GPU; RDMA and TCP per NIC) times an achievable
fraction; the fraction and latencies are stated here, not fitted. ``engine.kv_link`` is one NIC per
instance (a node's NIC) unless ``engine.kv_link_per_gpu`` says each GPU of the instance has its own (a
DGX-A100 / DGX-H100 has one InfiniBand NIC per GPU): then the instance sends over all of them at once.
A transfer of ``b`` bytes takes ``latency + b / (bandwidth * efficiency)``; transfers on one link queue
behind each other.
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

    def aggregate(self, n: int) -> LinkSpec:
        """``n`` such links used at once as one (a TP group whose every GPU sends its shard over its own NIC)."""
        if n <= 1:
            return self
        return LinkSpec(f"{self.name}x{n}", self.bandwidth_gbps * n, self.latency_s, self.efficiency)


def _gbit(gbps: float) -> float:
    return gbps / 8.0


LINKS: dict[str, LinkSpec] = {
    # NVLink 3 (A100) 600 GB/s and NVLink 4 (H100) 900 GB/s bidirectional per GPU; one direction is half.
    "nvlink_a100": LinkSpec("nvlink_a100", 300.0, 5e-6),
    "nvlink_h100": LinkSpec("nvlink_h100", 450.0, 5e-6),
    # PCIe Gen4 x16: 32 GB/s per direction; Gen5 x16: 64 GB/s.
    "pcie_gen4": LinkSpec("pcie_gen4", 32.0, 10e-6),
    "pcie_gen5": LinkSpec("pcie_gen5", 64.0, 10e-6),
    # RDMA (InfiniBand / RoCE) at the given line rate: a node's NICs together (e.g. Mooncake's 4 x 200 Gbps =
    # 800 Gbps per node), or one GPU's NIC with engine.kv_link_per_gpu (Splitwise: 200 Gbps per A100, 400 per H100).
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
