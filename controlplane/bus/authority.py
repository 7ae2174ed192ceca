"""Keeps a nats-server's user list in step with the enrolled nodes.

:class:`NatsAuthority` renders the configuration (:mod:`controlplane.bus.nats_auth`) from the
store's active node credentials, writes it, and has the embedded server reload it. For an
external server it writes the file and warns: its operator applies it (``controlplane
nats-config`` renders the same block).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from edgeplane_contract.credentials import write_private
from edgeplane_contract.messages import DEFAULT_PREFIX

from controlplane.bus.nats_auth import NodeIdentity, ServerTls, agent_inbox_prefix, render_server_config
from controlplane.federation.config import FederationConfig
from controlplane.natsd import NatsServer

__all__ = ["EMBEDDED_CONFIG_FILE", "EXTERNAL_CONFIG_FILE", "EnrolledNode", "NatsAuthority"]

log = logging.getLogger("edgeplane.hub.nats")

EMBEDDED_CONFIG_FILE = "nats-server.conf"
EXTERNAL_CONFIG_FILE = "nats-authorization.conf"


class EnrolledNode(Protocol):
    """A node's active credential (``controlplane.store.models.NodeCredentialRow`` is one)."""

    @property
    def node(self) -> str: ...

    @property
    def cluster(self) -> str: ...

    @property
    def public_key(self) -> str: ...


NodesProvider = Callable[[], Awaitable[Sequence[EnrolledNode]]]


class NatsAuthority:
    """The NATS identities of one hub: what the server must know, and where agents connect.

    ``server``: the embedded server to reload (None: an external one, whose operator reloads).
    ``listen``: rendered into the file for the embedded server; None renders only the blocks an
    external server's configuration includes. ``nats_url`` is where agents of clusters without
    their own ``nats_url`` connect.
    """

    def __init__(
        self,
        *,
        config_path: Path,
        hub_public_key: str,
        federation: FederationConfig,
        nats_url: str,
        listen: tuple[str, int] | None = None,
        tls: ServerTls | None = None,
        server: NatsServer | None = None,
    ) -> None:
        self.config_path = config_path
        self.hub_public_key = hub_public_key
        self.federation = federation
        self.nats_url = nats_url
        self.listen = listen
        self.tls = tls
        self.server = server
        self._lock = asyncio.Lock()
        # What the server has now (as far as we know): an unchanged rendering is not re-applied.
        self._applied: str | None = None
        with contextlib.suppress(OSError):
            self._applied = config_path.read_text(encoding="utf-8")

    # --- what agents are told ---------------------------------------------------------------

    def subject_prefix(self, cluster: str) -> str:
        config = self.federation.cluster(cluster)
        return config.subject_prefix if config else DEFAULT_PREFIX

    def agent_url(self, cluster: str) -> str:
        config = self.federation.cluster(cluster)
        return (config.nats_url if config and config.nats_url else None) or self.nats_url

    @staticmethod
    def inbox_prefix(cluster: str, node: str) -> str:
        return agent_inbox_prefix(cluster, node)

    # --- the server's configuration ---------------------------------------------------------

    def identities(self, nodes: Iterable[EnrolledNode]) -> list[NodeIdentity]:
        """Nodes as server identities; a node of a cluster no longer in the federation is left out."""
        found: list[NodeIdentity] = []
        for node in nodes:
            if self.federation.cluster(node.cluster) is None:
                log.warning(
                    "node %s is enrolled in unknown cluster %r: not admitted", node.node, node.cluster
                )
                continue
            found.append(
                NodeIdentity(
                    node=node.node,
                    cluster=node.cluster,
                    prefix=self.subject_prefix(node.cluster),
                    public_key=node.public_key,
                )
            )
        return found

    def render(self, nodes: Iterable[EnrolledNode]) -> str:
        return render_server_config(
            hub_public_key=self.hub_public_key,
            nodes=self.identities(nodes),
            listen=self.listen,
            tls=self.tls,
        )

    def write(self, nodes: Iterable[EnrolledNode] = ()) -> str:
        """Render and write the file now (before the server starts); the text written."""
        text = self.render(nodes)
        write_private(self.config_path, text)
        self._applied = text
        return text

    async def apply(self, nodes: NodesProvider) -> bool:
        """Bring the server in line with the nodes ``nodes()`` returns; True when it changed.

        One at a time (the list is read inside the lock, so the last writer wins with the newest
        list). The embedded server is reloaded and confirms it (NatsReloadError otherwise; the
        file is rewritten and reloaded again at the next call); an external server's operator is
        told to reload.
        """
        async with self._lock:
            text = self.render(await nodes())
            if text == self._applied:
                return False
            write_private(self.config_path, text)
            if self.server is not None:
                await asyncio.to_thread(self.server.reload)
                log.info("NATS authorization reloaded (%s)", self.config_path)
            else:
                log.warning(
                    "NATS authorization changed: wrote %s; the operator of the NATS server must "
                    "apply it and reload (nats-server --signal reload)",
                    self.config_path,
                )
            self._applied = text
            return True

    async def keep_in_sync(self, nodes: NodesProvider, *, every_s: float = 5.0) -> None:
        """Apply every ``every_s`` until cancelled: credentials made or revoked by the CLI on the
        store directly (``agent-credentials``, another hub) reach the server too."""
        while True:
            try:
                await self.apply(nodes)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed reload is retried at the next pass
                log.error("NATS authorization not applied: %s", exc)
            await asyncio.sleep(every_s)
