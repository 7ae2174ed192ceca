"""Placement of workload replicas on nodes: the scheduling framework, its plugins and profiles.

The hub and the simulator use :class:`controlplane.scheduling.scheduler.Scheduler`; see
``docs/scheduling.md``. Modules: ``framework`` (extension points, CycleState), ``types`` (Status,
Code, Rejection), ``model`` (NodeState, WorkloadRequest, Decision), ``nodetable``/``ledger``
(accounting), ``actions`` (action space and masking), ``topology``, ``queue``, ``preemption``,
``explain``/``explanation`` (typed explanations), ``profiles`` and ``plugins/``. The MIG
geometry, the reward and the power model are the contract's (``edgeplane_contract.mig``,
``.objective``, ``.power``): the agent uses them too.
"""

__all__: list[str] = []
