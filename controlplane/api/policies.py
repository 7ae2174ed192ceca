"""Versioned local policies (``/v1/policies``): upload, list, read; roll a version out to some
nodes, promote it to the fleet, roll it back; and the agents' decision logs, collected for
retraining (``/v1/decision-logs``). The distributor (controlplane/policies/
distribution.py) then brings every node to the version it should run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from edgeplane_contract.aio import stop_task

from controlplane.api.auth import principal_of
from controlplane.api.keys import HUB
from controlplane.api.request import json_body
from controlplane.api.views import (
    CanaryStatus,
    DecisionLogs,
    MissingLog,
    NodeDecisionLog,
    Policy,
    PolicyList,
    PolicyRolloutResult,
    to_json,
)
from controlplane.errors import ConflictError, ValidationError
from controlplane.hub.service import Hub
from controlplane.policies.canary_live import CanaryRollouts, bucket
from controlplane.policies.decision_logs import DECISION_LOG_REQUEST
from controlplane.policies.decision_logs import collect as collect_logs
from controlplane.policies.distribution import PolicyDistributor
from controlplane.policies.metrics import PolicyCollector
from controlplane.policies.registry import PolicyRegistry
from controlplane.policies.upload import CANARY, POLICY_ROLLBACK, POLICY_ROLLOUT, POLICY_UPLOAD, PolicyRollout
from controlplane.rollout.controller import rollout_config
from controlplane.store import queries
from controlplane.store.models import PolicyRow

__all__ = ["POLICIES", "POLICY_DISTRIBUTOR", "routes", "setup"]

POLICIES = web.AppKey("policies", PolicyRegistry)
POLICY_DISTRIBUTOR = web.AppKey("policy_distributor", PolicyDistributor)
CANARIES = web.AppKey("canaries", CanaryRollouts)

routes = web.RouteTableDef()
log = logging.getLogger("edgeplane.hub.policy")


def setup(app: web.Application, hub: Hub) -> None:
    """The routes, the registry, the distributor's loop and the live canaries, for the app's
    lifetime."""
    registry = PolicyRegistry(hub.store)
    app[POLICIES] = registry
    distributor = PolicyDistributor(registry=registry, hub=hub)
    app[POLICY_DISTRIBUTOR] = distributor
    app[CANARIES] = CanaryRollouts(registry, hub, distributor.wake)
    app.add_routes(routes)

    async def distribute(_app: web.Application) -> AsyncIterator[None]:
        collector = PolicyCollector(app[CANARIES], distributor)
        hub.metrics.registry.register(collector)
        task = asyncio.create_task(distributor.run(), name="policy-distribution")
        try:  # a canary the previous leader (or this hub before its restart) was running
            await app[CANARIES].resume()
        except Exception as exc:  # the store away: it stays as it was, resumed at the next start
            log.warning("a running policy canary could not be resumed: %s", exc)
        yield
        await app[CANARIES].close()
        await stop_task(task)
        hub.metrics.registry.unregister(collector)

    app.cleanup_ctx.append(distribute)


def _version(request: web.Request) -> int:
    text = request.match_info["version"].removeprefix("v")
    if not text.isdigit() or not 0 < int(text) < 2**31:
        raise ValidationError("must be a policy version number (e.g. 3 or v3)", field="version")
    return int(text)


def _can_sign(request: web.Request) -> None:
    """A version reaches nodes only signed by the hub's nkey: a hub on anonymous NATS has none."""
    if request.app[HUB].bus.signing_seed is None:
        raise ConflictError(
            "this hub has no NATS key to sign policy versions with (it runs on anonymous NATS): "
            "run it with --nats-seed, as enrolment does",
            field="version",
        )


def _who(request: web.Request) -> str:
    principal = principal_of(request)
    return principal.name if principal is not None else "anonymous"


@routes.post("/v1/policies")
async def upload_policy(request: web.Request) -> web.Response:
    upload = POLICY_UPLOAD.parse(await json_body(request))
    registered = await request.app[POLICIES].register(upload, created_by=_who(request))
    return web.json_response(
        to_json(_policy(request, registered.row)), status=201 if registered.created else 200
    )


