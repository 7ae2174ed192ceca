"""The composition root: what starts the store, the hub's parts, the hub and its HTTP API, and
stops them (shared by ``serve``, ``up`` and the tests). The parts are chosen here and nowhere
else: the bus, the placer (a scheduling profile), the function service."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable

from aiohttp import web

from edgeplane_contract.urls import mask_url

from controlplane.api.app import create_app
from controlplane.api.auth import AuthSettings
from controlplane.bus.authority import NatsAuthority
from controlplane.bus.hub_bus import HubBus
from controlplane.coordination.fencing import Fence, check_in_transaction, claim_leadership
from controlplane.errors import StartupError
from controlplane.extender.app import RunningExtender, start_extender
from controlplane.extender.settings import ExtenderSettings
from controlplane.federation.config import FederationConfig
from controlplane.hub.framework_placer import FrameworkPlacer
from controlplane.hub.placement import Placer
from controlplane.hub.service import Hub, HubSettings
from controlplane.observe.hub import HubMetrics
from controlplane.policies.profile_canary import restore_profile_in_force
from controlplane.scheduling.instrument import FrameworkRecorder
from controlplane.scheduling.profiles import Profile
from controlplane.scheduling.scheduler import Scheduler
from controlplane.serverless.service import FunctionService, ServerlessSettings
from controlplane.store.secrets import EnvCipher
from controlplane.store.store import Store

__all__ = ["RunningHub", "build_hub", "make_placer", "start_hub"]

log = logging.getLogger("edgeplane.hub")


def make_placer(
    profile: Profile, federation: FederationConfig, recorder: FrameworkRecorder | None = None
) -> Placer:
    """The scheduling framework with ``profile``: the one placement engine of workloads."""
    return FrameworkPlacer(profile, federation, recorder=recorder)


def build_hub(settings: HubSettings, store: Store) -> Hub:
    """A hub wired with its parts, not started."""
    bus = HubBus(
        default_url=settings.nats_url,
        federation=settings.federation,
        hub_id=settings.hub_id,
        command_timeout_s=settings.command_timeout_s,
        seed=settings.nats_seed,
        tls=settings.nats_tls.context() if settings.nats_tls else None,
        check_reply_inbox=settings.require_enrolment,
    )
    serverless = ServerlessSettings(policy=settings.function_policy)
    metrics = HubMetrics()  # this hub's own registry (several hubs may share a process)
    placer = make_placer(settings.scheduler, settings.federation, metrics.scheduler)
    if settings.placement_model is not None:
        from controlplane.learn.chooser import LearnedChooser

        # The live hub never defers: a replica the model would hold back is placed on its best
        # candidate (a deferred one would wait for the next round with nothing learned).
        chooser = LearnedChooser(
            settings.placement_model, allow_defer=False, on_decision=metrics.placement_model_decisions.inc
        )
        chooser.attach(placer.scheduler)  # type: ignore[attr-defined]
        log.info("placement model %s picks among the scheduler's candidates", settings.placement_model)
    return Hub(
        settings,
        store,
        bus=bus,
        placer=placer,
        functions=lambda host: FunctionService(host, serverless, on_outcome=metrics.functions.observe),
        metrics=metrics,
    )


class RunningHub:
    """A started hub + API site; ``await stop()`` tears both down."""

    def __init__(
        self, hub: Hub, runner: web.AppRunner, url: str, extender: RunningExtender | None = None
    ) -> None:
        self.hub = hub
        self.runner = runner
        self.url = url
        self.extender = extender
        """The Kubernetes scheduler extender's listener, when asked for."""
        self.fence: Fence | None = None
        """The leadership generation it claimed (``start_hub(lead_as=...)``), else None."""

    async def stop(self) -> None:
        if self.extender is not None:
            await self.extender.stop()
        await self.runner.cleanup()
        await self.hub.stop()
        await self.hub.store.close()


async def start_hub(
    settings: HubSettings,
    *,
    database_url: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    hub_factory: Callable[[HubSettings, Store], Hub] = build_hub,
    auth: AuthSettings | None = None,
    ssl_context: ssl.SSLContext | None = None,
    nats_authority: NatsAuthority | None = None,
    extender: ExtenderSettings | None = None,
    env_cipher: EnvCipher | None = None,
    lead_as: str | None = None,
) -> RunningHub:
    """Open the store, start the hub, serve its API. ``nats_authority``: enrolment is possible
    (``POST /v1/join``) and the NATS server's user list follows the store's node credentials.
    ``extender``: also serve the Kubernetes scheduler extender on its own listener.
    ``env_cipher``: seal workloads' and functions' ``env`` values at rest (store/secrets.py).
    ``lead_as``: the API address other replicas forward to; given, the hub claims the store's
    next leadership generation before it acts and every write it commits is fenced by it
    (``coordination/fencing.py``; a shared PostgreSQL store: the caller holds the hub lease), and
    ``RunningHub.fence`` says when another hub has taken over."""
    try:
        store = await Store.open(database_url, env_cipher=env_cipher)
    except Exception as exc:  # a bad URL, an unreachable server, a failed migration
        raise StartupError(f"cannot open the store at {mask_url(database_url)}: {_reason(exc)}") from exc
    fence: Fence | None = None
    if lead_as is not None:
        try:
            fence = await claim_leadership(store.engine, hub_id=settings.hub_id, api_url=lead_as)
        except Exception as exc:
            await store.close()
            raise StartupError(f"cannot take the store's leadership: {_reason(exc)}") from exc
        claimed = fence
        store.commit_check = lambda session: check_in_transaction(session, claimed)
    hub = hub_factory(settings, store)
    try:
        if isinstance(hub.placer, FrameworkPlacer):  # a promotion outlives the hub that made it
            await restore_profile_in_force(store, hub.placer)
        await hub.start()
    except BaseException:
        await hub.stop()
        await store.close()
        raise
    # The API's own middleware writes the access log (with the principal), so aiohttp's is off.
    runner = web.AppRunner(create_app(hub, auth=auth, nats_authority=nats_authority), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await hub.stop()
        await store.close()
        raise StartupError(f"cannot serve the API on {host}:{port}: {exc.strerror or exc}") from exc
    server = getattr(site, "_server", None)
    bound = server.sockets[0].getsockname()[1] if server and server.sockets else port
    scheme = "https" if ssl_context is not None else "http"
    running = RunningHub(hub, runner, f"{scheme}://{host}:{bound}")
    running.fence = fence
    if extender is not None:
        try:
            running.extender = await start_extender(extender, _scheduler_of(hub))
        except BaseException:
            await running.stop()
            raise
    return running


def _scheduler_of(hub: Hub) -> Scheduler:
    """The scheduler the extender reads: the placer's (make_placer builds a FrameworkPlacer)."""
    if not isinstance(hub.placer, FrameworkPlacer):
        raise StartupError("the scheduler extender needs the scheduling framework's placer")
    return hub.placer.scheduler


def _reason(exc: BaseException) -> str:
    """The first line of an error, with its type where the message alone says little."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def stop_on_signal(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM."""
    import signal

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def wait_for_signal(stop: asyncio.Event) -> None:
    stop_on_signal(stop)
    await stop.wait()
