"""``controlplane serve``: the hub alone (agents connect over NATS)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ssl
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controlplane.commands.common import (
    NatsSetup,
    add_hub_arguments,
    advertised_url,
    api_auth,
    api_ssl_context,
    check_function_policy,
    database_url,
    ensure_admin_token,
    env_cipher,
    federation_from,
    hub_settings,
    mask_url,
    nats_setup,
    setup_logging,
    start_embedded_nats,
    stop_when,
)
from controlplane.commands.data_dir import private_data_dir
from controlplane.coordination.forwarded import KEY_LABEL as FORWARD_KEY_LABEL

if TYPE_CHECKING:
    from controlplane.api.auth import AuthSettings
    from controlplane.coordination.hub_lease import HubLease
    from controlplane.extender.settings import ExtenderSettings
    from controlplane.federation.config import FederationConfig
    from controlplane.store.secrets import EnvCipher

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_hub_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.errors import ConfigError
    from controlplane.extender.settings import extender_settings

    setup_logging(args.log_level)
    try:
        federation = federation_from(args)
        check_function_policy(args)
        auth = api_auth(args)
        ssl_context = api_ssl_context(args)
        extender = extender_settings(args)
        # Private before anything is written there: umask 077, old files' modes fixed.
        data_dir = private_data_dir(Path(args.data_dir))
        cipher = env_cipher(args, data_dir)
        # Replicas share the secrets key, so each can sign (and check) whom a standby forwards for.
        auth = replace(auth, forward_key=cipher.derive(FORWARD_KEY_LABEL))
        nats = nats_setup(args, data_dir, federation)
    except ConfigError as exc:
        print(f"controlplane: configuration error: {exc}", file=sys.stderr)
        return 2
    from edgeplane_contract.transport import NatsUnavailableError

    from controlplane.errors import StartupError

    try:
        return asyncio.run(_serve(args, federation, auth, ssl_context, nats, extender, cipher))
    except (NatsUnavailableError, StartupError) as exc:  # NATS, the store or the port: one line
        print(f"controlplane: {exc}", file=sys.stderr)
        return 1


async def _serve(
    args: argparse.Namespace,
    federation: object,
    auth: AuthSettings,
    ssl_context: ssl.SSLContext | None,
    nats: NatsSetup,
    extender: ExtenderSettings | None,
    cipher: EnvCipher,
) -> int:
    from aiohttp import web

    from controlplane.coordination.hub_lease import held_hub_lease
    from controlplane.coordination.standby_site import start_standby_site
    from controlplane.federation.config import FederationConfig

    assert isinstance(federation, FederationConfig)
    # One active hub per store: refused at once on SQLite, a standby on PostgreSQL that forwards
    # the API to the leading hub until it takes over.
    standby: list[web.AppRunner] = []
    engines: list[Any] = []

    async def answer_as_standby() -> None:  # alive (/livez), not ready, the API forwarded
        from controlplane.coordination.fencing import current_leader
        from controlplane.store.db import create_engine

        engine = create_engine(database_url(args))
        engines.append(engine)

        async def leader() -> str | None:
            found = await current_leader(engine)
            return found.api_url if found is not None else None

        standby.append(
            await start_standby_site(
                args.host,
                args.port,
                ssl_context,
                leader=leader,
                client_ssl=_leader_ssl(args),
                forward_key=auth.forward_key,
            )
        )

    async def close_standby() -> None:
        for site in standby:
            await site.cleanup()
        standby.clear()
        for engine in engines:
            await engine.dispose()
        engines.clear()

    await _check_secrets_key(database_url(args), cipher)
    try:
        async with held_hub_lease(
            database_url(args), stale_s=args.hub_lease_s, on_standby=answer_as_standby
        ) as lease:
            await close_standby()
            return await _serve_with_lease(args, federation, auth, ssl_context, nats, extender, cipher, lease)
    finally:
        await close_standby()


async def _check_secrets_key(url: str, cipher: EnvCipher) -> None:
    """On a shared (PostgreSQL) store, fail at start, not at a takeover hours later, when this
    replica's secrets key cannot open what the others sealed (replicas share one key)."""
    if not url.startswith("postgres"):
        return
    from controlplane.errors import StartupError
    from controlplane.store.secrets import SecretsKeyError
    from controlplane.store.store import Store

    try:
        store = await Store.open(url, run_migrations=False, env_cipher=cipher)
    except SecretsKeyError as exc:
        why = f"{exc} (every hub replica needs the same --secrets-key)"
        raise StartupError(f"cannot open the store at {mask_url(url)}: {why}") from exc
    except Exception:  # a fresh store (no tables yet) or one away: the lease will say what is wrong
        return
    await store.close()


def _leader_ssl(args: argparse.Namespace) -> ssl.SSLContext | None:
    """How a standby checks an https leader: the system's CAs and this replica's own certificate
    (replicas usually share one; a private CA goes in the system store or SSL_CERT_FILE)."""
    if not args.tls_cert:
        return None
    context = ssl.create_default_context()
    with contextlib.suppress(OSError, ssl.SSLError):
        context.load_verify_locations(cafile=args.tls_cert)
    return context


async def _serve_with_lease(
    args: argparse.Namespace,
    federation: FederationConfig,
    auth: AuthSettings,
    ssl_context: ssl.SSLContext | None,
    nats: NatsSetup,
    extender: ExtenderSettings | None,
    cipher: EnvCipher,
    lease: HubLease,
) -> int:
    from controlplane.runtime.runner import start_hub, stop_on_signal

    nats_server = start_embedded_nats(nats)
    nats_url = nats.url
    try:
        settings = hub_settings(args, nats_url, federation, nats)
        running = await start_hub(
            settings,
            database_url=database_url(args),
            host=args.host,
            port=args.port,
            auth=auth,
            ssl_context=ssl_context,
            nats_authority=nats.authority,
            extender=extender,
            env_cipher=cipher,
            lead_as=advertised_url(args, ssl_context) if lease.kind == "postgresql" else None,
        )
        running.hub.fence = lease.confirm
        if nats.authority is not None:  # nodes enrolled before this start
            await nats.authority.apply(running.hub.identities.node_credentials)
        token_file, token_created = await ensure_admin_token(running.hub.store, Path(args.data_dir))
        made = "new admin token in" if token_created else "admin token in"
        print(
            f"edgeplane hub: API {running.url}  NATS {mask_url(nats_url)}  {made} {token_file}",
            flush=True,
        )
        if running.extender is not None:
            print(f"  Kubernetes scheduler extender {running.extender.url} (filter, prioritize)", flush=True)
        stop = asyncio.Event()
        stop_on_signal(stop)
        lease.stop_when_lost(stop)
        fenced = running.fence.fenced if running.fence is not None else asyncio.Event()
        watch = asyncio.create_task(stop_when(fenced, stop))
        try:
            await stop.wait()
        finally:
            watch.cancel()
            await running.stop()
    finally:
        if nats_server is not None:
            nats_server.stop()
    if fenced.is_set():
        print(
            "controlplane: another hub leads the store now (this hub was fenced): this hub stops", flush=True
        )
    return 1 if lease.lost.is_set() or fenced.is_set() else 0
