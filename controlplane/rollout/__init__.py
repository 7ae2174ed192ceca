"""Rolling a new placement policy out safely: a canary group, an anomaly score against the
production group, and a controller that steps the canary up, promotes it or rolls it back.

* :mod:`.anomaly`: the anomaly score of the source (a sliding window of 300 samples, baseline =
  the window's 95th percentile, score = max(0, (current - baseline) / baseline)).
* :mod:`.controller`: :class:`CanaryController`, the state machine (steps, dwell, sustain,
  promote, roll back) with its timeline of events; pure, clocked by its caller.
* :mod:`.canary`: :class:`CanaryChooser`, a scheduler chooser that sends a stable share of the
  workloads to the canary policy and the rest to the profile's own pick, and feeds each
  workload's outcome to the controller under its group.

* :mod:`.live`: :class:`LiveRollout`, what the hub's live canaries share (the clock, the
  controller and outcome guard, acting on each decision, resuming from the store).

The simulator runs it (``controlplane simulate --canary-model``), and the live hub for policy
versions and scheduling profiles (``controlplane/policies/``, docs/policy.md).
"""

from controlplane.rollout.anomaly import AnomalyWindow
from controlplane.rollout.canary import CanaryChooser, latency_vs_sla
from controlplane.rollout.controller import CanaryController, RolloutConfig, RolloutEvent

__all__ = [
    "AnomalyWindow",
    "CanaryChooser",
    "CanaryController",
    "RolloutConfig",
    "RolloutEvent",
    "latency_vs_sla",
]
