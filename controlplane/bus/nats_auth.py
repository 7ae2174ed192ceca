"""Who may do what on NATS: identities, their permissions, and the nats-server configuration.

Pure functions: no files, no processes. The hub has one identity that may publish and subscribe
to everything; each enrolled node has its own nkey, which may only

- publish its own node's agent -> hub subjects (register, heartbeat, report),
- answer the requests it receives (``allow_responses``: the reply subject of a message delivered
  to it, once),
- subscribe to its own node's hub -> agent subjects (cmd, fn.invoke, fn.prewarm, fn.query,
  fn.retire, logs, bid, decisions), the cluster's ``{prefix}.hub.hello`` and its own inbox prefix.

Anything else is refused by the server ("Permissions Violation"); a client without a known nkey
cannot connect at all. See docs/security.md, "NATS identities and permissions".

An edge site may sit behind a **leaf node** (a nats-server of its own that its agents connect
to, joined to the hub side's servers by one outbound connection): the leaf server admits the
site's agents with the same per-node permissions (:func:`render_leaf_config`), and the hub side
admits the leaf connection as a :class:`SiteIdentity` whose permissions
(:func:`site_permissions`) cover its one cluster's agent subjects only. What the leaf may
publish is what flows into the hub side; what it may subscribe to is what flows out to it: a
compromised site server still cannot speak for another cluster.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from edgeplane_contract.messages import Subjects, valid_token

__all__ = [
    "ClusterRoutes",
    "NodeIdentity",
    "Permissions",
    "ServerTls",
    "SiteIdentity",
    "agent_inbox_prefix",
    "agent_permissions",
    "hub_permissions",
    "render_leaf_config",
    "render_server_config",
    "site_permissions",
    "valid_public_key",
]

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_USER_KEY_RE = re.compile(r"^U[A-Z2-7]{55}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9.:_-]{1,253}$")


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """An enrolled node as the server sees it: a public key bound to one node of one cluster."""

    node: str
    cluster: str
    prefix: str
    public_key: str


@dataclass(frozen=True, slots=True)
class SiteIdentity:
    """A site's leaf-node connection as the hub side sees it: one nkey bound to one cluster."""

    cluster: str
    prefix: str
    public_key: str


@dataclass(frozen=True, slots=True)
class ClusterRoutes:
    """This server's place in a cluster of hub-side servers: the cluster's name, where this
    server listens for routes, the other servers' route addresses, and where it accepts leaf
    nodes."""

    name: str
    listen: tuple[str, int]
    routes: tuple[tuple[str, int], ...]
    leafnodes: tuple[str, int] | None = None
    # Tell leaf nodes this server's leaf address (they reconnect to any server they were told
    # of); off where the leaves reach the hub side through something in between (a load
    # balancer, a relay), whose address is the only one they should use.
    advertise_leafnodes: bool = True


@dataclass(frozen=True, slots=True)
class Permissions:
    """Subjects one identity may publish and subscribe to (everything else is denied)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: bool = False

    def to_config(self) -> dict[str, object]:
        config: dict[str, object] = {
            "publish": {"allow": list(self.publish)},
            "subscribe": {"allow": list(self.subscribe)},
        }
        if self.allow_responses:
            config["allow_responses"] = True
        return config


@dataclass(frozen=True, slots=True)
class ServerTls:
    """The server's TLS files; ``verify`` makes clients present a certificate signed by ``ca_file``."""

    cert_file: str
    key_file: str
    ca_file: str = ""
    verify: bool = True


def agent_inbox_prefix(cluster: str, node: str) -> str:
    """The inbox prefix a node's connection uses for its own requests' replies.

    ``_INBOX_{cluster}.{node}``: the dot keeps it unambiguous (names cannot contain one), so no
    node's inbox permission covers another node's; the hub's default ``_INBOX.<id>`` never
    matches either.
    """
    return f"_INBOX_{cluster}.{node}"


def valid_public_key(key: str) -> bool:
    """A well-formed nkey *user* public key (``U`` + 55 base32 characters, checksum included)."""
    if not _USER_KEY_RE.match(key):
        return False
    try:
        raw = base64.b32decode(key + "=" * (-len(key) % 8))
    except binascii.Error:
        return False
    body, checksum = raw[:-2], raw[-2:]
    return len(body) == 33 and _crc16(body) == int.from_bytes(checksum, "little")


def hub_permissions() -> Permissions:
    return Permissions(publish=(">",), subscribe=(">",))


