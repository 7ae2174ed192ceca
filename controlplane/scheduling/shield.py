"""The SLA shield over a learned policy's choices: action masking by the hub's own QoS estimate.

A learned local policy (the agents' int8 model) bids on nodes from what each node sees of itself;
it does not know the interference and the SLA-miss risk the hub learns from the fleet's outcomes
(``interference.py``, ``sla_risk.py``). Lowering its bids by the risk's cost was not enough for it
to stop losing to the heuristic on SLA (docs/bench-policy.md). The shield is the constraint form of
the same knowledge, as safe reinforcement learning uses one: among the nodes that accept, those
whose QoS term (the reward's ``R_qos``: the predicted slowdown against the SLA, the neighbours'
and the learned miss risk) is more than ``margin`` below the best accepting node's are masked
out, and the policy chooses among the rest. The best node is never masked, so a decision always
remains; the heuristic's own choice is not imposed, only a floor on QoS. One pure function, used
by the simulator's bid plugin (``plugins/local_policy_bid.py``) and the live bid round
(``hub/bidding.py``), so both decide alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command line reads the default margin: no numpy at its import
    from controlplane.scheduling.framework import BoolArray, FloatArray

__all__ = ["DEFAULT_BID_SHIELD_MARGIN", "unsafe", "unsafe_of"]

# The live bid round's margin unless the hub is told otherwise (``--bid-shield-margin``), and the
# ``edgeplane-learned`` profile's: chosen among 0, 0.02, 0.1 and 0.3 on the tuning seeds 301-303
# only (docs/bench-policy.md). 0: only the nodes with the best QoS estimate (ties) stay; the
# policy's bids choose among them and decide whenever the estimates do not differ.
DEFAULT_BID_SHIELD_MARGIN = 0.0


def unsafe(qos: FloatArray, eligible: BoolArray, margin: float) -> BoolArray:
    """The eligible candidates whose ``qos`` is more than ``margin`` below the best eligible one's
    (all False when none is eligible)."""
    import numpy as np

    if not eligible.any():
        return np.zeros_like(eligible)
    best = float(qos[eligible].max())
    out: BoolArray = eligible & (qos < best - margin)
    return out


def unsafe_of(qos: Sequence[float | None], eligible: Sequence[bool], margin: float) -> list[bool]:
    """:func:`unsafe` over plain sequences; a candidate without a QoS estimate is never masked and
    does not set the best."""
    import numpy as np

    known = [q is not None and e for q, e in zip(qos, eligible, strict=True)]
    values = np.array([q if q is not None else 0.0 for q in qos], dtype=np.float64)
    return unsafe(values, np.array(known, dtype=bool), margin).tolist()
