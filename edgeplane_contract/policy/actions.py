"""The node-local action space: 64 resource-configuration bins plus decline/offload.

A bin is (CPU quota multiplier, memory quota multiplier, accelerator option), 4 x 4 x 4::

    bin = (cpu_index * 4 + memory_index) * 4 + accelerator_index        (0..63)
    DECLINE = 64                                                        (hand it back to the hub)

Accelerator options, relative to the offer's request:

* ``none``: no accelerator. Only for work that asked for none (GPU work cannot run without).
* ``as-requested``: the whole GPUs or the MIG instance the offer asked for. For CPU-only work
  this is the same as ``none`` and is masked as a duplicate.
* ``mig-smallest``: the smallest MIG instance whose memory holds the request's GPU memory
  (40 GB per whole A100). Masked when that is what was asked for, or when nothing fits.
* ``whole-gpu``: whole GPUs covering the request's GPU memory. Masked when that is what was
  asked for (a whole-GPU request) and for CPU-only work.

:func:`action_mask` removes bins that do not fit the node's free CPU, memory, whole GPUs or MIG
room, and the duplicate/inapplicable options above; decline is always allowed.

Quotas change how long the work runs (the reward's QoS term sees it through ``runtime_s``);
:func:`expected_runtime` is that model, shared by the trainer's environment and the runtime's
heuristic so both optimise the same thing:

* CPU below the request throttles the work's CPU-bound part (Amdahl, fraction ``p`` per kind);
  above it, only the kind's elastic part speeds up (``e`` per kind);
* memory below the true working set gets the replica OOM-killed and rerun: the working set is
  ``request x LogNormal(median 0.7, sigma 0.25)`` (requests are conservative), so the expected
  runtime is multiplied by ``1 + P(working set > quota)``;
* a smaller GPU share than requested slows GPU-bound work (``p = 0.9``); a larger one helps its
  elastic part (``e = 0.3``).

These are modelling assumptions of ours, written down once here; they are not measurements.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from edgeplane_contract.policy.features import KINDS, MIG_PROFILE_ORDER, NodeView, Offer

__all__ = [
    "ACCELERATORS",
    "ACTION_SPEC",
    "CPU_MULTIPLIERS",
    "DECLINE",
    "DECLINE_REWARD",
    "GPU_MEMORY_GB",
    "MEMORY_MULTIPLIERS",
    "N_ACTIONS",
    "N_BINS",
    "OOM_PROBABILITY",
    "accelerator_options",
    "action_mask",
    "apply_bin",
    "bin_index",
    "bin_parts",
    "expected_runtime",
    "mask_entry",
    "requested_bin",
    "select_actions",
    "select_from_logits",
]

CPU_MULTIPLIERS = (0.5, 0.75, 1.0, 1.5)
MEMORY_MULTIPLIERS = (0.75, 1.0, 1.25, 1.5)
ACCELERATORS = ("none", "as-requested", "mig-smallest", "whole-gpu")
N_BINS = len(CPU_MULTIPLIERS) * len(MEMORY_MULTIPLIERS) * len(ACCELERATORS)
DECLINE = N_BINS
N_ACTIONS = N_BINS + 1
# Reward of declining: the work goes back to the hub, which places it elsewhere; this node
# neither gains utilisation nor pays energy or QoS. Accepting must beat doing nothing.
DECLINE_REWARD = 0.0
GPU_MEMORY_GB = 40.0  # one A100-40GB

assert N_BINS == 64

_MIG_COMPUTE = {"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 3, "4g.20gb": 4, "7g.40gb": 7}
_MIG_MEMORY_GB = {"1g.5gb": 5, "2g.10gb": 10, "3g.20gb": 20, "4g.20gb": 20, "7g.40gb": 40}
# Smallest first: compute, then memory (3g.20gb before 4g.20gb).
_MIG_BY_SIZE = sorted(MIG_PROFILE_ORDER, key=lambda p: (_MIG_COMPUTE[p], _MIG_MEMORY_GB[p]))

# Runtime model parameters per kind: CPU-bound fraction p (throttling) and elastic fraction e.
_CPU_BOUND = {"service": 0.9, "function": 0.9, "batch": 0.95, "analytics": 0.8}
_CPU_ELASTIC = {"service": 0.3, "function": 0.2, "batch": 0.6, "analytics": 0.5}
_GPU_BOUND = 0.9
_GPU_ELASTIC = 0.3
_WS_MEDIAN = 0.7
_WS_SIGMA = 0.25


def _oom(multiplier: float) -> float:
    z = math.log(multiplier / _WS_MEDIAN) / _WS_SIGMA
    return 0.5 * math.erfc(z / math.sqrt(2.0))


OOM_PROBABILITY = tuple(_oom(m) for m in MEMORY_MULTIPLIERS)

ACTION_SPEC: dict[str, object] = {
    "n_bins": N_BINS,
    "decline_action": DECLINE,
    "decline_reward": DECLINE_REWARD,
    "order": "bin = (cpu_index * 4 + memory_index) * 4 + accelerator_index",
    "cpu_multipliers": list(CPU_MULTIPLIERS),
    "memory_multipliers": list(MEMORY_MULTIPLIERS),
    "accelerators": list(ACCELERATORS),
    "gpu_memory_gb": GPU_MEMORY_GB,
}

# One accelerator option resolved for an offer: (accelerator string, gpu units, whole GPUs,
# MIG profile or None); None when the option does not apply to the offer.
AcceleratorOption = tuple[str, float, int, str | None]


def bin_index(cpu_index: int, memory_index: int, accelerator_index: int) -> int:
    """The bin of (CPU multiplier, memory multiplier, accelerator option) indices."""
    return (cpu_index * 4 + memory_index) * 4 + accelerator_index


def requested_bin(offer: Offer) -> int:
    """The bin that runs ``offer`` exactly as requested: 1x CPU, 1x memory, and the requested
    accelerator (``as-requested`` for GPU/MIG work, ``none`` otherwise). The hub places replicas
    with their requested quotas, so this is the bin whose value it compares across nodes."""
    accelerator = 1 if (offer.gpu or offer.mig) else 0
    return bin_index(CPU_MULTIPLIERS.index(1.0), MEMORY_MULTIPLIERS.index(1.0), accelerator)


def bin_parts(bin_: int) -> tuple[int, int, int]:
    """(cpu_index, memory_index, accelerator_index) of a bin."""
    if not 0 <= bin_ < N_BINS:
        raise ValueError(f"bin {bin_} is not in 0..{N_BINS - 1}")
    return bin_ // 16, (bin_ // 4) % 4, bin_ % 4


def _gpu_memory_gb(offer: Offer) -> float:
    if offer.mig:
        return float(_MIG_MEMORY_GB[offer.mig])
    return offer.gpu * GPU_MEMORY_GB


def accelerator_options(offer: Offer) -> tuple[AcceleratorOption | None, ...]:
    """The four accelerator options resolved for this offer (None: not applicable)."""
    wants_gpu = offer.gpu > 0 or bool(offer.mig)
    if not wants_gpu:
        return (("none", 0.0, 0, None), None, None, None)
    if offer.mig:
        if offer.mig not in _MIG_COMPUTE:
            raise ValueError(f"unknown MIG profile {offer.mig!r}")
        requested: AcceleratorOption = (f"mig:{offer.mig}", _MIG_COMPUTE[offer.mig] / 7.0, 0, offer.mig)
    else:
        requested = (f"gpu:{offer.gpu}", float(offer.gpu), offer.gpu, None)
    need = _gpu_memory_gb(offer)
    smallest = next((p for p in _MIG_BY_SIZE if _MIG_MEMORY_GB[p] >= need), None)
    mig_option: AcceleratorOption | None = None
    if smallest is not None and smallest != offer.mig:
        mig_option = (f"mig:{smallest}", _MIG_COMPUTE[smallest] / 7.0, 0, smallest)
    whole_option: AcceleratorOption | None = None
    if not offer.gpu:
        n = max(1, math.ceil(need / GPU_MEMORY_GB))
        whole_option = (f"gpu:{n}", float(n), n, None)
    return (None, requested, mig_option, whole_option)


def _available(node: NodeView, option: AcceleratorOption | None) -> bool:
    if option is None:
        return False
    _, _, whole, profile = option
    if profile is not None:
        return node.mig_free[MIG_PROFILE_ORDER.index(profile)] >= 1
    return whole <= node.gpus_free


def _prefix_fits(multipliers: tuple[float, ...], request: float, free: float) -> int:
    # Multipliers ascend, so the quotas that fit are a prefix; count it.
    n = 0
    for m in multipliers:
        if m * request > free:
            break
        n += 1
    return n


def _build_tables() -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    # Every mask is determined by (how many CPU multipliers fit, how many memory multipliers
    # fit, which accelerator options are available): 5 x 5 x 16 cases, precomputed so the
    # per-decision cost is a few Python comparisons and one table lookup.
    masks = np.zeros((5, 5, 16, N_ACTIONS), dtype=np.bool_)
    for c in range(5):
        for m in range(5):
            for a in range(16):
                for b in range(N_BINS):
                    ci, mi, ai = b // 16, (b // 4) % 4, b % 4
                    masks[c, m, a, b] = ci < c and mi < m and bool(a >> ai & 1)
    masks[..., DECLINE] = True
    blocked = ~masks
    counts = blocked.sum(axis=-1).astype(np.int64)
    for table in (masks, blocked, counts):
        table.flags.writeable = False
    return masks, blocked, counts


_MASKS, _BLOCKED, _MASKED_COUNT = _build_tables()


def mask_entry(node: NodeView, offer: Offer) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], int]:
    """(allowed actions, blocked actions, number of blocked bins); read-only arrays of 65."""
    c = _prefix_fits(CPU_MULTIPLIERS, offer.cpu, node.cpu_capacity - node.cpu_allocated + 1e-9)
    m = _prefix_fits(MEMORY_MULTIPLIERS, offer.memory, node.memory_capacity - node.memory_allocated + 1e-6)
    a = 0
    for i, option in enumerate(accelerator_options(offer)):
        if _available(node, option):
            a |= 1 << i
    return _MASKS[c, m, a], _BLOCKED[c, m, a], int(_MASKED_COUNT[c, m, a])


def action_mask(node: NodeView, offer: Offer) -> npt.NDArray[np.bool_]:
    """Allowed actions (length :data:`N_ACTIONS`, read-only): bins that fit, and decline.

    A bin is allowed when its CPU and memory quotas fit the node's free CPU and memory (a tiny
    tolerance absorbs float rounding) and its accelerator option applies to the offer and is
    available (free whole GPUs, or room for the MIG profile). Decline is always allowed.
    """
    return mask_entry(node, offer)[0]


def apply_bin(offer: Offer, bin_: int) -> tuple[float, float, float, str]:
    """(cpu cores, memory bytes, gpu units, accelerator) of a bin for this offer.

    ``accelerator`` is ``"none"``, ``"gpu:<n>"`` (whole GPUs) or ``"mig:<profile>"``; gpu units
    count a MIG instance as compute/7. Raises ValueError for a bin whose accelerator option does
    not apply to the offer (those are always masked).
    """
    c, m, a = bin_parts(bin_)
    option = accelerator_options(offer)[a]
    if option is None:
        raise ValueError(f"accelerator option {ACCELERATORS[a]!r} does not apply to this offer")
    return (
        offer.cpu * CPU_MULTIPLIERS[c],
        offer.memory * MEMORY_MULTIPLIERS[m],
        option[1],
        option[0],
    )


def _speed(bound: float, elastic: float, share: float) -> float:
    """Runtime multiplier when given ``share`` times the requested amount of a resource."""
    if share < 1.0:
        return (1.0 - bound) + bound / share
    return 1.0 - elastic * (1.0 - 1.0 / share)


def expected_runtime(offer: Offer, bin_: int) -> float:
    """Expected runtime (s) of the offer under this bin's quotas (see the module docstring)."""
    c, m, a = bin_parts(bin_)
    option = accelerator_options(offer)[a]
    if option is None:
        raise ValueError(f"accelerator option {ACCELERATORS[a]!r} does not apply to this offer")
    kind = offer.kind if offer.kind in KINDS else "service"
    factor = _speed(_CPU_BOUND[kind], _CPU_ELASTIC[kind], CPU_MULTIPLIERS[c])
    factor *= 1.0 + OOM_PROBABILITY[m]
    requested_units = offer.gpu + (_MIG_COMPUTE[offer.mig] / 7.0 if offer.mig else 0.0)
    if requested_units > 0 and option[1] > 0:
        factor *= _speed(_GPU_BOUND, _GPU_ELASTIC, option[1] / requested_units)
    return offer.expected_runtime_s * factor


def select_actions(values: npt.NDArray[np.floating], mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """The decision rule for a batch: best allowed bin by value, decline unless it beats declining.

    ``values`` has shape (N, 64) (model outputs or exact rewards), ``mask`` (N, 65). Ties go to
    the lower bin, as in :meth:`edgeplane_contract.policy.runtime.LocalPolicy.decide`.
    """
    masked = np.where(mask[:, :N_BINS], values, -np.inf)
    best = np.argmax(masked, axis=1)
    ok = masked[np.arange(masked.shape[0]), best] > DECLINE_REWARD
    result: npt.NDArray[np.int64] = np.where(ok, best, DECLINE).astype(np.int64)
    return result


def select_from_logits(
    logits: npt.NDArray[np.floating], mask: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64]:
    """The learned policy's rule for a batch: the allowed action (of 65) with the largest logit."""
    result: npt.NDArray[np.int64] = np.argmax(np.where(mask, logits, -np.inf), axis=1).astype(np.int64)
    return result
