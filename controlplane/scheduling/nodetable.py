"""The node table: every node's capacity and allocation as numpy columns (struct of arrays).

Filters and scores are vectorised over these columns, so one decision costs a few dozen array
operations whatever the node count. Rows are kept dense (adding or removing a node rebuilds the
columns, which is rare next to scheduling); in-place updates of an existing node are cheap.

GPU columns are 2-D ``(nodes, max GPUs per node)``; a node with fewer GPUs has ``has_gpu`` False
in the spare columns. MIG occupancy is the memory-slice bitmap and compute slices per GPU (see
:mod:`.mig`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from edgeplane_contract.arrays import BoolArray, FloatArray, IntArray
from edgeplane_contract.mig import MIG_SPECS
from edgeplane_contract.resources import NODE_TYPES

from controlplane.scheduling.model import Assignment, NodeState

__all__ = ["ZONE_LABEL", "NodeTable"]

# Zone (rack) label used for topology spread and locality; nodes without it form their own zone.
ZONE_LABEL = "topology.kubernetes.io/zone"

_FLOAT_COLS = ("cpu_cap", "cpu_alloc", "mem_cap", "mem_alloc", "eph_cap", "eph_alloc", "battery_pct")
_INT_COLS = (
    "gpu_count",
    "dpu_count",
    "dpu_used",
    "cluster",
    "region",
    "zone",
    "node_type",
    "replicas",
    "io_count",
    "freed_at",
    "gpu_sevenths",
    "sens_milli",
    "row_version",
)
_BOOL_COLS = ("ready", "on_battery")
_GPU_BOOL = ("has_gpu", "mig_gpu", "gpu_used")
_GPU_INT = ("mig_occ", "mig_comp")


class _Interner:
    """Maps names (clusters, regions, zones) to small ints, append-only."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.ids: dict[str, int] = {}

    def id(self, name: str) -> int:
        found = self.ids.get(name)
        if found is None:
            found = self.ids[name] = len(self.names)
            self.names.append(name)
        return found


