"""Forgetting a node (``controlplane delete node NAME``): the hub stops knowing it.

A node that was revoked or went away for good would otherwise stay NotReady forever. Forgetting
ends its active placements as Lost (their replicas are placed again, as when a lease expires),
revokes its credentials (it cannot come back with its old key; a new join enrols it afresh),
deletes its row, and drops it from the hub's memory and the placer. Its events and its
placements' history stay: they name the node, they do not point at its row.

:func:`forget_node` runs inside the hub's lock and one store transaction (``Hub.forget_node``);
the memory it changes is changed only once that transaction has committed, but for the
placements it ends (as every other ending of a placement does).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.errors import ConflictError, NotFoundError
from controlplane.fleet.nodes import NodeLive
from controlplane.hub.placement import Placer
from controlplane.hub.registry import NodeRegistry
from controlplane.hub.workloads import PlacementBook
from controlplane.store import queries
from controlplane.store.models import NodeCredentialRow, NodeRow, PolicyAssignmentRow
from controlplane.store.store import Store

__all__ = ["ForgetHost", "ForgottenNode", "commit_forget", "forget_node"]


class _NodeLoss(Protocol):
    def node_lost(self, node: str) -> None: ...


class ForgetHost(Protocol):
    """What forgetting a node touches of the hub (``hub.service.Hub`` is one)."""

    @property
    def nodes(self) -> MutableMapping[str, NodeLive]: ...
    @property
    def book(self) -> PlacementBook: ...
    @property
    def registry(self) -> NodeRegistry: ...
    @property
    def functions(self) -> _NodeLoss: ...
    @property
    def placer(self) -> Placer: ...
    @property
    def wake(self) -> Callable[[], None]: ...


log = logging.getLogger("edgeplane.hub")


@dataclass(frozen=True, slots=True)
class ForgottenNode:
    """What forgetting a node did."""

    name: str
    cluster: str  # "" for a node enrolled but never registered
    status: str  # its status when it was forgotten ("" when it never registered)
    forced: bool  # it was Ready, forgotten all the same
    credentials_revoked: bool  # revoked now (False: already revoked, or it had none)
    placements_lost: list[str]  # the ids of the placements ended as Lost


async def forget_node(hub: ForgetHost, s: AsyncSession, name: str, *, force: bool) -> ForgottenNode:
    """Forget ``name`` in ``s`` (the caller holds the hub's lock); NotFoundError for a name the
    hub does not know, ConflictError for a Ready node without ``force``. Call
    :func:`commit_forget` once ``s`` has committed."""
    row = await s.get(NodeRow, name)
    cred = await s.get(NodeCredentialRow, name)
    live_cred = cred is not None and cred.revoked_at is None
    live = hub.nodes.get(name)
    if row is None and live is None and not live_cred:
        raise NotFoundError(f"node {name!r} not found", field="name")
    status = live.status if live is not None else (row.status if row is not None else "")
    if status == "Ready" and not force:
        raise ConflictError(
            f"node {name!r} is Ready: stop its agent (or revoke it) first, or force the delete "
            "(its running work is then placed elsewhere while the agent may still run it)",
            field="name",
        )
    why = f"node {name} deleted" + (" while Ready" if status == "Ready" else "")
    lost = await queries.active_placements(s, node=name)
    if lost:
        log.info("node %s deleted: %d placement(s) Lost, to be placed again", name, len(lost))
    for placement in lost:
        await hub.book.end(s, placement, "Lost", why)
    if live_cred:
        assert cred is not None
        cred.revoked_at = time.time()
        Store.add_event(s, "NodeRevoked", "node", name, "credentials revoked: node deleted")
    cluster = row.cluster if row is not None else (cred.cluster if cred is not None else "")
    if row is not None:
        await s.delete(row)
    # Its canary assignment goes with it: a node enrolled later under the name starts afresh.
    await s.execute(delete(PolicyAssignmentRow).where(PolicyAssignmentRow.node == name))
    forgotten = ForgottenNode(
        name=name,
        cluster=cluster,
        status=status,
        forced=status == "Ready",
        credentials_revoked=live_cred,
        placements_lost=[p.id for p in lost],
    )
    Store.add_event(
        s,
        "NodeDeleted",
        "node",
        name,
        f"deleted ({status or 'never registered'})"
        + (f"; {len(lost)} placement(s) Lost" if lost else "")
        + ("; credentials revoked" if live_cred else ""),
        {
            "cluster": cluster,
            "status": status,
            "forced": forgotten.forced,
            "credentials_revoked": live_cred,
            "placements_lost": forgotten.placements_lost,
        },
    )
    if live is not None:
        # The cluster's availability without this node (Unknown when it was its last member);
        # the live view is put back if the transaction fails (commit_forget drops it for good).
        hub.nodes.pop(name)
        try:
            await hub.registry.refresh_clusters(s)
        finally:
            hub.nodes[name] = live
    return forgotten


def commit_forget(hub: ForgetHost, forgotten: ForgottenNode) -> None:
    """Drop the node from the hub's memory once its forgetting has committed: the registry's live
    view (its lease, flushes and cluster hints skip a name they no longer find), the placer and
    the function instances it had."""
    if hub.nodes.pop(forgotten.name, None) is not None:
        hub.functions.node_lost(forgotten.name)
    hub.placer.remove_node(forgotten.name)
    hub.wake()  # its Lost replicas are placed again at once
