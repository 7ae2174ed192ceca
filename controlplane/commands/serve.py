"""``controlplane serve``: the hub alone (agents connect over NATS)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from controlplane.commands.common import (
    add_hub_arguments,
    check_function_policy,
    database_url,
    federation_from,
    hub_settings,
    setup_logging,
)

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_hub_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.errors import ConfigError

    setup_logging(args.log_level)
    try:
        federation = federation_from(args)
        check_function_policy(args)
    except ConfigError as exc:
        print(f"controlplane: configuration error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(args, federation))


async def _serve(args: argparse.Namespace, federation: object) -> int:
    from controlplane.federation.config import FederationConfig
    from controlplane.hub.runner import start_hub, wait_for_signal
    from controlplane.natsd import NatsServer

    assert isinstance(federation, FederationConfig)
    nats_server = None
    nats_url = args.nats
    if not nats_url:
        nats_server = NatsServer().start()
        nats_url = nats_server.url
    try:
        settings = hub_settings(args, nats_url, federation)
        running = await start_hub(settings, database_url=database_url(args), host=args.host, port=args.port)
        print(f"edgeplane hub: API {running.url}  NATS {nats_url}", flush=True)
        try:
            await wait_for_signal(asyncio.Event())
        finally:
            await running.stop()
    finally:
        if nats_server is not None:
            nats_server.stop()
    return 0