@routes.post("/v1/decision-logs")
async def collect_decision_logs(request: web.Request) -> web.Response:
    """The Ready nodes' decision logs, collected now (``controlplane.policies.decision_logs``)."""
    asked = DECISION_LOG_REQUEST.parse(await json_body(request, optional=True) or {})
    collected = await collect_logs(request.app[HUB], asked)
    nodes = [NodeDecisionLog(n.node, n.epsilon, n.truncated, n.entries) for n in collected.nodes]
    missing = [MissingLog(node, reason) for node, reason in collected.missing]
    view = DecisionLogs(nodes=nodes, missing=missing, entries=sum(len(n.entries) for n in nodes))
    return web.json_response(to_json(view))


@routes.get("/v1/policies")
async def list_policies(request: web.Request) -> web.Response:
    items = [_policy(request, row) for row in await request.app[POLICIES].versions()]
    return web.json_response(to_json(PolicyList(items=items, total=len(items))))


@routes.get("/v1/policies/{version}")
async def get_policy(request: web.Request) -> web.Response:
    row = await request.app[POLICIES].get(_version(request))
    return web.json_response(to_json(_policy(request, row)))


@routes.post("/v1/policies/{version}/rollout")
async def rollout_policy(request: web.Request) -> web.Response:
    version = _version(request)
    target = POLICY_ROLLOUT.parse(await json_body(request))
    _can_sign(request)
    nodes = await _targets(request.app[HUB], target)
    changed = await request.app[POLICIES].assign(version, nodes, by=_who(request))
    request.app[POLICY_DISTRIBUTOR].wake()
    return web.json_response(to_json(PolicyRolloutResult(version=version, nodes=nodes, changed=changed)))


@routes.post("/v1/policies/{version}/promote")
async def promote_policy(request: web.Request) -> web.Response:
    _can_sign(request)
    row = await request.app[POLICIES].promote(_version(request), by=_who(request))
    request.app[POLICY_DISTRIBUTOR].wake()
    return web.json_response(to_json(_policy(request, row)))


@routes.post("/v1/policies/{version}/rollback")
async def rollback_policy(request: web.Request) -> web.Response:
    version = _version(request)
    body = POLICY_ROLLBACK.parse(await json_body(request, optional=True) or {})
    row = await request.app[POLICIES].rollback(version, by=_who(request), reason=body.reason)
    request.app[POLICY_DISTRIBUTOR].wake()
    return web.json_response(to_json(_policy(request, row)))


@routes.post("/v1/policies/{version}/canary")
async def start_canary(request: web.Request) -> web.Response:
    version = _version(request)
    body = CANARY.parse(await json_body(request, optional=True) or {})
    try:
        config = rollout_config(body)
    except ValueError as exc:  # the parser checks each field; this is a last line
        raise ValidationError(str(exc), field="<body>") from None
    _can_sign(request)
    drain = (body.drain_window_s, body.drain_span_s)
    canary = await request.app[CANARIES].start(version, config, by=_who(request), drain=drain)
    return web.json_response(to_json(CanaryStatus.of(canary.describe())), status=201)


@routes.get("/v1/policies/{version}/canary")
async def get_canary(request: web.Request) -> web.Response:
    described = await request.app[CANARIES].describe(_version(request))
    return web.json_response(to_json(CanaryStatus.of(described)))


async def _targets(hub: Hub, target: PolicyRollout) -> list[str]:
    """The node names a rollout names, every one known to the hub (ValidationError otherwise)."""
    known = hub.nodes
    if target.labels:
        async with hub.store.session() as session:
            labelled = await queries.node_labels(session)
        wanted = target.labels.items()
        matched = sorted(
            name for name, labels in labelled.items() if name in known and wanted <= labels.items()
        )
        if not matched:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(target.labels.items()))
            raise ValidationError(f"no node known to the hub has the labels {shown}", field="labels")
        return matched
    if target.nodes:
        for name in target.nodes:
            if name not in known:
                raise ValidationError(f"node {name!r} is not known to the hub", field="nodes")
        return sorted(set(target.nodes))
    if target.clusters:
        for cluster in target.clusters:
            if hub.federation.cluster(cluster) is None:
                raise ValidationError(f"cluster {cluster!r} is not in the federation", field="clusters")
        return sorted(n for n, live in known.items() if live.cluster in target.clusters)
    assert target.percent is not None
    return sorted(n for n in known if bucket(n) < target.percent)


def _policy(request: web.Request, row: PolicyRow) -> Policy:
    hub = request.app[HUB]
    running = sorted(n for n, live in hub.nodes.items() if live.policy_version == row.version)
    return Policy.of(row, running_on=running)
