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
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from edgeplane_contract.messages import Subjects, valid_token

__all__ = [
    "NodeIdentity",
    "Permissions",
    "ServerTls",
    "agent_inbox_prefix",
    "agent_permissions",
    "hub_permissions",
    "render_server_config",
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
            subjects.hub_hello(),
            f"{agent_inbox_prefix(identity.cluster, node)}.>",
        ),
        allow_responses=True,
    )


def render_server_config(
    *,
    hub_public_key: str,
    nodes: Iterable[NodeIdentity],
    listen: tuple[str, int] | None = None,
    tls: ServerTls | None = None,
) -> str:
    """A nats-server configuration: the hub's and every node's nkey with its permissions.

    Without ``listen`` only the ``authorization`` block (and ``tls``) is rendered: what an
    operator includes in an external server's own configuration. Raises ValueError on a
    malformed key, name or prefix: nothing unchecked is ever written into the file.
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
    lines = ["# Generated by edgeplane; changes are overwritten. Anonymous clients are refused."]
    if listen is not None:
        host, port = listen
        if not _HOST_RE.match(host) or not 0 < port < 65536:
            raise ValueError(f"bad listen address {host!r}:{port}")
        lines.append(f"listen: {json.dumps(f'{host}:{port}')}")
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
