"""``controlplane agent-credentials create --name N --cluster C --out FILE``: enrolment offline.

For a node that cannot reach the hub's API: the seed is made here (so it must travel to the node
over a channel you trust, and nowhere else), its public key is recorded in the store, and a
running hub admits the node within seconds (an external NATS server: once its operator applies
``controlplane nats-config``). On the node: ``edge-agent run --credentials FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from controlplane.commands.common import add_store_arguments, chosen_cluster, existing_store_url

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    create = verbs.add_parser("create", help="enrol a node and write its credentials file (0600)")
    create.add_argument("--name", required=True, help="the node's name")
    create.add_argument("--cluster", help="its cluster (default: the federation's default)")
    create.add_argument("--out", required=True, help="the credentials file to write (must not exist)")
    create.add_argument(
        "--nats", help="NATS URL written into the file (default: the cluster's nats_url; else give --nats)"
    )
    add_store_arguments(parser, create)


def run(args: argparse.Namespace) -> int:
    from edgeplane_contract.messages import valid_token

    from controlplane.errors import ConfigError

    prog = "controlplane agent-credentials"
    try:
        config = chosen_cluster(args)
    except ConfigError as exc:
        print(f"{prog}: configuration error: {exc}", file=sys.stderr)
        return 2
    cluster = config.name
    if not valid_token(args.name):
        print(f"{prog}: --name: must match [A-Za-z0-9_-]{{1,63}}, got {args.name!r}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists():
        print(f"{prog}: --out: {out} exists; remove it first", file=sys.stderr)
        return 2
    url = existing_store_url(args, prog=prog)
    if url is None:
        return 2
    nats_url = args.nats or config.nats_url or ""
    return asyncio.run(_create(url, args, cluster, config.subject_prefix, nats_url, out))


async def _create(
    url: str, args: argparse.Namespace, cluster: str, prefix: str, nats_url: str, out: Path
) -> int:
    from edgeplane_contract.credentials import new_user_seed, public_key_of
    from edgeplane_contract.enrolment import AgentCredentials

    from controlplane.bus.nats_auth import agent_inbox_prefix
    from controlplane.store.identities import IdentityStore, JoinRefused
    from controlplane.store.store import Store

    seed = new_user_seed()
    store = await Store.open(url)
    try:
        identities = IdentityStore(store)
        # The same path as a join: a token made and used at once, so the store records it alike.
        token = await identities.create_join_token(cluster, 60.0)
        await identities.redeem_join_token(token.token, node=args.name, public_key=public_key_of(seed))
    except JoinRefused as exc:
        print(f"controlplane agent-credentials: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    AgentCredentials(
        node=args.name,
        cluster=cluster,
        seed=seed,
        nats_url=nats_url,
        subject_prefix=prefix,
        inbox_prefix=agent_inbox_prefix(cluster, args.name),
    ).save(out)
    print(
        f"wrote {out} (0600) for node {args.name} in cluster {cluster}; on the node: "
        f"edge-agent run --credentials {out.name}" + ("" if nats_url else " --nats URL")
    )
    return 0
