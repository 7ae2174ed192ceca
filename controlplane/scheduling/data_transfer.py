"""How long a workload's input takes to reach each node, from the measured topology.

The DataLocality score and the reward's transfer term (plugins, and ``Scheduler.reward_of`` for
trainers) share this one estimate.
"""

from __future__ import annotations

import numpy as np

from controlplane.scheduling.framework import FloatArray, Handle, IntArray
from controlplane.scheduling.model import WorkloadRequest

__all__ = ["transfer_seconds"]


def transfer_seconds(handle: Handle, request: WorkloadRequest, rows: IntArray, now: float) -> FloatArray:
    """Seconds to bring the workload's input to each node in ``rows`` (zeros if it has none)."""
    if not request.data_location or request.data_bytes <= 0:
        return np.zeros(len(rows))
    nodes = handle.nodes
    topo = handle.topology
    location = request.data_location
    src = nodes.index.get(location)
    if src is not None:
        per_zone = topo.transfer_s_from_zone(int(nodes.zone[src]), request.data_bytes, now)
        times = per_zone[nodes.zone[rows]] if len(per_zone) else np.zeros(len(rows))
        local: FloatArray = np.where(rows == src, request.data_bytes / topo.defaults.local_bandwidth, times)
        return local
    if location in nodes.regions.ids:
        per_zone = topo.transfer_s_from_region(location, request.data_bytes)
        result: FloatArray = per_zone[nodes.zone[rows]] if len(per_zone) else np.zeros(len(rows))
        return result
    return np.zeros(len(rows))
