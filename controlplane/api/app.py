"""The hub's HTTP API (aiohttp): routes, query parsing, the app factory."""

from __future__ import annotations

from aiohttp import web

from controlplane.api import console, enrol, policies, profiles
from controlplane.api.audit import AuditLog
from controlplane.api.auth import (
    AUDIT,
    AUTH_SETTINGS,
    IDENTITIES,
    RATE_LIMITER,
    AuthSettings,
    RateLimiter,
    access_middleware,
    auth_middleware,
    principal_of,
)
from controlplane.api.errors import error_middleware
from controlplane.api.functions import routes as function_routes
from controlplane.api.idempotency import caller_key
from controlplane.api.keys import HUB
from controlplane.api.logs import routes as log_routes
from controlplane.api.metrics import routes as metrics_routes
from controlplane.api.openapi import openapi_document
from controlplane.api.params import (
    AFTER,
    CLUSTER,
    CONTINUE,
    EVENTS_LIMIT,
    IDEMPOTENCY_KEY,
    KIND,
    NAME,
    NODE,
    NODE_STATUS,
    OBJECT_ID,
    WORKLOAD_STATUS,
    InvalidContinueError,
    page,
)
from controlplane.api.redact import redact
from controlplane.api.request import MAX_BODY, check_clusters, json_body
from controlplane.api.views import (
    Cluster,
    ClusterList,
    Event,
    EventPage,
    Health,
    Interference,
    Liveness,
    Node,
    NodeDecisionLog,
    NodePage,
    PlacementExplanation,
    Readiness,
    Workload,
    WorkloadPage,
    to_json,
)
from controlplane.bus.authority import NatsAuthority
from controlplane.errors import NotFoundError, UnavailableError
from controlplane.hub.service import Hub
from controlplane.policies.decision_logs import ask_node
from controlplane.specs.workload import WorkloadSpec
from controlplane.store.identities import IdentityStore

__all__ = ["HUB", "create_app"]

routes = web.RouteTableDef()


async def _store_ok(hub: Hub) -> bool:
    """The store reads and takes writes (``/healthz`` and ``/readyz`` share this)."""
    try:
        # Reads alone would say ok on a full disk: the store also has to take a write (its last
        # write did not fail, or a small probe write works again).
        return await hub.store.ping() and await hub.store.writable()
    except Exception:
        return False


@routes.get("/livez")
async def livez(request: web.Request) -> web.Response:
    # Liveness only: no store or bus call, so that a NATS or database outage (readiness) never
    # makes Kubernetes restart a hub that would recover by itself once they are back.
    return web.json_response(to_json(Liveness(status="ok")))


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    parts = {"database": await _store_ok(hub), "nats": hub.bus.connected, "hub": hub.started}
    down = [name for name, ok in parts.items() if not ok]
    ready = Readiness(
        status="unavailable" if down else "ok",
        database=parts["database"],
        nats=parts["nats"],
        hub=parts["hub"],
        down=down,
    )
    return web.json_response(to_json(ready), status=503 if down else 200)


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    db_ok = await _store_ok(hub)
    nats_ok = hub.bus.connected
    ok = db_ok and nats_ok and hub.started
    health = Health(
        status="ok" if ok else "degraded",
        database=db_ok,
        nats=nats_ok,
        hub_id=hub.settings.hub_id,
        malformed_messages=dict(hub.bus.malformed),
        rejected_messages=dict(hub.bus.rejected),
    )
    return web.json_response(to_json(health), status=200 if ok else 503)


