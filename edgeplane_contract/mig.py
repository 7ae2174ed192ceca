"""A100-40GB MIG geometry: profiles, legal placements, occupancy, fragmentation value, repacking.

An A100-40GB in MIG mode has 7 compute slices and 8 memory slices (5 GB each). A GPU instance of a
profile occupies a contiguous run of memory slices starting at one of the positions NVIDIA allows
for that profile (``nvidia-smi mig -lgipp``; NVIDIA MIG user guide, "A100 MIG Profiles")::

    1g.5gb   {0,1,2,3,4,5,6}:1     2g.10gb  {0,2,4}:2     3g.20gb  {0,4}:4
    4g.20gb  {0}:4                 7g.40gb  {0}:8

and the compute slices of all instances on a GPU add up to at most 7. Occupancy of one GPU is an
8-bit memory-slice bitmap plus the number of compute slices in use; those two numbers decide
every legal placement, which is what lets the scheduler vectorise MIG feasibility with lookup
tables indexed by the bitmap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from edgeplane_contract.resources import MIG_PROFILES

__all__ = [
    "COMPUTE_SLICES",
    "MEMORY_SLICES",
    "MIG_SPECS",
    "VALUE_TABLE",
    "MigProfileSpec",
    "fits",
    "fragmentation_value",
    "legal_starts",
    "make_room",
    "occupancy",
    "repack",
]

COMPUTE_SLICES = 7
MEMORY_SLICES = 8


@dataclass(frozen=True, slots=True)
class MigProfileSpec:
    """One MIG profile: compute slices, memory slices occupied, allowed start positions."""

    name: str
    compute: int
    memory_slices: int
    memory_gb: int
    starts: tuple[int, ...]

    def mask(self, start: int) -> int:
        """Memory-slice bitmap of an instance of this profile placed at ``start``."""
        return ((1 << self.memory_slices) - 1) << start


MIG_SPECS: dict[str, MigProfileSpec] = {
    "1g.5gb": MigProfileSpec("1g.5gb", 1, 1, 5, (0, 1, 2, 3, 4, 5, 6)),
    "2g.10gb": MigProfileSpec("2g.10gb", 2, 2, 10, (0, 2, 4)),
    "3g.20gb": MigProfileSpec("3g.20gb", 3, 4, 20, (0, 4)),
    "4g.20gb": MigProfileSpec("4g.20gb", 4, 4, 20, (0,)),
    "7g.40gb": MigProfileSpec("7g.40gb", 7, 8, 40, (0,)),
}

# The resource model names the same profiles; keep the two tables from drifting apart.
assert {name: (s.compute, s.memory_gb) for name, s in MIG_SPECS.items()} == MIG_PROFILES


def fits(occ: int, compute_used: int, profile: str, start: int) -> bool:
    """Whether an instance of ``profile`` can be created at ``start`` on a GPU in this state."""
    spec = MIG_SPECS[profile]
    if start not in spec.starts:
        return False
    return (occ & spec.mask(start)) == 0 and compute_used + spec.compute <= COMPUTE_SLICES


def legal_starts(occ: int, compute_used: int, profile: str) -> list[int]:
    """Start positions where ``profile`` fits now, lowest first."""
    return [s for s in MIG_SPECS[profile].starts if fits(occ, compute_used, profile, s)]


def occupancy(instances: Iterable[tuple[str, int]]) -> tuple[int, int]:
    """(memory bitmap, compute slices used) of a set of (profile, start) instances."""
    occ = 0
    compute = 0
    for profile, start in instances:
        spec = MIG_SPECS[profile]
        occ |= spec.mask(start)
        compute += spec.compute
    return occ, compute


def _value(occ: int, compute_used: int) -> float:
    # The placeability of what is left: for each profile, how many instances of it alone could
    # still be created, times its compute size. Destroying room for a 7g or 4g instance costs
    # more than one 1g slot, so the placement that loses least keeps large contiguous blocks
    # free (it puts a lone 1g.5gb at slice 6, NVIDIA's own advice, rather than at 0).
    total = 0.0
    free_compute = COMPUTE_SLICES - compute_used
    for spec in MIG_SPECS.values():
        # Starts of one profile never overlap each other, so the free ones can all be used at
        # once, compute permitting.
        free_starts = sum(1 for s in spec.starts if not occ & spec.mask(s))
        total += spec.compute * min(free_starts, free_compute // spec.compute)
    return total


def fragmentation_value(occ: int, compute_used: int) -> float:
    """How much of the GPU's remaining space is usable for each profile (higher is better)."""
    return float(VALUE_TABLE[occ, compute_used])


def _build_value_table() -> npt.NDArray[np.float64]:
    table = np.zeros((1 << MEMORY_SLICES, COMPUTE_SLICES + 1), dtype=np.float64)
    for occ in range(1 << MEMORY_SLICES):
        for compute in range(COMPUTE_SLICES + 1):
            table[occ, compute] = _value(occ, compute)
    return table


VALUE_TABLE: npt.NDArray[np.float64] = _build_value_table()


@dataclass(slots=True)
class _Gpu:
    occ: int
    compute: int


