"""The hub's scheduling profile (``/v1/scheduling-profiles``): the one in force, and a change of
it rolled out as a canary that the anomaly-score controller promotes or reverts
(controlplane/policies/profile_canary.py)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from controlplane.api.auth import principal_of
from controlplane.api.request import json_body
from controlplane.api.views import ProfileCanaryStatus, SchedulingProfile, to_json
from controlplane.errors import NotFoundError
from controlplane.hub.service import Hub
from controlplane.policies.profile_canary import (
    PROFILE_CANARY,
    ProfileCanaries,
    ProfileCanaryCollector,
    ProfilePlacer,
)

__all__ = ["PROFILE_CANARIES", "routes", "setup"]

PROFILE_CANARIES = web.AppKey("profile_canaries", ProfileCanaries)

routes = web.RouteTableDef()
log = logging.getLogger("edgeplane.hub.policy")


def setup(app: web.Application, hub: Hub) -> None:
    """The routes, and the canaries' keeper for the app's lifetime (a running one stops with it)."""
    found = getattr(hub, "placer", None)  # a stand-in hub (tests of the routes alone) has none
    placer: ProfilePlacer | None = found if hasattr(found, "use_profile") else None
    # The placement outcomes reach a canary only while it runs (the hub skips the work of
    # measuring them while nobody listens).
    outcomes = getattr(hub, "placement_outcome_listeners", None)
    canaries = ProfileCanaries(
        placer, hub.store, getattr(hub, "wake", lambda: None), outcome_listeners=outcomes
    )
    placing = getattr(hub, "placing", None)
    if placing is not None:
        placing.placed_listeners.append(_placed(canaries))
    app[PROFILE_CANARIES] = canaries
    app.add_routes(routes)

    async def lifetime(_app: web.Application) -> AsyncIterator[None]:
        collector = ProfileCanaryCollector(canaries)
        metrics = getattr(hub, "metrics", None)
        if metrics is not None:
            metrics.registry.register(collector)
        try:  # a canary the previous leader (or this hub before its restart) was running
            await canaries.resume()
        except Exception as exc:  # the store away: it stays as it was, resumed at the next start
            log.warning("a running scheduling profile canary could not be resumed: %s", exc)
        yield
        await canaries.stop()
        if metrics is not None:
            metrics.registry.unregister(collector)

    app.cleanup_ctx.append(lifetime)


def _placed(canaries: ProfileCanaries) -> Callable[[str, float], None]:
    def placed(workload_id: str, delay_s: float) -> None:
        if canaries.running() and canaries.last is not None:
            canaries.last.observe_placed(workload_id, delay_s)

    return placed


@routes.get("/v1/scheduling-profiles/current")
async def current_profile(request: web.Request) -> web.Response:
    canaries = request.app[PROFILE_CANARIES]
    if canaries.placer is None:
        raise NotFoundError("this hub's placer has no scheduling profile", field="profile")
    profile = canaries.placer.current_profile
    running = canaries.last.candidate.name if canaries.running() and canaries.last is not None else None
    origin = "started" if profile is canaries.placer.base_profile else "promoted"
    return web.json_response(to_json(SchedulingProfile(profile.name, profile.to_dict(), running, origin)))


@routes.post("/v1/scheduling-profiles/canary")
async def start_profile_canary(request: web.Request) -> web.Response:
    body = PROFILE_CANARY.parse(await json_body(request))
    principal = principal_of(request)
    canary = await request.app[PROFILE_CANARIES].start(body, by=principal.name if principal else "-")
    return web.json_response(to_json(ProfileCanaryStatus.of(canary.describe())), status=201)


@routes.get("/v1/scheduling-profiles/canary")
async def get_profile_canary(request: web.Request) -> web.Response:
    described = await request.app[PROFILE_CANARIES].describe()
    return web.json_response(to_json(ProfileCanaryStatus.of(described)))