def agent_permissions(identity: NodeIdentity) -> Permissions:
    """What one node's agent may do; every subject is built by :class:`Subjects`."""
    subjects = Subjects(cluster=identity.cluster, prefix=identity.prefix)
    node = identity.node
    return Permissions(
        publish=(subjects.register(node), subjects.heartbeat(node), subjects.report(node)),
        subscribe=(
            subjects.command(node),
            subjects.invoke(node),
            subjects.prewarm(node),
            subjects.invocation_query(node),
            subjects.logs(node),
            subjects.retire(node),
            subjects.bid(node),
            subjects.node(node, "decisions"),
            subjects.policy(node),
            subjects.hub_hello(),
            f"{agent_inbox_prefix(identity.cluster, node)}.>",
        ),
        allow_responses=True,
    )


def site_permissions(site: SiteIdentity) -> Permissions:
    """What a site's leaf connection may carry, from the hub side: its cluster's agent -> hub
    subjects and replies to the hub's requests in, its cluster's hub -> agent subjects, the hub's
    hello and its agents' reply inboxes out. Another cluster's subjects never cross it."""
    subjects = Subjects(cluster=site.cluster, prefix=site.prefix)
    return Permissions(
        publish=(
            subjects.agent_wildcard("register"),
            subjects.agent_wildcard("heartbeat"),
            subjects.agent_wildcard("report"),
            "_INBOX.>",  # the agents' answers to the hub's requests (each agent: allow_responses)
        ),
        subscribe=(
            subjects.agent_wildcard("cmd"),
            subjects.agent_wildcard("fn.invoke"),
            subjects.agent_wildcard("fn.prewarm"),
            subjects.agent_wildcard("fn.query"),
            subjects.agent_wildcard("logs"),
            subjects.agent_wildcard("fn.retire"),
            subjects.agent_wildcard("bid"),
            subjects.agent_wildcard("decisions"),
            subjects.agent_wildcard("policy"),
            subjects.hub_hello(),
            f"_INBOX_{site.cluster}.>",
        ),
    )