@routes.get("/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


@routes.get("/v1/clusters")
async def list_clusters(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    counts = await hub.store.count_nodes_by_cluster()
    items = [Cluster.of(row, counts.get(row.name, {})) for row in await hub.store.list_clusters()]
    return web.json_response(to_json(ClusterList(items=items, total=len(items))))


def _region(hub: Hub, cluster: str) -> str:
    config = hub.federation.cluster(cluster)
    return config.region if config else ""


def _policy_version(hub: Hub, name: str) -> int | None:
    live = hub.nodes.get(name)
    return live.policy_version if live is not None else None


@routes.get("/v1/nodes")
async def list_nodes(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    limit, offset = page(request)
    status = NODE_STATUS.parse(request)
    rows, total = await hub.store.list_nodes(
        cluster=CLUSTER.parse(request), status=status, limit=limit, offset=offset
    )
    revoked = await request.app[IDENTITIES].revoked_among([r.name for r in rows])
    items = [
        Node.of(
            r,
            region=_region(hub, r.cluster),
            allocated=hub.allocated(r.name),
            revoked=r.name in revoked,
            policy_version=_policy_version(hub, r.name),
        )
        for r in rows
    ]
    return web.json_response(to_json(NodePage(items=items, total=total, limit=limit, offset=offset)))


@routes.get("/v1/nodes/{name}")
async def get_node(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    name = request.match_info["name"]
    row = await hub.store.get_node(name)
    if row is None:
        raise NotFoundError(f"node {name!r} not found", field="name")
    revoked = name in await request.app[IDENTITIES].revoked_among([name])
    node = Node.of(
        row,
        region=_region(hub, row.cluster),
        allocated=hub.allocated(name),
        revoked=revoked,
        policy_version=_policy_version(hub, name),
    )
    return web.json_response(to_json(node))


@routes.get("/v1/nodes/{name}/decisions")
async def node_decisions(request: web.Request) -> web.Response:
    """The node's local-policy decision log, for retraining (rewards Laplace-noised on the node)."""
    hub = request.app[HUB]
    name = request.match_info["name"]
    live = hub.nodes.get(name)
    if live is None:
        raise NotFoundError(f"node {name!r} not found", field="name")
    # Checked as POST /v1/decision-logs checks each node's answer: a malformed one (or one that
    # names another node) is counted and never handed to the caller.
    answer = await ask_node(hub, name)
    if isinstance(answer, str):
        raise UnavailableError(f"node {name}: {answer}")
    view = NodeDecisionLog(answer.node, answer.epsilon, answer.truncated, answer.entries)
    return web.json_response(to_json(view))


@routes.post("/v1/workloads")
async def create_workload(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    spec = WorkloadSpec.parse(await json_body(request))
    check_clusters(hub.federation, spec.affinity.clusters)
    key = caller_key(request, IDEMPOTENCY_KEY)  # scoped to the caller: never another's workload
    workload_id, created = await hub.create_workload(spec, idempotency_key=key)
    if created is not None:  # new: as stored, Pending with no placement yet (no second read)
        return web.json_response(redact(to_json(Workload.of(created, [])), principal_of(request)), status=201)
    found = await hub.store.get_workload(workload_id)  # an earlier POST's, as it is now
    assert found is not None
    return web.json_response(redact(to_json(Workload.of(*found)), principal_of(request)), status=200)


@routes.get("/v1/workloads")
async def list_workloads(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    limit, offset = page(request)
    after = CONTINUE.parse(request)
    if after is not None and offset:
        raise InvalidContinueError("cannot be combined with offset (the token says where)", field="continue")
    # One more than the page: whether a next page exists (its token), without another count.
    rows, total = await hub.store.list_workloads(
        status=WORKLOAD_STATUS.parse(request),
        name=NAME.parse(request),
        node=NODE.parse(request),
        cluster=CLUSTER.parse(request),
        limit=limit + 1,
        offset=offset,
        after=after,
    )
    more, rows = len(rows) > limit, rows[:limit]
    token = CONTINUE.token(rows[-1].created_at, rows[-1].id) if more else None
    placements = await hub.store.placements_for([r.id for r in rows])
    items = [Workload.of(r, placements.get(r.id, [])) for r in rows]
    body = to_json(WorkloadPage(items=items, total=total, limit=limit, offset=offset, continue_=token))
    return web.json_response(redact(body, principal_of(request)))


async def _workload_or_404(request: web.Request, workload_id: str) -> web.Response:
    found = await request.app[HUB].store.get_workload(workload_id)
    if found is None:
        raise NotFoundError(f"workload {workload_id!r} not found", field="id")
    return web.json_response(redact(to_json(Workload.of(*found)), principal_of(request)))


@routes.get("/v1/workloads/{id}")
async def get_workload(request: web.Request) -> web.Response:
    return await _workload_or_404(request, request.match_info["id"])


@routes.get("/v1/workloads/{id}/placement")
async def get_placement(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    workload_id = request.match_info["id"]
    found = await hub.store.get_workload(workload_id)
    if found is None:
        raise NotFoundError(f"workload {workload_id!r} not found", field="id")
    return web.json_response(to_json(PlacementExplanation.of(*found)))


@routes.delete("/v1/workloads/{id}")
async def delete_workload(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    workload_id = request.match_info["id"]
    await hub.cancel_workload(workload_id)
    found = await hub.store.get_workload(workload_id)
    assert found is not None
    return web.json_response(redact(to_json(Workload.of(*found)), principal_of(request)), status=202)


@routes.get("/v1/events")
async def list_events(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    limit = EVENTS_LIMIT.parse(request)
    after = AFTER.parse(request)
    assert limit is not None and after is not None  # both have defaults
    await request.app[AUDIT].written()  # the calls made so far are in the list
    rows = await hub.store.list_events(
        after_id=after, kind=KIND.parse(request), object_id=OBJECT_ID.parse(request), limit=limit
    )
    items = [Event.of(r) for r in rows]
    page = EventPage(items=items, next_after=items[-1].id if items else after, limit=limit)
    return web.json_response(to_json(page))


@routes.get("/v1/scheduler/interference")
async def interference(request: web.Request) -> web.Response:
    """What the scheduler learned of interference from the agents' observed runtimes."""
    learning = request.app[HUB].learning
    return web.json_response(
        to_json(Interference.of(learning.estimate(), learning.outcomes, learning.risk()))
    )


async def _close_audit(app: web.Application) -> None:
    await app[AUDIT].close()  # what is queued is written before the store closes


def create_app(
    hub: Hub, *, auth: AuthSettings | None = None, nats_authority: NatsAuthority | None = None
) -> web.Application:
    """The API application for a started (or starting) hub; every route but the public ones
    (``auth.PUBLIC_ROUTES``, listed in docs/security.md) needs a token."""
    auth = auth or AuthSettings()
    app = web.Application(
        middlewares=[access_middleware, error_middleware, auth_middleware], client_max_size=MAX_BODY
    )
    app[HUB] = hub
    app[IDENTITIES] = IdentityStore(hub.store)
    app[AUDIT] = AuditLog(hub.store)
    app.on_cleanup.append(_close_audit)
    app[AUTH_SETTINGS] = auth
    app[RATE_LIMITER] = RateLimiter(rate_per_s=auth.rate_per_s, burst=auth.burst)
    app.add_routes(routes)
    app.add_routes(function_routes)
    app.add_routes(metrics_routes)
    app.add_routes(log_routes)
    policies.setup(app, hub)
    profiles.setup(app, hub)
    app.add_routes(console.routes)  # the web console: public static files
    enrol.setup(app, nats_authority)
    return app
