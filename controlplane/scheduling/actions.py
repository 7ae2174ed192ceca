"""The action space and its mask.

An action places one replica: (node, CPU quota bin, memory quota bin, accelerator assignment),
where the accelerator assignment is a set of whole GPUs, MIG instances (GPU, profile, start
slice) or DPUs. :meth:`ActionSpace.analyse` counts, per node, how many actions exist and how many
are feasible now (capacity, MIG placement rules, free devices), without enumerating them; the
difference is what the mask removes. :meth:`ActionSpace.candidates` then reduces each feasible
node to one action, choosing the accelerator by the profile's policy:

* ``first_fit``: lowest free GPU / lowest legal MIG start (what a device plugin does);
* ``best_fit``: the MIG start that loses the least fragmentation value (see :mod:`.mig`).

Scores rank those per-node actions, so scoring costs O(nodes), not O(actions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from edgeplane_contract.arrays import BoolArray, FloatArray, IntArray
from edgeplane_contract.mig import COMPUTE_SLICES, MIG_SPECS, VALUE_TABLE
from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.model import Assignment, MigSlice
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.types import Code, Rejection

__all__ = [
    "ACCELERATOR_POLICIES",
    "RESOURCE_FIT",
    "ActionSpace",
    "ActionSpaceConfig",
    "Candidates",
    "NodeActions",
    "mig_slots_free",
]

ACCELERATOR_POLICIES = ("first_fit", "best_fit")
# What explanations call the resource part of the mask (the name of the plugin that reports it).
RESOURCE_FIT = "NodeResourcesFit"
_EMPTY_GPU_VALUE = float(VALUE_TABLE[0, 0])
# comb(n, k) for device counts up to 64 (the request limit), so counting is a table lookup.
_COMB = np.array([[math.comb(n, k) for k in range(65)] for n in range(65)], dtype=np.int64)


def _comb(counts: IntArray, k: int) -> IntArray:
    result: IntArray = _COMB[np.clip(counts, 0, 64), k]
    return result


@dataclass(frozen=True, slots=True)
class ActionSpaceConfig:
    """Quota bins (multiples of the request) and the accelerator choice policy."""

    cpu_bins: tuple[float, ...] = (1.0,)
    memory_bins: tuple[float, ...] = (1.0,)
    accelerator_policy: str = "first_fit"

    def __post_init__(self) -> None:
        if self.accelerator_policy not in ACCELERATOR_POLICIES:
            raise ValueError(f"accelerator_policy must be one of {ACCELERATOR_POLICIES}")
        if not self.cpu_bins or not self.memory_bins or min(self.cpu_bins + self.memory_bins) <= 0:
            raise ValueError("quota bins must be non-empty and positive")


@dataclass(slots=True)
class NodeActions:
    """Per-node action counts for one replica, and why nodes have none."""

    total: IntArray
    feasible: IntArray
    rejections: list[Rejection]
    # Per node: the smallest feasible CPU / memory bin multiplier (nan where none).
    cpu_bin: FloatArray
    memory_bin: FloatArray
    mig_ok: BoolArray | None = None


@dataclass(slots=True)
class Candidates:
    """One action per feasible node, aligned arrays. ``rows`` index the node table."""

    rows: IntArray
    cpu: FloatArray
    memory: FloatArray
    gpu_units: FloatArray
    frag_loss: FloatArray
    gpu_cols: list[tuple[int, ...]] = field(default_factory=list)
    mig: list[tuple[tuple[int, str, int], ...]] = field(default_factory=list)
    dpus: int = 0
    ephemeral_storage: int = 0  # the request, the same on every node

    def __len__(self) -> int:
        return len(self.rows)

    def assignment(self, k: int, table: NodeTable) -> Assignment:
        """The concrete assignment of candidate ``k`` (device indices, MIG slices, DPUs)."""
        row = int(self.rows[k])
        gpus = tuple(table.gpu_index(row, col) for col in self.gpu_cols[k]) if self.gpu_cols else ()
        mig = (
            tuple(MigSlice(table.gpu_index(row, col), profile, start) for col, profile, start in self.mig[k])
            if self.mig
            else ()
        )
        dpus: tuple[int, ...] = ()
        if self.dpus:
            used = int(table.dpu_used[row])
            free = [d for d in range(int(table.dpu_count[row])) if not used & (1 << d)]
            dpus = tuple(free[: self.dpus])
        return Assignment(
            cpu=float(self.cpu[k]),
            memory=int(self.memory[k]),
            gpus=gpus,
            mig=mig,
            dpus=dpus,
            ephemeral_storage=self.ephemeral_storage,
        )


# Request shapes whose static mask parts are kept at once (a fleet sees a handful of shapes).
_SHAPES_CACHED = 256


def _frozen(values: np.ndarray) -> np.ndarray:
    """``values`` made read-only: cached masks are shared by every cycle of that shape."""
    values.flags.writeable = False
    return values


@dataclass(frozen=True, slots=True)
class _StaticActions:
    """The parts of one request shape's mask that only node facts decide (see ``_static``)."""

    total: IntArray
    cpu_never: BoolArray
    mem_never: BoolArray
    gpu_never: BoolArray | None
    mig_never: BoolArray | None
    mig_rows: IntArray | None
    dpu_never: BoolArray | None
    eph_never: BoolArray | None  # None: no node reports ephemeral storage


