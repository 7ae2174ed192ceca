"""Node enrolment and revocation: ``POST /v1/join`` and ``DELETE /v1/nodes/{name}``.

``POST /v1/join`` needs no bearer token: its credential is the single-use join token in the body
(``controlplane agent-token create``). The agent sends the public key of an nkey it made itself;
the hub records it, has the NATS server admit it (:class:`NatsAuthority`), and answers where and
how to connect. A join token enrols only a name that has no active credentials (409 otherwise,
the token unused, the refusal an event): re-keying a live node is an admin's act, ``controlplane
node rekey`` or a join with ``"replace": true`` and a bearer token with the ``admin`` scope.
``DELETE /v1/nodes/{name}`` (scope ``nodes``) revokes a node's key: the server then drops its
connection and refuses it. With ``forget=true`` it deletes the node (``hub.forget``): its key
revoked, its work placed again, the hub no longer lists it; a Ready node only with ``force=true``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from edgeplane_contract.aio import stop_task
from edgeplane_contract.messages import valid_token

from controlplane.api.auth import IDENTITIES, authenticate, client_address
from controlplane.api.keys import HUB
from controlplane.api.params import FORCE, FORGET
from controlplane.api.request import json_body
from controlplane.api.views import (
    DeletedNode,
    JoinReply,
    Node,
    Revoked,
    RevokedNode,
    RevokedUnknownNode,
    to_json,
)
from controlplane.auth.tokens import Principal
from controlplane.bus.authority import NatsAuthority
from controlplane.bus.nats_auth import valid_public_key
from controlplane.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    UnauthorizedError,
    ValidationError,
)
from controlplane.ratelimited_log import RateLimitedLog
from controlplane.store.identities import JoinRefused, NodeAlreadyEnrolled

__all__ = ["JOIN_REQUEST_SCHEMA", "NATS_AUTHORITY", "routes", "setup"]

log = logging.getLogger("edgeplane.api.enrol")
# Refused joins: one line per node name per minute at most (a valid token's an event all the same).
JOIN_REFUSALS_LOG = web.AppKey("join_refusals_log", RateLimitedLog)

NATS_AUTHORITY = web.AppKey("nats_authority", NatsAuthority)
# How often the server's user list is compared with the store (credentials the CLI made).
SYNC_EVERY_S = 5.0

routes = web.RouteTableDef()


def setup(app: web.Application, authority: NatsAuthority | None) -> None:
    """Add the routes; with an authority, keep the NATS server in step with the store."""
    app.add_routes(routes)
    app[JOIN_REFUSALS_LOG] = RateLimitedLog(log, interval_s=60.0)
    if authority is None:
        return
    app[NATS_AUTHORITY] = authority

    async def sync(app: web.Application) -> AsyncIterator[None]:
        identities = app[IDENTITIES]
        task = asyncio.create_task(
            authority.keep_in_sync(identities.node_credentials, every_s=SYNC_EVERY_S), name="nats-authz"
        )
        yield
        await stop_task(task)

    app.cleanup_ctx.append(sync)


# Hand-written, beside the parser below: the join body is checked in two passes (every key's
# presence and type, then formats, with the cluster looked up in between), an order the field
# models do not express. (The reply is a typed model: views.JoinReply.)
JOIN_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "token": {"type": "string", "minLength": 1, "description": "a join token (ep_join_...)"},
        "node": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,63}$"},
        "cluster": {"type": "string", "minLength": 1, "description": "must be the token's cluster"},
        "public_key": {"type": "string", "pattern": "^U[A-Z2-7]{55}$", "description": "nkey user key"},
        "replace": {
            "type": "boolean",
            "description": "replace the key of an enrolled node: needs a bearer token with scope admin",
        },
    },
    "required": ["token", "node", "public_key"],
}


def _string(body: dict[str, Any], key: str, *, required: bool = True) -> str | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError("is required and must be a string", field=key)
    return value


@routes.post("/v1/join")
async def join(request: web.Request) -> web.Response:
    """Redeem a join token for a node's public key; 201 with the node's NATS settings."""
    authority = request.app.get(NATS_AUTHORITY)
    if authority is None:
        raise ConflictError("this hub's NATS server takes anonymous clients: there is nothing to join")
    body = await json_body(request)
    if not isinstance(body, dict):
        raise ValidationError("must be a JSON object", field="body")
    token = _string(body, "token")
    node = _string(body, "node")
    cluster = _string(body, "cluster", required=False)
    public_key = _string(body, "public_key")
    assert token is not None and node is not None and public_key is not None
    if not valid_token(node):
        raise ValidationError("must match [A-Za-z0-9_-]{1,63}", field="node")
    if cluster is not None and authority.federation.cluster(cluster) is None:
        raise ValidationError(f"unknown cluster {cluster!r}", field="cluster")
    if not valid_public_key(public_key):
        raise ValidationError("must be an nkey user public key (U...)", field="public_key")
    replace = body.get("replace", False)
    if not isinstance(replace, bool):
        raise ValidationError("must be a boolean", field="replace")
    replaced_by = (await _admin(request)).name if replace else None
    identities = request.app[IDENTITIES]
    try:
        enrolled = await identities.redeem_join_token(
            token, node=node, public_key=public_key, cluster=cluster, replaced_by=replaced_by
        )
    except JoinRefused as exc:
        await _refused(request, node, exc)
        if isinstance(exc, NodeAlreadyEnrolled):
            raise ConflictError(str(exc), field=exc.field) from None
        raise ForbiddenError(str(exc), field=exc.field) from None
    if authority.federation.cluster(enrolled) is None:
        # The token outlived its cluster (the federation file changed): undo the enrolment.
        await identities.revoke_node(node)
        raise ForbiddenError(
            f"join token is for cluster {enrolled!r}, which this hub no longer has", field="token"
        )
    try:
        await authority.apply(identities.node_credentials)
    except Exception as exc:  # recorded all the same: the sync loop applies it at its next pass
        log.error("node %s enrolled, but NATS authorization not applied yet: %s", node, exc)
    log.info("node %s enrolled in cluster %s", node, enrolled)
    reply = JoinReply(
        node=node,
        cluster=enrolled,
        nats_url=authority.agent_url(enrolled),
        subject_prefix=authority.subject_prefix(enrolled),
        inbox_prefix=authority.inbox_prefix(enrolled, node),
        hub_public_key=authority.hub_public_key,
    )
    return web.json_response(to_json(reply), status=201)


async def _admin(request: web.Request) -> Principal:
    """The admin a replace needs, authenticated here since the route is public. Any failure is
    403 (field ``Authorization``): the join itself needs no bearer token, the replace is what is
    refused (the document keeps 401 for routes that need a token)."""
    try:
        return await authenticate(request, "admin")
    except UnauthorizedError as exc:
        raise ForbiddenError(
            f"replace needs 'Authorization: Bearer <token>' with the admin scope: {exc}",
            field="Authorization",
        ) from None


async def _refused(request: web.Request, node: str, exc: JoinRefused) -> None:
    """Log a refused join (at a bounded rate per name); a valid token's refusal is an event."""
    request.app[JOIN_REFUSALS_LOG].log(
        ("join", node),
        "join of node %(node)s from %(remote)s refused: %(reason)s",
        "refused %(count)d more joins of node %(node)s in the last %(interval)s s: %(reason)s",
        node=node,
        remote=client_address(request) or "?",
        reason=str(exc),
    )
    if exc.token_id is not None:
        await request.app[IDENTITIES].record_join_refused(node, str(exc), token_id=exc.token_id)


