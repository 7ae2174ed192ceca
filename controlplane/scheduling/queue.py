"""The scheduling queue: workloads (or the rest of their replicas) waiting for capacity.

Ordered by priority (highest first), then arrival. An entry is retried only when capacity may
have grown since its last attempt (the scheduler's capacity epoch moved: a release, a node
added or made ready), which is Kubernetes' "move unschedulable pods on cluster events" rule
without the per-event filtering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduling.model import WorkloadRequest

__all__ = ["QueueEntry", "SchedulingQueue"]


@dataclass(slots=True)
class QueueEntry:
    """A waiting workload and the replica indices it still needs placed."""

    request: WorkloadRequest
    replicas: list[int]
    seq: int
    epoch: int = -1
    attempts: int = 0
    last_reason: str = ""
    enqueued_at: float = 0.0
    last_attempt_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload_id": self.request.id,
            "priority": self.request.priority,
            "replicas": list(self.replicas),
            "attempts": self.attempts,
            "reason": self.last_reason,
            "enqueued_at": self.enqueued_at,
        }


@dataclass(slots=True)
class SchedulingQueue:
    """Waiting workloads by id, iterated in priority order."""

    _entries: dict[str, QueueEntry] = field(default_factory=dict)
    _seq: int = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, workload_id: str) -> bool:
        return workload_id in self._entries

    def get(self, workload_id: str) -> QueueEntry | None:
        return self._entries.get(workload_id)

    def push(
        self, request: WorkloadRequest, replicas: list[int], *, epoch: int, reason: str, now: float
    ) -> QueueEntry:
        """Add a workload, or update the replicas and reason of one already waiting."""
        entry = self._entries.get(request.id)
        if entry is None:
            self._seq += 1
            entry = QueueEntry(request=request, replicas=sorted(replicas), seq=self._seq, enqueued_at=now)
            self._entries[request.id] = entry
        else:
            entry.replicas = sorted(set(entry.replicas) | set(replicas))
        entry.epoch = epoch
        entry.last_reason = reason
        entry.last_attempt_at = now
        return entry

    def remove(self, workload_id: str) -> QueueEntry | None:
        return self._entries.pop(workload_id, None)

    def discard(self, workload_id: str, replicas: list[int]) -> None:
        """Forget replicas that got placed; drop the entry when none are left."""
        entry = self._entries.get(workload_id)
        if entry is None:
            return
        entry.replicas = [r for r in entry.replicas if r not in set(replicas)]
        if not entry.replicas:
            del self._entries[workload_id]

    def ordered(self) -> list[QueueEntry]:
        return sorted(self._entries.values(), key=lambda e: (-e.request.priority, e.seq))