def mig_slots_free(mig_gpu: BoolArray, profile: str, occ: IntArray, comp: IntArray) -> BoolArray:
    """(rows, gpus, starts): where an instance of ``profile`` could be created now."""
    return _mig_ok(mig_gpu, profile, occ, comp)


def _mig_ok(mig_gpu: BoolArray, profile: str, occ: IntArray, comp: IntArray) -> BoolArray:
    spec = MIG_SPECS[profile]
    masks = np.array([spec.mask(s) for s in spec.starts], dtype=np.int64)
    free = (occ[:, :, None] & masks) == 0
    room = (comp + spec.compute <= COMPUTE_SLICES)[:, :, None]
    result: BoolArray = mig_gpu[:, :, None] & free & room
    return result


def _mig_choose(
    profile: str, ok: BoolArray, occ: IntArray, comp: IntArray, policy: str
) -> tuple[IntArray, IntArray, FloatArray]:
    """Per row of ``ok`` (rows, gpus, starts): chosen GPU column, start and value lost."""
    spec = MIG_SPECS[profile]
    starts = np.array(spec.starts, dtype=np.int64)
    masks = np.array([spec.mask(s) for s in spec.starts], dtype=np.int64)
    n, g, s = ok.shape
    after_occ = occ[:, :, None] | masks
    after_comp = np.minimum(comp + spec.compute, COMPUTE_SLICES)[:, :, None]
    loss = (
        VALUE_TABLE[occ, comp][:, :, None]
        - VALUE_TABLE[after_occ, np.broadcast_to(after_comp, after_occ.shape)]
    )
    if policy == "best_fit":
        ranked = np.where(ok, loss, np.inf).reshape(n, g * s)
        flat = ranked.argmin(axis=1)
    else:
        flat = ok.reshape(n, g * s).argmax(axis=1)
    cols = flat // s
    picked = starts[flat % s]
    lost = loss.reshape(n, g * s)[np.arange(n), flat] / _EMPTY_GPU_VALUE
    return cols.astype(np.int64), picked, lost


