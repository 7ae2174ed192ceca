"""``controlplane agent-token create --cluster C [--ttl 1h]``: a single-use join token for one node.

Works on the store directly (like ``controlplane token``), beside a running hub. The token is
printed once; the store keeps its hash. On the node: ``edge-agent run --join TOKEN --hub URL
--name N``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from controlplane.commands.common import add_store_arguments, chosen_cluster, database_url

__all__ = ["configure", "run"]

DEFAULT_TTL = "1h"


def configure(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    create = verbs.add_parser("create", help="create a join token and print it once")
    create.add_argument("--cluster", help="the cluster the node joins (default: the federation's default)")
    create.add_argument("--ttl", default=DEFAULT_TTL, help=f"lifetime, e.g. 10m, 1h (default {DEFAULT_TTL})")
    add_store_arguments(parser, create)


def run(args: argparse.Namespace) -> int:
    from controlplane.auth.tokens import parse_ttl
    from controlplane.errors import ConfigError

    try:
        cluster = chosen_cluster(args).name
    except ConfigError as exc:
        print(f"controlplane agent-token: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        ttl = parse_ttl(args.ttl)
    except ValueError as exc:
        print(f"controlplane agent-token: --ttl: {exc}", file=sys.stderr)
        return 2
    if ttl is None:
        print("controlplane agent-token: --ttl: join tokens always expire", file=sys.stderr)
        return 2
    return asyncio.run(_create(args, cluster, ttl))


async def _create(args: argparse.Namespace, cluster: str, ttl: float) -> int:
    from controlplane.store.identities import IdentityStore
    from controlplane.store.store import Store

    store = await Store.open(database_url(args))
    try:
        new = await IdentityStore(store).create_join_token(cluster, ttl)
    finally:
        await store.close()
    expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(new.expires_at or 0))
    print(new.token)
    print(
        f"# single use, cluster {cluster}, expires {expiry}; on the node: "
        "edge-agent run --join TOKEN --hub HUB_URL --name NODE",
        file=sys.stderr,
    )
    return 0
