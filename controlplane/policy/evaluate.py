"""Compare the learned policy with the reward-argmax heuristic and simple baselines.

All policies decide the same held-out states (seeds from
:data:`~controlplane.policy.env.EVAL_SEED_BASE`, never used in training) and are scored with the
exact reward of the action they pick (decline: ``DECLINE_REWARD``):

* ``heuristic``: the exhaustive reward argmax (the teacher; the fallback scorer at runtime);
* ``as-requested``: the requested quotas whenever they fit, decline otherwise;
* ``as-requested-if-positive``: the same, but decline when that bin's reward is not positive;
* ``random``: a uniformly random allowed bin;
* ``decline``: always hand the work back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from edgeplane_contract.policy.actions import (
    DECLINE,
    DECLINE_REWARD,
    N_BINS,
    bin_index,
    select_actions,
    select_from_logits,
)
from edgeplane_contract.policy.features import FEATURE_NAMES

from controlplane.policy.samples import Samples
from controlplane.policy.train import mean_reward, split_heads

__all__ = ["SLICES", "baseline_actions", "evaluate_policies", "format_table"]

_COL = {name: i for i, name in enumerate(FEATURE_NAMES)}


def _column(samples: Samples, name: str) -> npt.NDArray[np.float32]:
    result: npt.NDArray[np.float32] = samples.x[:, _COL[name]]
    return result


def _as_requested(samples: Samples) -> npt.NDArray[np.int64]:
    wants_gpu = (_column(samples, "offer.gpu") > 0) | (_column(samples, "offer.mig_compute") > 0)
    bins = np.where(wants_gpu, bin_index(2, 1, 1), bin_index(2, 1, 0))
    return bins.astype(np.int64)


def baseline_actions(
    samples: Samples, name: str, rewards: npt.NDArray[np.float64], seed: int = 0
) -> npt.NDArray[np.int64]:
    """Actions of a named baseline policy (see the module docstring)."""
    rows = np.arange(len(samples))
    if name == "heuristic":
        return select_actions(rewards[:, :N_BINS], samples.mask)
    if name == "decline":
        return np.full(len(samples), DECLINE, dtype=np.int64)
    if name in ("as-requested", "as-requested-if-positive"):
        bins = _as_requested(samples)
        ok = samples.mask[rows, bins]
        if name == "as-requested-if-positive":
            ok &= rewards[rows, bins] > DECLINE_REWARD
        return np.where(ok, bins, DECLINE).astype(np.int64)
    if name == "random":
        rng = np.random.default_rng(seed)
        noise = np.where(samples.mask[:, :N_BINS], rng.random((len(samples), N_BINS)), -1.0)
        best = noise.argmax(axis=1)
        return np.where(noise[rows, best] >= 0, best, DECLINE).astype(np.int64)
    raise ValueError(f"unknown baseline {name!r}")


SLICES: dict[str, str] = {
    "all": "every held-out decision",
    "mains": "node on mains power",
    "battery": "node on battery",
    "battery<40%": "node on battery below 40% charge",
    "edge": "edge boxes",
    "gpu-offer": "offers asking for whole GPUs or MIG",
}


def _slice(samples: Samples, name: str) -> npt.NDArray[np.bool_]:
    on_battery = _column(samples, "node.on_battery") > 0.5
    if name == "all":
        return np.ones(len(samples), dtype=np.bool_)
    if name == "mains":
        return ~on_battery
    if name == "battery":
        return on_battery
    if name == "battery<40%":
        return on_battery & (_column(samples, "node.battery_level") < 0.4)
    if name == "edge":
        return _column(samples, "node.type.edge") > 0.5
    if name == "gpu-offer":
        return (_column(samples, "offer.gpu") > 0) | (_column(samples, "offer.mig_compute") > 0)
    raise ValueError(name)


def evaluate_policies(
    samples: Samples, learned: dict[str, npt.NDArray[np.float32]], *, seed: int = 0
) -> dict[str, Any]:
    """Mean reward, accept rate and agreement with the heuristic per policy and slice.

    ``learned`` maps a name to that model's outputs ``q | logits`` (N, 129) on ``samples.x``.
    """
    rewards = samples.rewards()
    actions: dict[str, npt.NDArray[np.int64]] = {
        name: select_from_logits(split_heads(head)[1], samples.mask) for name, head in learned.items()
    }
    for name in ("heuristic", "as-requested", "as-requested-if-positive", "random", "decline"):
        actions[name] = baseline_actions(samples, name, rewards, seed)
    teacher = actions["heuristic"]
    out: dict[str, Any] = {"n_decisions": len(samples), "slices": {}}
    for slice_name in SLICES:
        sel = _slice(samples, slice_name)
        if not sel.any():
            continue
        table = {}
        teacher_mean = mean_reward(rewards[sel], teacher[sel])
        for name, act in actions.items():
            mean = mean_reward(rewards[sel], act[sel])
            table[name] = {
                "mean_reward": mean,
                "share_of_heuristic": mean / teacher_mean if teacher_mean > 0 else None,
                "accept_rate": float((act[sel] != DECLINE).mean()),
                "agreement_with_heuristic": float((act[sel] == teacher[sel]).mean()),
            }
        out["slices"][slice_name] = {"n": int(sel.sum()), "policies": table}
    # How well a learned score predicts the exact reward of the bin it chose (what the hub
    # compares across nodes), over decisions that accept.
    out["score_error"] = {}
    for name, head in learned.items():
        q = split_heads(head)[0]
        act = actions[name]
        accepted = act != DECLINE
        if accepted.any():
            rows = np.flatnonzero(accepted)
            err = q[rows, act[rows]] - rewards[rows, act[rows]]
            out["score_error"][name] = {
                "mean_abs": float(np.abs(err).mean()),
                "p90_abs": float(np.percentile(np.abs(err), 90)),
                "bias": float(err.mean()),
            }
    return out


def format_table(result: dict[str, Any]) -> str:
    """Plain-text table of :func:`evaluate_policies`' result."""
    lines = []
    for slice_name, body in result["slices"].items():
        lines.append(f"[{slice_name}] n={body['n']}")
        lines.append(f"  {'policy':<28} {'mean R':>9} {'% heur.':>8} {'accept':>7} {'= heur.':>8}")
        for name, row in body["policies"].items():
            share = row["share_of_heuristic"]
            share_text = f"{100 * share:7.1f}%" if share is not None else "      -"
            lines.append(
                f"  {name:<28} {row['mean_reward']:9.4f} {share_text:>8} "
                f"{100 * row['accept_rate']:6.1f}% {100 * row['agreement_with_heuristic']:7.1f}%"
            )
    for name, err in result.get("score_error", {}).items():
        lines.append(
            f"score error of {name} (accepted decisions): mean |q - R| {err['mean_abs']:.4f}, "
            f"p90 {err['p90_abs']:.4f}, bias {err['bias']:+.4f}"
        )
    return "\n".join(lines)
