"""Serverless routes: register, inspect and invoke functions; poll asynchronous invocations."""

from __future__ import annotations

import json

from aiohttp import web

from controlplane.api.auth import principal_of
from controlplane.api.idempotency import caller_key
from controlplane.api.keys import HUB
from controlplane.api.params import ASYNC, INVOKE_IDEMPOTENCY_KEY, VERSION
from controlplane.api.redact import redact
from controlplane.api.request import check_clusters, json_body
from controlplane.api.views import Deleted, Function, FunctionList, Invocation, Queued, to_json
from controlplane.errors import ConflictError, InvocationFailedError, NotFoundError
from controlplane.serverless.service import InvocationOutcome
from controlplane.serverless.spec import FunctionSpec
from controlplane.store.models import InvocationRow

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.post("/v1/functions")
async def register_function(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    spec = FunctionSpec.parse(await json_body(request))
    check_clusters(hub.federation, spec.affinity.clusters)
    stored, created = await hub.functions.register(spec)
    body = redact(to_json(Function.of(hub.functions, stored.name)), principal_of(request))
    return web.json_response(body, status=201 if created else 200)


@routes.get("/v1/functions")
async def list_functions(request: web.Request) -> web.Response:
    functions = request.app[HUB].functions
    items = [Function.of(functions, name) for name in sorted(functions.specs) if functions.specs[name]]
    body = to_json(FunctionList(items=items, total=len(items)))
    return web.json_response(redact(body, principal_of(request)))


@routes.get("/v1/functions/{name}")
async def get_function(request: web.Request) -> web.Response:
    body = to_json(Function.of(request.app[HUB].functions, request.match_info["name"]))
    return web.json_response(redact(body, principal_of(request)))


@routes.delete("/v1/functions/{name}")
async def delete_function(request: web.Request) -> web.Response:
    await request.app[HUB].functions.delete(request.match_info["name"])
    return web.json_response(to_json(Deleted(name=request.match_info["name"], deleted=True)))


def _headers(outcome: InvocationOutcome) -> dict[str, str]:
    timings = outcome.timings()
    return {
        "X-Edgeplane-Invocation-Id": outcome.invocation_id,
        "X-Edgeplane-Cold-Start": "true" if outcome.cold_start else "false",
        "X-Edgeplane-Queue-Ms": f"{timings['queue_ms']:.3f}",
        "X-Edgeplane-Cold-Start-Ms": f"{timings['cold_start_ms']:.3f}",
        "X-Edgeplane-Exec-Ms": f"{timings['exec_ms']:.3f}",
        "X-Edgeplane-Total-Ms": f"{timings['total_ms']:.3f}",
        "X-Edgeplane-Node": outcome.node or "",
        "X-Edgeplane-Version": str(outcome.version),
    }


@routes.post("/v1/functions/{name}/invoke")
async def invoke_function(request: web.Request) -> web.Response:
    functions = request.app[HUB].functions
    name = request.match_info["name"]
    version = VERSION.parse(request)
    functions.resolve(name, version)
    event = await json_body(request, optional=True)
    key = caller_key(request, INVOKE_IDEMPOTENCY_KEY)  # scoped: never another caller's result
    if ASYNC.parse(request):
        invocation_id, created = await functions.invoke_async(
            name, event, version=version, idempotency_key=key
        )
        state = "Queued"
        if not created:  # a retry: the first invocation, wherever it is now
            async with request.app[HUB].store.session() as s:
                row = await s.get(InvocationRow, invocation_id)
            state = row.status if row is not None else state
        queued = Queued(invocation_id=invocation_id, status=state, poll=f"/v1/invocations/{invocation_id}")
        return web.json_response(to_json(queued), status=202 if created else 200)
    if key is not None:
        outcome, row = await functions.invoke_once(name, event, version=version, idempotency_key=key)
        if outcome is None:
            return _replay(row)
    else:
        outcome = await functions.invoke(name, event, version=version)
    headers = _headers(outcome)
    if outcome.ok and outcome.result_json is not None:  # checked strict JSON when taken in
        return web.Response(text=outcome.result_json, content_type="application/json", headers=headers)
    if outcome.ok:
        try:
            body = json.dumps(outcome.result, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            # Never answer 200 with something that is not JSON (NaN, Infinity); the service refuses
            # such results already, this is the last line.
            outcome.ok, outcome.error = False, {"code": "bad_result", "message": f"result is not JSON: {exc}"}
        else:
            return web.Response(text=body, content_type="application/json", headers=headers)
    raise InvocationFailedError(outcome.error or {}, invocation_id=outcome.invocation_id, headers=headers)


def _replay(row: InvocationRow) -> web.Response:
    """The answer of a synchronous invocation retried with the same Idempotency-Key: its stored
    result (nothing runs again), or 409 while the first one is still running."""
    headers = {"X-Edgeplane-Invocation-Id": row.id, "X-Edgeplane-Idempotent-Replay": "true"}
    if row.status in ("Queued", "Running"):
        raise ConflictError(
            f"an invocation with this Idempotency-Key is still running; poll /v1/invocations/{row.id}",
            field="Idempotency-Key",
        )
    if row.status == "Succeeded":
        body = json.dumps(row.result.get("value") if row.result else None, allow_nan=False)
        return web.Response(text=body, content_type="application/json", headers=headers)
    raise InvocationFailedError(row.error or {}, invocation_id=row.id, headers=headers)


@routes.get("/v1/invocations/{id}")
async def get_invocation(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    invocation_id = request.match_info["id"]
    async with hub.store.session() as s:
        row = await s.get(InvocationRow, invocation_id)
    if row is None:  # a synchronous one still on its way to the store
        row = hub.functions.history.pending(invocation_id)
    if row is None:
        raise NotFoundError(f"invocation {invocation_id!r} not found", field="id")
    body = to_json(Invocation.of(row))
    # Only the error is the hub's to redact (its traceback); the result is the caller's data.
    body["error"] = redact(body["error"], principal_of(request))
    return web.json_response(body)
