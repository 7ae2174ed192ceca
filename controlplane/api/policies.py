"""Versioned local policies: upload, list, read (``/v1/policies``)."""

from __future__ import annotations

from aiohttp import web

from controlplane.api.auth import principal_of
from controlplane.api.request import json_body
from controlplane.api.views import Policy, PolicyList, to_json
from controlplane.errors import ValidationError
from controlplane.policies.registry import PolicyRegistry
from controlplane.policies.upload import POLICY_UPLOAD

__all__ = ["POLICIES", "routes"]

POLICIES = web.AppKey("policies", PolicyRegistry)

routes = web.RouteTableDef()


def _version(request: web.Request) -> int:
    text = request.match_info["version"].removeprefix("v")
    if not text.isdigit() or not 0 < int(text) < 2**31:
        raise ValidationError("must be a policy version number (e.g. 3 or v3)", field="version")
    return int(text)


@routes.post("/v1/policies")
async def upload_policy(request: web.Request) -> web.Response:
    upload = POLICY_UPLOAD.parse(await json_body(request))
    principal = principal_of(request)
    registered = await request.app[POLICIES].register(
        upload, created_by=principal.name if principal is not None else "anonymous"
    )
    return web.json_response(to_json(Policy.of(registered.row)), status=201 if registered.created else 200)


@routes.get("/v1/policies")
async def list_policies(request: web.Request) -> web.Response:
    rows = await request.app[POLICIES].list()
    items = [Policy.of(row) for row in rows]
    return web.json_response(to_json(PolicyList(items=items, total=len(items))))


@routes.get("/v1/policies/{version}")
async def get_policy(request: web.Request) -> web.Response:
    row = await request.app[POLICIES].get(_version(request))
    return web.json_response(to_json(Policy.of(row)))