def render_server_config(
    *,
    hub_public_key: str,
    nodes: Iterable[NodeIdentity],
    listen: tuple[str, int] | None = None,
    tls: ServerTls | None = None,
    sites: Iterable[SiteIdentity] = (),
    cluster: ClusterRoutes | None = None,
) -> str:
    """A nats-server configuration: the hub's and every node's nkey with its permissions, and
    each site's leaf-node nkey with :func:`site_permissions`.

    Without ``listen`` only the ``authorization`` block (and ``tls``) is rendered: what an
    operator includes in an external server's own configuration. ``cluster``: this server is one
    of a cluster of hub-side servers (``cluster`` block with its routes, ``leafnodes`` where the
    sites' leaf nodes connect). Raises ValueError on a malformed key, name, prefix or address:
    nothing unchecked is ever written into the file.
    """
    if not valid_public_key(hub_public_key):
        raise ValueError(f"hub public key {hub_public_key!r} is not an nkey user public key")
    users: list[dict[str, object]] = [{"nkey": hub_public_key, "permissions": hub_permissions().to_config()}]
    seen = {hub_public_key}
    for identity in sorted(nodes, key=lambda n: (n.cluster, n.node)):
        _check_identity(identity)
        if identity.public_key in seen:
            raise ValueError(f"public key of node {identity.node!r} is used twice")
        seen.add(identity.public_key)
        users.append({"nkey": identity.public_key, "permissions": agent_permissions(identity).to_config()})
    for site in sorted(sites, key=lambda s: s.cluster):
        _check_site(site)
        if site.public_key in seen:
            raise ValueError(f"public key of site {site.cluster!r} is used twice")
        seen.add(site.public_key)
        users.append({"nkey": site.public_key, "permissions": site_permissions(site).to_config()})
    lines = ["# Generated by edgeplane; changes are overwritten. Anonymous clients are refused."]
    if listen is not None:
        lines.append(f"listen: {json.dumps(_address(listen))}")
    if cluster is not None:
        if not _PREFIX_RE.match(cluster.name):
            raise ValueError(f"cluster name {cluster.name!r} is malformed")
        routes = [f"nats-route://{_address(r)}" for r in cluster.routes]
        lines.append("cluster {")
        lines.append(f"  name: {json.dumps(cluster.name)}")
        lines.append(f"  listen: {json.dumps(_address(cluster.listen))}")
        lines.append(f"  routes: {json.dumps(routes)}")
        lines.append("}")
        if cluster.leafnodes is not None:
            lines.append("leafnodes {")
            lines.append(f"  listen: {json.dumps(_address(cluster.leafnodes))}")
            if not cluster.advertise_leafnodes:
                lines.append("  no_advertise: true")
            lines.append("}")
    if tls is not None:
        lines.append("tls {")
        lines.append(f"  cert_file: {json.dumps(tls.cert_file)}")
        lines.append(f"  key_file: {json.dumps(tls.key_file)}")
        if tls.ca_file:
            lines.append(f"  ca_file: {json.dumps(tls.ca_file)}")
        lines.append(f"  verify: {'true' if tls.verify else 'false'}")
        lines.append("}")
    lines.append("authorization {")
    lines.append("  users = [")
    for user in users:
        lines.append(f"    {json.dumps(user, separators=(', ', ': '))}")
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_leaf_config(
    *,
    site: SiteIdentity,
    site_seed: str,
    nodes: Iterable[NodeIdentity],
    listen: tuple[str, int],
    remotes: Iterable[tuple[str, int]],
) -> str:
    """A site's leaf-node server: its agents' nkeys with their own permissions (as on the hub
    side), and one outbound leaf connection to the hub side's servers (``remotes``, tried in
    turn), authenticated with the site's nkey seed (the file is written private: it holds it)."""
    _check_site(site)
    if not site_seed.startswith("SU"):
        raise ValueError("the site's seed is not an nkey user seed")
    users: list[dict[str, object]] = []
    seen: set[str] = set()
    for identity in sorted(nodes, key=lambda n: n.node):
        _check_identity(identity)
        if identity.cluster != site.cluster:
            raise ValueError(
                f"node {identity.node!r} of cluster {identity.cluster!r} is not in site {site.cluster!r}"
            )
        if identity.public_key in seen:
            raise ValueError(f"public key of node {identity.node!r} is used twice")
        seen.add(identity.public_key)
        users.append({"nkey": identity.public_key, "permissions": agent_permissions(identity).to_config()})
    urls = [f"nats-leaf://{_address(r)}" for r in remotes]
    if not urls:
        raise ValueError("a leaf node needs at least one hub-side server to connect to")
    lines = [
        f"# Generated by edgeplane for site {site.cluster}; changes are overwritten. Holds the site's seed.",
        f"listen: {json.dumps(_address(listen))}",
        "authorization {",
        "  users = [",
    ]
    for user in users:
        lines.append(f"    {json.dumps(user, separators=(', ', ': '))}")
    if not users:
        # No agent enrolled yet: a user nobody can be (a password no one is told), so that the
        # server still refuses anonymous clients rather than admitting everyone. Derived from the
        # site's seed, not drawn afresh: the same nodes must render the same text, or every
        # sync pass would rewrite the file and reload the server for nothing.
        password = hashlib.sha256(b"edgeplane-leaf-nobody:" + site_seed.encode()).hexdigest()[:32]
        lines.append(f'    {{"user": "nobody", "password": "{password}"}}')
    lines.append("  ]")
    lines.append("}")
    lines.append("leafnodes {")
    lines.append(f"  remotes = [{{urls: {json.dumps(urls)}, nkey: {json.dumps(site_seed)}}}]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _address(address: tuple[str, int]) -> str:
    host, port = address
    if not _HOST_RE.match(host) or not 0 < port < 65536:
        raise ValueError(f"bad address {host!r}:{port}")
    return f"{host}:{port}"


def _check_site(site: SiteIdentity) -> None:
    if not valid_token(site.cluster):
        raise ValueError(f"cluster name {site.cluster!r} is not one subject token")
    if not _PREFIX_RE.match(site.prefix):
        raise ValueError(f"subject prefix {site.prefix!r} of site {site.cluster!r} is malformed")
    if not valid_public_key(site.public_key):
        raise ValueError(f"public key of site {site.cluster!r} is not an nkey user public key")


def _check_identity(identity: NodeIdentity) -> None:
    for what, value in (("node", identity.node), ("cluster", identity.cluster)):
        if not valid_token(value):
            raise ValueError(f"{what} name {value!r} is not one subject token")
    if not _PREFIX_RE.match(identity.prefix):
        raise ValueError(f"subject prefix {identity.prefix!r} of cluster {identity.cluster!r} is malformed")
    if not valid_public_key(identity.public_key):
        raise ValueError(f"public key of node {identity.node!r} is not an nkey user public key")


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, the checksum nkeys append."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc
