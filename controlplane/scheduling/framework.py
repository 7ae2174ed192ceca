"""The scheduling framework: extension points, ``Status`` codes and per-cycle state.

Modelled on the Kubernetes scheduler framework (``pkg/scheduler/framework/interface.go``), with
one difference that matters in Python: Filter and Score run over *all candidate nodes at once*
(numpy arrays over the node table) instead of once per node, which is what keeps a decision at
1,000 nodes in the low milliseconds.

A scheduling cycle for one replica runs::

    PreFilter -> Filter (masks) -> [PostFilter: preemption, when nothing fits]
              -> accelerator choice per node -> Score (+ normalise, x weight) -> select
              -> Reserve -> Bind                    (Unreserve on any later failure)

Expected outcomes are :class:`Status` values, never exceptions; per-cycle data lives in
:class:`CycleState`, never on plugin instances.

``Code``, ``Status`` and ``Rejection`` are defined in the leaf module :mod:`.types`, the array
aliases and ``clip`` in :mod:`edgeplane_contract.arrays` (the modules this one names in its
interfaces use them without importing it); plugins get all of them from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from edgeplane_contract.arrays import BoolArray, FloatArray, IntArray, clip

from controlplane.scheduling.types import Code, Rejection, Status

if TYPE_CHECKING:
    from edgeplane_contract.objective import RewardConfig
    from edgeplane_contract.power import PowerModel

    from controlplane.scheduling.actions import Candidates
    from controlplane.scheduling.explanation import CandidateExtras
    from controlplane.scheduling.ledger import Ledger
    from controlplane.scheduling.model import Assignment, Migration, Victim, WorkloadRequest
    from controlplane.scheduling.nodetable import NodeTable
    from controlplane.scheduling.topology import TopologyGraph

__all__ = [
    "MAX_NODE_SCORE",
    "STATE_ACTIONS",
    "STATE_EXCLUDED",
    "STATE_NOW",
    "STATE_REPLICA",
    "BindPlugin",
    "BoolArray",
    "CandidateExplainer",
    "Code",
    "CycleState",
    "EnergyRuled",
    "FilterPlugin",
    "FloatArray",
    "Handle",
    "IntArray",
    "Plugin",
    "PluginFactory",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreFilterPlugin",
    "Rejection",
    "ReservePlugin",
    "ResourceFitFilter",
    "RewardScorer",
    "ScoreNormalizer",
    "ScorePlugin",
    "Status",
    "clip",
]

MAX_NODE_SCORE = 100.0

# CycleState keys the core writes for plugins.
STATE_ACTIONS = "core/actions"  # NodeActions of this replica
STATE_NOW = "core/now"  # the scheduler clock, seconds
STATE_REPLICA = "core/replica"  # replica index being placed
# A key a score plugin may write: a bool array over the candidates it scored; True means the node
# must not be chosen (a local policy declined the work). Ignored when it excludes every candidate.
STATE_EXCLUDED = "core/excluded"


class CycleState:
    """Data one scheduling cycle shares between its plugins, keyed by string."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """The value under ``key``; KeyError if a plugin expected it and it is missing."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self._data


@dataclass(slots=True)
class PostFilterResult:
    """What a post-filter found: a node, and the victims to evict or replicas to move there."""

    status: Status
    node: int | None = None
    victims: list[Victim] = field(default_factory=list)
    migrations: list[Migration] = field(default_factory=list)


class Handle(Protocol):
    """What plugins may read: the node table, the ledger of placed replicas and the models."""

    @property
    def nodes(self) -> NodeTable: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def topology(self) -> TopologyGraph: ...

    @property
    def power(self) -> PowerModel: ...


@runtime_checkable
class Plugin(Protocol):
    """Every plugin has a registry name."""

    name: str


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    """Checks the workload once per cycle; may stash derived data in the cycle state."""

    def pre_filter(self, state: CycleState, request: WorkloadRequest, nodes: NodeTable) -> Status: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    """Rejects infeasible nodes. Returns one :class:`Rejection` per reason (empty: all pass)."""

    def filter(self, state: CycleState, request: WorkloadRequest, nodes: NodeTable) -> list[Rejection]: ...


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    """Runs when no node passed the filters (preemption lives here)."""

    def post_filter(
        self, state: CycleState, request: WorkloadRequest, nodes: NodeTable, unresolvable: BoolArray
    ) -> PostFilterResult: ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    """Scores candidate actions (one per feasible node). Higher is better.

    Raw scores may be on any scale; a plugin that also implements :class:`ScoreNormalizer` maps
    them onto [0, MAX_NODE_SCORE], otherwise the framework clips raw scores to that range.
    """

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray: ...


@runtime_checkable
class ScoreNormalizer(Protocol):
    """Score extension: normalise raw scores of all candidates onto [0, MAX_NODE_SCORE]."""

    def normalize(self, state: CycleState, raw: FloatArray) -> FloatArray: ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    """Reserve claims plugin-side state for a chosen node; Unreserve rolls it back."""

    def reserve(
        self, state: CycleState, request: WorkloadRequest, replica: int, node: int, assignment: Assignment
    ) -> Status: ...

    def unreserve(
        self, state: CycleState, request: WorkloadRequest, replica: int, node: int, assignment: Assignment
    ) -> None: ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    """Commits a placement. In-process binding only records it; the hub dispatches afterwards."""

    def bind(
        self, state: CycleState, request: WorkloadRequest, replica: int, node: int, assignment: Assignment
    ) -> Status: ...


# Capabilities: optional parts of a plugin the core asks for by what they do, never by the
# plugin's name or class (a profile may swap a plugin for another that offers the same).


@runtime_checkable
class RewardScorer(Protocol):
    """Scores by the reward R under this configuration; ``Scheduler.reward_of`` (what trainers
    learn from) uses the last such plugin's configuration, else the contract's default."""

    @property
    def reward_config(self) -> RewardConfig: ...


@runtime_checkable
class EnergyRuled(Protocol):
    """Weighs energy per node by this rule; when its adaptive (battery) rule is on, the profile is
    battery-aware and ``Scheduler.energy_weights`` follows the last such plugin's rule."""

    @property
    def energy_rule(self) -> RewardConfig: ...


@runtime_checkable
class CandidateExplainer(Protocol):
    """Adds to a scored candidate's explanation (``k``: its index among the cycle's candidates)
    from what the plugin left in the cycle state; None adds nothing. Called when the explanation
    is first read, possibly after the cycle: read the cycle state only, never the node table."""

    def explain_candidate(self, state: CycleState, k: int) -> CandidateExtras | None: ...


@runtime_checkable
class ResourceFitFilter(Protocol):
    """Reports the action space's resource rejections itself when ``reports_resource_fit``; without
    such a plugin the core applies them (resource masking is never optional)."""

    reports_resource_fit: bool


PluginFactory = Callable[[Mapping[str, Any], Handle], Plugin]
