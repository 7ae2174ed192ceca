"""Placement of workload replicas on nodes: the scheduling framework, its plugins and profiles.

The hub and the simulator use :class:`controlplane.scheduling.scheduler.Scheduler`; see
``docs/scheduling.md``. Modules: ``framework`` (extension points, Status, CycleState), ``model``
(NodeState, WorkloadRequest, Decision), ``nodetable``/``ledger`` (accounting), ``actions`` (action
space and masking), ``mig`` (A100 MIG geometry), ``reward``, ``power``, ``topology``, ``queue``,
``preemption``, ``profiles`` and ``plugins/``.
"""

__all__: list[str] = []