def repack(
    gpus: Sequence[tuple[int, int]],
    movable: Sequence[tuple[object, str]],
    incoming: Sequence[str],
) -> tuple[dict[object, tuple[int, int]], list[tuple[int, int]]] | None:
    """Re-lay out movable MIG instances so that ``incoming`` profiles fit too (the fragment merge).

    ``gpus`` holds (memory bitmap, compute used) of each MIG GPU *without* the movable instances
    (what stays put); ``movable`` holds (key, profile) of instances that may be re-created
    elsewhere on the same node. Largest instances are placed first, each at the legal position
    that loses the least fragmentation value. Returns ``({key: (gpu, start)}, [(gpu, start) for
    each incoming profile])`` or None when no layout holds everything.
    """
    state = [_Gpu(occ, compute) for occ, compute in gpus]
    items: list[tuple[int, int, object, str]] = []
    for order, (key, profile) in enumerate(movable):
        items.append((MIG_SPECS[profile].compute, order, key, profile))
    incoming_keys: list[object] = []
    for order, profile in enumerate(incoming):
        marker = ("__incoming__", order)
        incoming_keys.append(marker)
        items.append((MIG_SPECS[profile].compute, len(movable) + order, marker, profile))
    # Largest first; ties keep input order so the result is deterministic.
    items.sort(key=lambda item: (-item[0], item[1]))
    layout: dict[object, tuple[int, int]] = {}
    for _, _, key, profile in items:
        spec = MIG_SPECS[profile]
        best: tuple[float, int, int] | None = None
        for index, gpu in enumerate(state):
            before = VALUE_TABLE[gpu.occ, gpu.compute]
            for start in legal_starts(gpu.occ, gpu.compute, profile):
                after = VALUE_TABLE[gpu.occ | spec.mask(start), gpu.compute + spec.compute]
                candidate = (float(before - after), index, start)
                if best is None or candidate < best:
                    best = candidate
        if best is None:
            return None
        _, index, start = best
        state[index].occ |= spec.mask(start)
        state[index].compute += spec.compute
        layout[key] = (index, start)
    placed_incoming = [layout.pop(key) for key in incoming_keys]
    return layout, placed_incoming


def make_room(
    gpus: Sequence[Sequence[tuple[object, str, int]]],
    movable: frozenset[object] | set[object],
    profile: str,
) -> tuple[tuple[int, int], dict[object, tuple[int, int]]] | None:
    """Fewest moves that let one ``profile`` instance in (the targeted fragment merge).

    ``gpus`` lists each MIG GPU's instances as (key, profile, start). For every legal target
    position, the instances overlapping it (and, if compute is short, the smallest other movable
    ones on that GPU) are re-placed elsewhere on the node by best fit. Returns ``((gpu, start) for
    the new instance, {key: (gpu, start)} of the moves)`` with the fewest moves, or None.
    """
    spec = MIG_SPECS[profile]
    best: tuple[int, int, int, dict[object, tuple[int, int]]] | None = None
    for target, instances in enumerate(gpus):
        for start in spec.starts:
            tmask = spec.mask(start)
            conflicts = [i for i in instances if MIG_SPECS[i[1]].mask(i[2]) & tmask]
            if any(i[0] not in movable for i in conflicts):
                continue
            staying = [i for i in instances if i not in conflicts]
            compute = sum(MIG_SPECS[i[1]].compute for i in staying)
            extra = sorted((i for i in staying if i[0] in movable), key=lambda i: MIG_SPECS[i[1]].compute)
            moving = list(conflicts)
            while compute + spec.compute > COMPUTE_SLICES and extra:
                victim = extra.pop(0)
                staying.remove(victim)
                moving.append(victim)
                compute -= MIG_SPECS[victim[1]].compute
            if compute + spec.compute > COMPUTE_SLICES:
                continue
            if best is not None and len(moving) >= best[0]:
                continue
            state = []
            for index, insts in enumerate(gpus):
                keep = staying if index == target else insts
                occ, comp = occupancy((p, s) for _, p, s in keep)
                if index == target:
                    occ |= tmask
                    comp += spec.compute
                state.append(_Gpu(occ, comp))
            moves: dict[object, tuple[int, int]] = {}
            for key, moved_profile, _ in sorted(moving, key=lambda i: -MIG_SPECS[i[1]].compute):
                mspec = MIG_SPECS[moved_profile]
                choice: tuple[float, int, int] | None = None
                for index, gpu in enumerate(state):
                    before = VALUE_TABLE[gpu.occ, gpu.compute]
                    for s in legal_starts(gpu.occ, gpu.compute, moved_profile):
                        after = VALUE_TABLE[gpu.occ | mspec.mask(s), gpu.compute + mspec.compute]
                        option = (float(before - after), index, s)
                        if choice is None or option < choice:
                            choice = option
                if choice is None:
                    break
                _, index, s = choice
                state[index].occ |= mspec.mask(s)
                state[index].compute += mspec.compute
                moves[key] = (index, s)
            else:
                best = (len(moving), target, start, moves)
    if best is None:
        return None
    return (best[1], best[2]), best[3]
