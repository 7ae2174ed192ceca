"""Outcome types of the scheduling framework: ``Code``, ``Status`` and a filter's ``Rejection``.

A leaf module: it imports nothing from ``controlplane.scheduling``, so that the data model, the
node table and the action space can use these types without importing the framework (which
names them in its plugin interfaces: the import would go both ways).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from edgeplane_contract.arrays import BoolArray

__all__ = ["Code", "Rejection", "Status"]


class Code(enum.IntEnum):
    """Outcome codes, as in the Kubernetes framework."""

    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    # Nothing (not even preemption) can make the node fit: wrong labels, affinity, ...
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    SKIP = 4


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin's or a decision's outcome: a code, human reasons and the plugin that said so."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str | None = None

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str | None = None) -> Status:
        return cls(Code.UNSCHEDULABLE, tuple(reasons), plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str | None = None) -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, tuple(reasons), plugin)

    @classmethod
    def error(cls, *reasons: str, plugin: str | None = None) -> Status:
        return cls(Code.ERROR, tuple(reasons), plugin)

    def message(self) -> str:
        return "; ".join(self.reasons) if self.reasons else self.code.name.lower()

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code.name, "reasons": list(self.reasons), "plugin": self.plugin}


_SUCCESS = Status()


@dataclass(slots=True)
class Rejection:
    """Nodes a filter rejects (``mask`` True), with the reason and whether preemption could help."""

    mask: BoolArray
    reason: str
    code: Code = Code.UNSCHEDULABLE
