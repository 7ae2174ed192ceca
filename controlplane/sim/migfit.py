"""Whether a large MIG request met a fragmented fleet when it arrived (the simulator's view).

At each large-GPU arrival asking for MIG instances, before any scheduler acts, the fleet's MIG
GPUs are read from the simulator's own state (the slices its running replicas hold) and the
arrival is classed as:

* ``fits``: some MIG GPU has a legal position free for the instance now (a suspended node counts
  as empty: it fits after a wake);
* ``fragmented``: no GPU has one, although the fleet's free compute slices and free memory
  slices in total would hold it: where the free slices sit decides whether it starts;
* ``no_room``: not enough free slices in the whole fleet; no placement fixes that.

Only requests for one instance are classed (every large MIG class asks for one). Measurement
only: schedulers never read it.
"""

from __future__ import annotations

from collections.abc import Iterable

from edgeplane_contract.mig import COMPUTE_SLICES, MEMORY_SLICES, MIG_SPECS, legal_starts

from controlplane.sim.physics import SimNode

__all__ = ["FITS", "FRAGMENTED", "NO_ROOM", "arrival_fit", "gpu_occupancy"]

FITS = "fits"
FRAGMENTED = "fragmented"
NO_ROOM = "no_room"


def gpu_occupancy(node: SimNode) -> dict[int, tuple[int, int]]:
    """(memory bitmap, compute used) of each MIG GPU of ``node``, by device index."""
    occ = {g.index: (0, 0) for g in node.template.gpus if g.mig_enabled}
    for rep in node.replicas.values():
        for s in rep.assignment.mig:
            mask, compute = occ[s.gpu]
            spec = MIG_SPECS[s.profile]
            occ[s.gpu] = (mask | spec.mask(s.start), compute + spec.compute)
    return occ


def arrival_fit(nodes: Iterable[SimNode], profile: str) -> str:
    """Class one ``profile`` instance against the fleet's MIG GPUs now (module docstring)."""
    spec = MIG_SPECS[profile]
    free_compute = 0
    free_memory = 0
    for node in nodes:
        if node.state == "dead" or not node.mig_gpus:
            continue
        for mask, compute in gpu_occupancy(node).values():
            if legal_starts(mask, compute, profile):
                return FITS
            free_compute += COMPUTE_SLICES - compute
            free_memory += MEMORY_SLICES - bin(mask).count("1")
    if free_compute >= spec.compute and free_memory >= spec.memory_slices:
        return FRAGMENTED
    return NO_ROOM
