"""``controlplane agent-token create --cluster C [--node N] [--ttl 1h]``: a single-use join token.

Works on the store directly (like ``controlplane token``), beside a running hub. The token is
printed once; the store keeps its hash. It enrols a name that is not enrolled (a live node's key
is replaced only by ``controlplane node rekey``); with ``--node`` it enrols that name only. On the
node: ``edge-agent run --join TOKEN --hub URL --name N``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from controlplane.commands.common import (
    add_store_arguments,
    chosen_cluster,
    existing_store_url,
    join_token_ttl,
)

__all__ = ["configure", "run"]

DEFAULT_TTL = "1h"


def configure(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    create = verbs.add_parser("create", help="create a join token and print it once")
    create.add_argument("--cluster", help="the cluster the node joins (default: the federation's default)")
    create.add_argument("--node", help="the only node name the token may enrol (default: any not enrolled)")
    create.add_argument("--ttl", default=DEFAULT_TTL, help=f"lifetime, e.g. 10m, 1h (default {DEFAULT_TTL})")
    add_store_arguments(parser, create)


def run(args: argparse.Namespace) -> int:
    from edgeplane_contract.messages import valid_token

    from controlplane.errors import ConfigError

    try:
        cluster = chosen_cluster(args).name
    except ConfigError as exc:
        print(f"controlplane agent-token: configuration error: {exc}", file=sys.stderr)
        return 2
    ttl = join_token_ttl(args.ttl, prog="controlplane agent-token")
    if ttl is None:
        return 2
    if args.node is not None and not valid_token(args.node):
        print(
            f"controlplane agent-token: --node: must match [A-Za-z0-9_-]{{1,63}}, got {args.node!r}",
            file=sys.stderr,
        )
        return 2
    url = existing_store_url(args, prog="controlplane agent-token")
    if url is None:
        return 2
    return asyncio.run(_create(url, args, cluster, ttl))


async def _create(url: str, args: argparse.Namespace, cluster: str, ttl: float) -> int:
    from controlplane.store.identities import IdentityStore
    from controlplane.store.store import Store

    store = await Store.open(url)
    try:
        new = await IdentityStore(store).create_join_token(cluster, ttl, node=args.node)
    finally:
        await store.close()
    expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(new.expires_at or 0))
    print(new.token)
    name = args.node or "NODE"
    bound = f", node {args.node} only" if args.node else ""
    print(
        f"# single use, cluster {cluster}{bound}, expires {expiry}; on the node: "
        f"edge-agent run --join TOKEN --hub HUB_URL --name {name}",
        file=sys.stderr,
    )
    return 0
