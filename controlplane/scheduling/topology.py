"""The network topology graph: zones (racks) as vertices, edges weighted by measured links.

Agents (or the simulator) report latency and bandwidth samples between nodes; the graph keeps
the samples of a sliding window per zone pair and, at most every ``refresh_s`` seconds, turns them
into edge weights (median latency, median bandwidth). A transfer of ``B`` bytes between two zones
costs the edge's latency plus ``B`` over its bandwidth. Edges are direct: in a leaf-spine fabric
traffic between two racks takes the spine, not a detour through a third rack, so a congested
pair stays congested. Pairs without samples fall back to configured defaults: within a zone,
across zones of a cluster, across clusters (plus the federation's inter-region latency).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgeplane_contract.arrays import FloatArray

__all__ = ["LinkDefaults", "TopologyGraph"]


@dataclass(frozen=True, slots=True)
class LinkDefaults:
    """Links assumed where nothing was measured yet (latency ms, bandwidth bytes/s)."""

    local_bandwidth: float = 2.0e9  # reading from the node's own disks
    zone_latency_ms: float = 0.05
    zone_bandwidth: float = 1.25e9  # 10 Gb/s top-of-rack
    cluster_latency_ms: float = 0.3
    cluster_bandwidth: float = 5.0e8  # oversubscribed spine, ~4 Gb/s per flow
    wan_bandwidth: float = 1.25e8  # 1 Gb/s between regions


class TopologyGraph:
    """Zone-to-zone link estimates from a sliding window of samples."""

    def __init__(
        self,
        *,
        window_s: float = 60.0,
        refresh_s: float = 5.0,
        defaults: LinkDefaults | None = None,
        region_latency_ms: Callable[[str, str], float] | None = None,
    ) -> None:
        self.window_s = window_s
        self.refresh_s = refresh_s
        self.defaults = defaults or LinkDefaults()
        self._region_latency = region_latency_ms or (lambda a, b: 0.0 if a == b else 100.0)
        self._zones: list[str] = []
        self._zone_cluster: list[str] = []
        self._zone_region: list[str] = []
        self._samples: dict[tuple[int, int], deque[tuple[float, float, float]]] = {}
        self._last_refresh = -np.inf
        self._dirty = True
        self.refreshes = 0
        self._lat: FloatArray = np.zeros((0, 0))
        self._bw: FloatArray = np.zeros((0, 0))

    def set_zones(self, zones: list[str], clusters: list[str], regions: list[str]) -> None:
        """Declare the zones (index order matters: it is the node table's zone ids)."""
        if zones != self._zones or clusters != self._zone_cluster or regions != self._zone_region:
            self._zones = list(zones)
            self._zone_cluster = list(clusters)
            self._zone_region = list(regions)
            self._dirty = True

    def observe(self, zone_a: int, zone_b: int, latency_ms: float, bandwidth: float, at: float) -> None:
        """Record one measurement between two zones (symmetric)."""
        if zone_a == zone_b:
            return
        key = (min(zone_a, zone_b), max(zone_a, zone_b))
        self._samples.setdefault(key, deque()).append((at, float(latency_ms), float(bandwidth)))
        self._dirty = True

    def refresh(self, now: float, *, force: bool = False) -> bool:
        """Rebuild edge weights from the window if due; True if it did."""
        if not force and (now - self._last_refresh < self.refresh_s or not self._dirty):
            return False
        z = len(self._zones)
        d = self.defaults
        lat = np.full((z, z), np.inf)
        bw = np.zeros((z, z))
        clusters = np.array(self._zone_cluster, dtype=object)
        regions = self._zone_region
        for i in range(z):
            same_cluster = clusters == clusters[i]
            lat[i, same_cluster] = d.cluster_latency_ms
            bw[i, same_cluster] = d.cluster_bandwidth
            for j in np.flatnonzero(~same_cluster):
                lat[i, j] = d.cluster_latency_ms + self._region_latency(regions[i], regions[j])
                bw[i, j] = d.wan_bandwidth if regions[i] != regions[j] else d.cluster_bandwidth
        for (a, b), samples in list(self._samples.items()):
            while samples and samples[0][0] < now - self.window_s:
                samples.popleft()
            if not samples:
                del self._samples[(a, b)]
                continue
            if a < z and b < z:
                lat[a, b] = lat[b, a] = statistics.median(s[1] for s in samples)
                bw[a, b] = bw[b, a] = statistics.median(s[2] for s in samples)
        np.fill_diagonal(lat, d.zone_latency_ms)
        np.fill_diagonal(bw, d.zone_bandwidth)
        self._lat = lat
        self._bw = bw
        self._last_refresh = now
        self._dirty = False
        self.refreshes += 1
        return True

    def transfer_s_from_zone(self, zone: int, nbytes: float, now: float) -> FloatArray:
        """Seconds to move ``nbytes`` from ``zone`` to every zone (index = zone id)."""
        self.refresh(now)
        if zone >= len(self._lat):
            return np.zeros(len(self._lat))
        result: FloatArray = self._lat[zone] / 1000.0 + nbytes / np.maximum(self._bw[zone], 1.0)
        return result

    def transfer_s_from_region(self, region: str, nbytes: float) -> FloatArray:
        """Seconds to move ``nbytes`` from a region's object store to every zone."""
        d = self.defaults
        out = np.zeros(len(self._zones))
        for i, zone_region in enumerate(self._zone_region):
            if zone_region == region:
                out[i] = d.cluster_latency_ms / 1000.0 + nbytes / d.cluster_bandwidth
            else:
                out[i] = self._region_latency(region, zone_region) / 1000.0 + nbytes / d.wan_bandwidth
        return out

    def edge(self, zone_a: int, zone_b: int) -> tuple[float, float]:
        """Current (latency ms, bandwidth bytes/s) estimate of the path between two zones."""
        return float(self._lat[zone_a, zone_b]), float(self._bw[zone_a, zone_b])
