"""The simulator's true network: per-rack-pair links, some congested, plus noisy measurements.

Schedulers never read this; they see only the samples fed to their topology graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.federation.config import FederationConfig

__all__ = ["Network", "NodePlace"]

LOCAL_BW = 2.0e9
ZONE_BW = 1.25e9
ZONE_LAT_MS = 0.05
CLUSTER_BW = 5.0e8
CLUSTER_LAT_MS = 0.3
WAN_BW = 1.25e8
CONGESTED_FACTOR = 0.25


@dataclass(frozen=True, slots=True)
class NodePlace:
    zone: int
    cluster: str
    region: str


class Network:
    """Links between nodes: same node, same rack, same cluster, across regions."""

    def __init__(
        self,
        places: list[NodePlace],
        federation: FederationConfig | None,
        rng: np.random.Generator,
        *,
        congested_fraction: float,
    ) -> None:
        self.places = places
        self.federation = federation
        zones = max((p.zone for p in places), default=-1) + 1
        # Oversubscribed or busy uplinks between some racks: a quarter of the bandwidth.
        draw = rng.random((zones, zones))
        congested = np.triu(draw < congested_fraction, 1)
        self.congested = congested | congested.T

    def _region_ms(self, a: str, b: str) -> float:
        if a == b:
            return 0.0
        if self.federation is None:
            return 100.0
        return self.federation.latency_between(a, b)

    def link(self, a: int, b: int) -> tuple[float, float]:
        """(latency ms, bandwidth bytes/s) between nodes ``a`` and ``b``."""
        if a == b:
            return 0.0, LOCAL_BW
        pa, pb = self.places[a], self.places[b]
        if pa.cluster != pb.cluster:
            return CLUSTER_LAT_MS + self._region_ms(pa.region, pb.region), WAN_BW
        if pa.zone == pb.zone:
            return ZONE_LAT_MS, ZONE_BW
        factor = CONGESTED_FACTOR if self.congested[pa.zone, pb.zone] else 1.0
        return CLUSTER_LAT_MS, CLUSTER_BW * factor

    def transfer_s(self, src: int, dst: int, nbytes: float) -> float:
        latency, bandwidth = self.link(src, dst)
        return latency / 1000.0 + nbytes / bandwidth

    def transfer_from_region_s(self, region: str, dst: int, nbytes: float) -> float:
        """Reading from a region's object store (in-region at cluster bandwidth, else WAN)."""
        place = self.places[dst]
        if place.region == region:
            return CLUSTER_LAT_MS / 1000.0 + nbytes / CLUSTER_BW
        return (CLUSTER_LAT_MS + self._region_ms(region, place.region)) / 1000.0 + nbytes / WAN_BW

    def measure(self, a: int, b: int, rng: np.random.Generator) -> tuple[float, float]:
        """A noisy probe of the a-b link (10% lognormal noise), as an agent would report it."""
        latency, bandwidth = self.link(a, b)
        noise = np.exp(rng.normal(0.0, 0.1, size=2))
        return float(latency * noise[0]), float(bandwidth * noise[1])