@routes.delete("/v1/nodes/{name}")
async def revoke_node(request: web.Request) -> web.Response:
    """Revoke a node's NATS credentials; 202 with the node (it goes NotReady as its lease ends).
    With ``forget=true``: delete the node (:func:`forget_node`)."""
    if FORGET.parse(request):
        return await forget_node(request)
    hub = request.app[HUB]
    identities = request.app[IDENTITIES]
    name = request.match_info["name"]
    row = await hub.store.get_node(name)
    revoked = await identities.revoke_node(name)
    if row is None and not revoked:
        raise NotFoundError(f"node {name!r} not found", field="name")
    authority = request.app.get(NATS_AUTHORITY)
    if authority is not None:
        await authority.apply(identities.node_credentials)
    live = hub.nodes.get(name)
    if live is not None and hub.settings.require_enrolment:
        # It can neither heartbeat nor register again: end its lease now rather than in
        # lease_missed_heartbeats intervals, so that its work is placed again at once.
        live.lease_s = 0.0
        hub.wake()
    body: Revoked
    if row is None:
        body = RevokedUnknownNode(name=name, credentials="revoked")
    else:
        config = hub.federation.cluster(row.cluster)
        node = Node.of(
            row, region=config.region if config else "", allocated=hub.allocated(name), revoked=True
        )
        body = RevokedNode.of_node(node)
    return web.json_response(to_json(body), status=202)


async def forget_node(request: web.Request) -> web.Response:
    """``DELETE /v1/nodes/{name}?forget=true[&force=true]``: 200 with what was done; 409 for a
    Ready node without ``force`` (nothing done), 404 for a name the hub does not know."""
    hub = request.app[HUB]
    forgotten = await hub.forget_node(request.match_info["name"], force=FORCE.parse(request))
    authority = request.app.get(NATS_AUTHORITY)
    if authority is not None and forgotten.credentials_revoked:
        try:
            await authority.apply(request.app[IDENTITIES].node_credentials)
        except Exception as exc:  # the sync loop applies it at its next pass
            log.error("node %s deleted, but its NATS authorization not removed yet: %s", forgotten.name, exc)
    return web.json_response(to_json(DeletedNode.of(forgotten)))