class NodeTable:
    """Dense columns over all known nodes. Row order is insertion order."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.states: list[NodeState] = []
        self.clusters = _Interner()
        self.regions = _Interner()
        self.zones = _Interner()
        self.version = 0
        # Derived values that depend only on node facts (not allocations); cleared on upsert/remove.
        self.static_cache: dict[str, Any] = {}
        self._label_cache: dict[tuple[str, str], BoolArray] = {}
        self._gcols = 0
        self.cpu_cap: FloatArray = np.zeros(0)
        self.cpu_alloc: FloatArray = np.zeros(0)
        self.mem_cap: FloatArray = np.zeros(0)
        self.mem_alloc: FloatArray = np.zeros(0)
        # Ephemeral storage in bytes; a node that does not report it has infinite capacity (not
        # counted), so fleets without the field (the simulator, older agents) decide as before.
        self.eph_cap: FloatArray = np.zeros(0)
        self.eph_alloc: FloatArray = np.zeros(0)
        self.battery_pct: FloatArray = np.zeros(0)
        # Sum of the contention sensitivities of a node's replicas, in thousandths (integers, so
        # an emptied node reads exactly zero again).
        self.sens_milli: IntArray = np.zeros(0, dtype=np.int64)
        # GPU compute held, in sevenths of a GPU (a whole GPU is 7, a MIG instance its compute
        # slices), kept by apply() in integers so long runs do not drift.
        self.gpu_sevenths: IntArray = np.zeros(0, dtype=np.int64)
        self.gpu_count: IntArray = np.zeros(0, dtype=np.int64)
        self.dpu_count: IntArray = np.zeros(0, dtype=np.int64)
        self.dpu_used: IntArray = np.zeros(0, dtype=np.int64)
        self.cluster: IntArray = np.zeros(0, dtype=np.int64)
        self.region: IntArray = np.zeros(0, dtype=np.int64)
        self.zone: IntArray = np.zeros(0, dtype=np.int64)
        self.node_type: IntArray = np.zeros(0, dtype=np.int64)
        self.replicas: IntArray = np.zeros(0, dtype=np.int64)
        self.io_count: IntArray = np.zeros(0, dtype=np.int64)
        # The scheduler's capacity epoch when the node's free capacity last grew.
        self.freed_at: IntArray = np.zeros(0, dtype=np.int64)
        # ``version`` when the row's allocations or readiness last changed: what a view kept
        # per row (the cluster aggregates) recomputes is the rows changed since it looked.
        self.row_version: IntArray = np.zeros(0, dtype=np.int64)
        self.ready: BoolArray = np.zeros(0, dtype=bool)
        self.on_battery: BoolArray = np.zeros(0, dtype=bool)
        self.has_gpu: BoolArray = np.zeros((0, 0), dtype=bool)
        self.mig_gpu: BoolArray = np.zeros((0, 0), dtype=bool)
        self.gpu_used: BoolArray = np.zeros((0, 0), dtype=bool)
        self.mig_occ: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.mig_comp: IntArray = np.zeros((0, 0), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_columns(self) -> int:
        return self._gcols

    # -- structure -------------------------------------------------------------------------

    def _resize(self, rows: int, gcols: int) -> None:
        old_rows = len(self.cpu_cap)
        keep = min(old_rows, rows)
        for name in _FLOAT_COLS + _INT_COLS + _BOOL_COLS:
            old = getattr(self, name)
            new = np.zeros(rows, dtype=old.dtype)
            new[:keep] = old[:keep]
            setattr(self, name, new)
        for name in _GPU_BOOL + _GPU_INT:
            old = getattr(self, name)
            new = np.zeros((rows, gcols), dtype=old.dtype)
            new[:keep, : min(self._gcols, gcols)] = old[:keep, : min(self._gcols, gcols)]
            setattr(self, name, new)
        self._gcols = gcols

    def upsert(self, node: NodeState) -> int:
        """Add or update a node's static facts; allocation columns of a new row start at zero."""
        if node.node_type not in NODE_TYPES:
            raise ValueError(f"node_type must be one of {', '.join(NODE_TYPES)}, got {node.node_type!r}")
        row = self.index.get(node.name)
        gcols = max(self._gcols, len(node.gpus))
        if row is None:
            row = len(self.names)
            self._resize(row + 1, gcols)
            self.names.append(node.name)
            self.index[node.name] = row
            self.states.append(node)
        else:
            if gcols > self._gcols:
                self._resize(len(self.names), gcols)
            self.states[row] = node
        self.cpu_cap[row] = float(node.cpu)
        self.mem_cap[row] = float(node.memory)
        self.eph_cap[row] = float(node.ephemeral_storage) if node.ephemeral_storage > 0 else np.inf
        self.ready[row] = bool(node.ready)
        self.on_battery[row] = node.power_source == "battery"
        self.battery_pct[row] = float(node.battery_percent) if node.battery_percent is not None else np.nan
        self.cluster[row] = self.clusters.id(node.cluster)
        self.region[row] = self.regions.id(node.region)
        self.zone[row] = self.zones.id(node.labels.get(ZONE_LABEL, f"{node.cluster}/{node.name}"))
        self.node_type[row] = NODE_TYPES.index(node.node_type)
        self.gpu_count[row] = len(node.gpus)
        self.dpu_count[row] = int(node.dpus)
        self.has_gpu[row, :] = False
        self.mig_gpu[row, :] = False
        for col, gpu in enumerate(sorted(node.gpus, key=lambda g: g.index)):
            self.has_gpu[row, col] = True
            self.mig_gpu[row, col] = gpu.mig_enabled
        self.version += 1
        self.static_cache.clear()
        self._label_cache.clear()
        return row

    def remove(self, name: str) -> None:
        row = self.index.pop(name)
        keep = np.ones(len(self.names), dtype=bool)
        keep[row] = False
        for col in _FLOAT_COLS + _INT_COLS + _BOOL_COLS + _GPU_BOOL + _GPU_INT:
            setattr(self, col, getattr(self, col)[keep])
        del self.names[row]
        del self.states[row]
        for i in range(row, len(self.names)):
            self.index[self.names[i]] = i
        self.version += 1
        self.static_cache.clear()
        self._label_cache.clear()

    def clear_allocations(self, row: int) -> None:
        self.cpu_alloc[row] = 0.0
        self.mem_alloc[row] = 0.0
        self.eph_alloc[row] = 0.0
        self.gpu_used[row, :] = False
        self.mig_occ[row, :] = 0
        self.mig_comp[row, :] = 0
        self.dpu_used[row] = 0
        self.sens_milli[row] = 0
        self.gpu_sevenths[row] = 0
        self.replicas[row] = 0
        self.io_count[row] = 0
        self.version += 1
        self.row_version[row] = self.version

    def set_ready(self, row: int, ready: bool) -> None:
        self.ready[row] = ready
        self.states[row] = replace(self.states[row], ready=ready)
        self.version += 1
        self.row_version[row] = self.version

    # -- accounting ------------------------------------------------------------------------

    def gpu_column(self, row: int, gpu_index: int) -> int:
        """Column of the node's GPU with device index ``gpu_index`` (devices sorted by index)."""
        indices = sorted(g.index for g in self.states[row].gpus)
        return indices.index(gpu_index)

    def gpu_index(self, row: int, column: int) -> int:
        return sorted(g.index for g in self.states[row].gpus)[column]

    def check(self, row: int, a: Assignment) -> str | None:
        """Why ``a`` would over-commit the node, or None if it fits."""
        eps = 1e-9
        if self.cpu_alloc[row] + a.cpu > self.cpu_cap[row] + eps:
            return "Insufficient cpu"
        if self.mem_alloc[row] + a.memory > self.mem_cap[row] + eps:
            return "Insufficient memory"
        if a.ephemeral_storage and self.eph_alloc[row] + a.ephemeral_storage > self.eph_cap[row]:
            return "Insufficient ephemeral-storage"
        indices = sorted(g.index for g in self.states[row].gpus)
        for gpu in a.gpus:
            if gpu not in indices:
                return f"no GPU {gpu}"
            col = indices.index(gpu)
            if self.mig_gpu[row, col] or self.gpu_used[row, col]:
                return f"GPU {gpu} is not free"
        occ = {col: int(self.mig_occ[row, col]) for col in range(self._gcols)}
        comp = {col: int(self.mig_comp[row, col]) for col in range(self._gcols)}
        for mig in a.mig:
            if mig.gpu not in indices:
                return f"no GPU {mig.gpu}"
            col = indices.index(mig.gpu)
            spec = MIG_SPECS.get(mig.profile)
            if spec is None or not self.mig_gpu[row, col]:
                return f"GPU {mig.gpu} is not in MIG mode"
            if mig.start not in spec.starts:
                return f"{mig.profile} cannot start at slice {mig.start}"
            if occ[col] & spec.mask(mig.start) or comp[col] + spec.compute > 7:
                return f"MIG slices of GPU {mig.gpu} overlap"
            occ[col] |= spec.mask(mig.start)
            comp[col] += spec.compute
        used = int(self.dpu_used[row])
        for dpu in a.dpus:
            if not 0 <= dpu < self.dpu_count[row] or used & (1 << dpu):
                return f"DPU {dpu} is not free"
            used |= 1 << dpu
        return None

    def apply(
        self, row: int, a: Assignment, sign: int, *, sensitivity: float = 0.0, io: bool = False
    ) -> None:
        """Add (sign=+1) or remove (sign=-1) an assignment's resources on a row."""
        self.cpu_alloc[row] += sign * a.cpu
        self.mem_alloc[row] += sign * a.memory
        self.eph_alloc[row] += sign * a.ephemeral_storage
        if sign < 0:
            # Float sums drift; an empty node must read exactly zero.
            self.cpu_alloc[row] = max(0.0, float(self.cpu_alloc[row]))
            self.mem_alloc[row] = max(0.0, float(self.mem_alloc[row]))
            self.eph_alloc[row] = max(0.0, float(self.eph_alloc[row]))
        indices = sorted(g.index for g in self.states[row].gpus)
        for gpu in a.gpus:
            self.gpu_used[row, indices.index(gpu)] = sign > 0
        for mig in a.mig:
            col = indices.index(mig.gpu)
            spec = MIG_SPECS[mig.profile]
            if sign > 0:
                self.mig_occ[row, col] |= spec.mask(mig.start)
                self.mig_comp[row, col] += spec.compute
            else:
                self.mig_occ[row, col] &= ~spec.mask(mig.start)
                self.mig_comp[row, col] -= spec.compute
        for dpu in a.dpus:
            if sign > 0:
                self.dpu_used[row] |= 1 << dpu
            else:
                self.dpu_used[row] &= ~(1 << dpu)
        self.gpu_sevenths[row] += sign * (7 * len(a.gpus) + sum(MIG_SPECS[m.profile].compute for m in a.mig))
        self.sens_milli[row] += sign * round(sensitivity * 1000)
        self.replicas[row] += sign
        if io:
            self.io_count[row] += sign
        self.version += 1
        self.row_version[row] = self.version

    # -- derived views ---------------------------------------------------------------------

    def label_mask(self, key: str, value: str) -> BoolArray:
        """Nodes whose label ``key`` equals ``value`` (cached until the next node change)."""
        cache_key = (key, value)
        mask = self._label_cache.get(cache_key)
        if mask is None:
            mask = np.fromiter((s.labels.get(key) == value for s in self.states), dtype=bool, count=len(self))
            self._label_cache[cache_key] = mask
        return mask

    def names_mask(self, names: list[str]) -> BoolArray:
        mask = np.zeros(len(self), dtype=bool)
        for name in names:
            row = self.index.get(name)
            if row is not None:
                mask[row] = True
        return mask

    def ephemeral_storage_counted(self) -> bool:
        """True when some node reports its ephemeral storage (else the filter has nothing to do);
        kept with the node facts, so a cycle pays one dict lookup."""
        counted = self.static_cache.get("ephemeral_storage_counted")
        if counted is None:
            counted = self.static_cache["ephemeral_storage_counted"] = bool(np.isfinite(self.eph_cap).any())
        return bool(counted)

    def free_whole_gpus(self) -> IntArray:
        """Per node: GPUs that are not in MIG mode and not allocated."""
        free = self.has_gpu & ~self.mig_gpu & ~self.gpu_used
        return free.sum(axis=1).astype(np.int64)

    def dpu_free(self) -> IntArray:
        return self.dpu_count - np.bitwise_count(self.dpu_used).astype(np.int64)

    @property
    def sens_sum(self) -> FloatArray:
        """Per node: the summed contention sensitivity of its replicas."""
        result: FloatArray = self.sens_milli / 1000.0
        return result

    def gpu_compute_used(self, rows: IntArray | None = None) -> FloatArray:
        """Per node (or per given row): GPU compute in use, in whole GPUs (a MIG slice is 1/7)."""
        sevenths = self.gpu_sevenths if rows is None else self.gpu_sevenths[rows]
        result: FloatArray = sevenths / 7.0
        return result

    def row_dict(self, row: int) -> dict[str, Any]:
        return {
            "name": self.names[row],
            "ready": bool(self.ready[row]),
            "cpu": float(self.cpu_cap[row]),
            "cpu_allocated": float(self.cpu_alloc[row]),
            "memory": int(self.mem_cap[row]),
            "memory_allocated": int(self.mem_alloc[row]),
            "ephemeral_storage": int(self.eph_cap[row]) if np.isfinite(self.eph_cap[row]) else 0,
            "ephemeral_storage_allocated": int(self.eph_alloc[row]),
            "gpus_free": int(self.free_whole_gpus()[row]),
            "mig_occupancy": [
                f"{int(x):08b}" for x, m in zip(self.mig_occ[row], self.mig_gpu[row], strict=True) if m
            ],
            "dpus_used": int(self.dpu_used[row]).bit_count(),
            "replicas": int(self.replicas[row]),
        }