class ActionSpace:
    """Counts, masks and reduces the actions of one replica over the node table."""

    def __init__(self, config: ActionSpaceConfig | None = None) -> None:
        self.config = config or ActionSpaceConfig()
        # The quota bins in ascending order, once (every cycle compares against them).
        self._cpu_bins = np.array(sorted(self.config.cpu_bins))
        self._mem_bins = np.array(sorted(self.config.memory_bins))

    def _static(self, table: NodeTable, res: ResourceRequest) -> _StaticActions:
        """What of the mask depends on node facts alone, not on allocations: cached per request
        shape in the table's ``static_cache`` (cleared when a node is added, changed or removed),
        so a cycle recomputes only what the last placements changed."""
        shapes: dict[tuple[object, ...], _StaticActions] = table.static_cache.setdefault("actions", {})
        # The bins are in the key: profiles with other action spaces share one node table (a
        # profile canary's candidate, the function router's filters).
        cfg = self.config
        request = (res.cpu, res.memory, res.gpu, tuple(res.mig), res.dpu, res.ephemeral_storage)
        key = (cfg.cpu_bins, cfg.memory_bins, *request)
        hit = shapes.get(key)
        if hit is not None:
            return hit
        if len(shapes) >= _SHAPES_CACHED:
            shapes.clear()  # a bounded cache: many shapes at once only cost the recomputation
        n = len(table)
        eps = 1e-9
        first_cpu, first_mem = self._cpu_bins[0], self._mem_bins[0]
        never = [
            _frozen(res.cpu * first_cpu > table.cpu_cap + eps),
            _frozen(res.memory * first_mem > table.mem_cap + eps),
        ]
        acc_total = np.ones(n, dtype=np.int64)
        gpu_never = mig_never = dpu_never = None
        mig_gpus = None
        if res.gpu:
            capacity = (table.has_gpu & ~table.mig_gpu).sum(axis=1)
            acc_total *= _comb(capacity, res.gpu)
            gpu_never = _frozen(capacity < res.gpu)
        if res.mig:
            mig_gpus = table.mig_gpu.sum(axis=1)
            mig_never = _frozen(mig_gpus == 0)
            if len(res.mig) == 1:
                acc_total *= mig_gpus * len(MIG_SPECS[res.mig[0]].starts)
            else:
                acc_total *= (mig_gpus > 0).astype(np.int64)
        if res.dpu:
            acc_total *= _comb(table.dpu_count, res.dpu)
            dpu_never = _frozen(table.dpu_count < res.dpu)
        eph_never = None
        if res.ephemeral_storage and table.ephemeral_storage_counted():
            eph_never = _frozen(res.ephemeral_storage > table.eph_cap)
        total = _frozen(
            (len(cfg.cpu_bins) * len(cfg.memory_bins) * np.maximum(acc_total, 1)).astype(np.int64)
        )
        hit = shapes[key] = _StaticActions(
            total=total,
            cpu_never=never[0],
            mem_never=never[1],
            gpu_never=gpu_never,
            mig_never=mig_never,
            mig_rows=None if mig_gpus is None else _frozen(np.flatnonzero(mig_gpus > 0)),
            dpu_never=dpu_never,
            eph_never=eph_never,
        )
        return hit

    def analyse(self, table: NodeTable, res: ResourceRequest) -> NodeActions:
        """Per node: actions in total, actions feasible now, and resource rejections."""
        n = len(table)
        static = self._static(table, res)
        rejections: list[Rejection] = []
        cpu_bins, mem_bins = self._cpu_bins, self._mem_bins
        cpu_free = table.cpu_cap - table.cpu_alloc
        mem_free = table.mem_cap - table.mem_alloc
        eps = 1e-9
        if len(cpu_bins) == 1 and len(mem_bins) == 1:
            # The common case (quota = request): one comparison per resource.
            cpu_ok = res.cpu * cpu_bins[0] <= cpu_free + eps
            mem_ok = res.memory * mem_bins[0] <= mem_free + eps
            n_cpu = cpu_ok.astype(np.int64)
            n_mem = mem_ok.astype(np.int64)
            cpu_bin = np.where(cpu_ok, cpu_bins[0], np.nan)
            mem_bin = np.where(mem_ok, mem_bins[0], np.nan)
        else:
            cpu_fit = (res.cpu * cpu_bins[None, :]) <= cpu_free[:, None] + eps
            mem_fit = (res.memory * mem_bins[None, :]) <= mem_free[:, None] + eps
            n_cpu = cpu_fit.sum(axis=1)
            n_mem = mem_fit.sum(axis=1)
            cpu_bin = np.where(n_cpu > 0, cpu_bins[np.argmax(cpu_fit, axis=1)], np.nan)
            mem_bin = np.where(n_mem > 0, mem_bins[np.argmax(mem_fit, axis=1)], np.nan)
        rejections.append(
            Rejection(static.cpu_never, "node has too little cpu", Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        )
        rejections.append(
            Rejection(static.mem_never, "node has too little memory", Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        )
        rejections.append(Rejection(n_cpu == 0, "Insufficient cpu"))
        rejections.append(Rejection(n_mem == 0, "Insufficient memory"))
        feasible = n_cpu * n_mem
        mig_ok: BoolArray | None = None
        if static.gpu_never is not None:
            free = table.free_whole_gpus()
            feasible *= _comb(free, res.gpu)
            rejections.append(
                Rejection(static.gpu_never, "node has too few GPUs", Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            )
            rejections.append(Rejection(free < res.gpu, "Insufficient nvidia.com/gpu"))
        if static.mig_never is not None and static.mig_rows is not None:
            rejections.append(
                Rejection(
                    static.mig_never, "node has no MIG-enabled GPU", Code.UNSCHEDULABLE_AND_UNRESOLVABLE
                )
            )
            # Only nodes with a MIG-enabled GPU can hold an instance: the layouts are worked out
            # for those rows alone (a tenth of the fleet in seed-200), the rest stay infeasible.
            mig_rows = static.mig_rows
            if len(res.mig) == 1:
                profile = res.mig[0]
                mig_ok = np.zeros((n, table.mig_gpu.shape[1], len(MIG_SPECS[profile].starts)), dtype=bool)
                mig_ok[mig_rows] = _mig_ok(
                    table.mig_gpu[mig_rows], profile, table.mig_occ[mig_rows], table.mig_comp[mig_rows]
                )
                feasible_mig = mig_ok.sum(axis=(1, 2))
                feasible *= feasible_mig
                rejections.append(Rejection(feasible_mig == 0, f"Insufficient nvidia.com/mig-{profile}"))
            else:
                # Several instances: one greedy layout per node stands for the node's options.
                ok = np.zeros(n, dtype=bool)
                plans = self._mig_plan(table, mig_rows, list(res.mig))
                ok[mig_rows] = [plan is not None for plan in plans[0]]
                feasible *= ok
                rejections.append(Rejection(~ok, "Insufficient nvidia.com/mig (no layout for all instances)"))
        if static.dpu_never is not None:
            dpu_free = table.dpu_free()
            feasible *= _comb(dpu_free, res.dpu)
            rejections.append(
                Rejection(static.dpu_never, "node has too few DPUs", Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            )
            rejections.append(Rejection(dpu_free < res.dpu, "Insufficient edgeplane.io/dpu"))
        if static.eph_never is not None:
            # Only where some node reports it (the live hub's agents do; the simulator's do not).
            eph_ok = res.ephemeral_storage <= table.eph_cap - table.eph_alloc
            feasible *= eph_ok
            rejections.append(
                Rejection(
                    static.eph_never,
                    "node has too little ephemeral storage",
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                )
            )
            rejections.append(Rejection(~eph_ok, "Insufficient ephemeral-storage"))
        return NodeActions(
            total=static.total,
            feasible=feasible.astype(np.int64),
            rejections=rejections,
            cpu_bin=cpu_bin,
            memory_bin=mem_bin,
            mig_ok=mig_ok,
        )

    def _mig_plan(
        self, table: NodeTable, rows: IntArray, profiles: list[str]
    ) -> tuple[list[tuple[tuple[int, str, int], ...] | None], FloatArray]:
        """Greedy layout of several MIG instances per node, largest first, by the policy."""
        occ = table.mig_occ[rows].copy()
        comp = table.mig_comp[rows].copy()
        alive = np.ones(len(rows), dtype=bool)
        loss = np.zeros(len(rows))
        chosen: list[list[tuple[int, str, int]]] = [[] for _ in rows]
        mig_gpu = table.mig_gpu[rows]
        for profile in sorted(profiles, key=lambda p: (-MIG_SPECS[p].compute, p)):
            spec = MIG_SPECS[profile]
            ok = _mig_ok(mig_gpu, profile, occ, comp)
            has = ok.any(axis=(1, 2))
            alive &= has
            cols, starts, lost = _mig_choose(profile, ok, occ, comp, self.config.accelerator_policy)
            for k in np.flatnonzero(alive):
                chosen[k].append((int(cols[k]), profile, int(starts[k])))
                occ[k, cols[k]] |= spec.mask(int(starts[k]))
                comp[k, cols[k]] += spec.compute
            loss += np.where(alive, lost, 0.0)
        plans = [tuple(c) if alive[k] else None for k, c in enumerate(chosen)]
        return plans, loss

    def candidates(
        self, table: NodeTable, res: ResourceRequest, actions: NodeActions, rows: IntArray
    ) -> Candidates:
        """One action per node in ``rows`` (which must all be feasible)."""
        n = len(rows)
        cpu = res.cpu * actions.cpu_bin[rows]
        memory = np.floor(res.memory * actions.memory_bin[rows])
        gpu_units = np.zeros(n)
        frag = np.zeros(n)
        cand = Candidates(
            rows=rows,
            cpu=cpu,
            memory=memory,
            gpu_units=gpu_units,
            frag_loss=frag,
            dpus=res.dpu,
            ephemeral_storage=res.ephemeral_storage,
        )
        if res.gpu:
            free = table.has_gpu[rows] & ~table.mig_gpu[rows] & ~table.gpu_used[rows]
            cand.gpu_cols = [tuple(int(c) for c in np.flatnonzero(f)[: res.gpu]) for f in free]
            gpu_units += res.gpu
            # Whole-GPU fragmentation: a node keeps value f(f+1)/2 for f free GPUs (it can host
            # a 1-, 2-, ... f-GPU job); the loss of taking k of them, per GPU of the node.
            f = free.sum(axis=1).astype(np.float64)
            left = f - res.gpu
            size = np.maximum(table.gpu_count[rows], 1)
            frag += (f * (f + 1) - left * (left + 1)) / 2.0 / (size * (size + 1) / 2.0)
        if res.mig:
            if len(res.mig) == 1 and actions.mig_ok is not None:
                profile = res.mig[0]
                occ = table.mig_occ[rows]
                comp = table.mig_comp[rows]
                cols, starts, lost = _mig_choose(
                    profile, actions.mig_ok[rows], occ, comp, self.config.accelerator_policy
                )
                cand.mig = [((int(c), profile, int(s)),) for c, s in zip(cols, starts, strict=True)]
                frag += lost
            else:
                plans, lost = self._mig_plan(table, rows, list(res.mig))
                cand.mig = [plan or () for plan in plans]
                frag += lost
            gpu_units += sum(MIG_SPECS[p].compute for p in res.mig) / COMPUTE_SLICES
        return cand
