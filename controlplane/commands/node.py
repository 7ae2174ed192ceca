"""``controlplane node rekey NAME`` and ``controlplane node approve-capacity NAME``: admin acts on a
node's identity.

Both work on the store directly (like ``controlplane agent-token``), beside a running hub, which
applies the change within seconds (its NATS sync loop; its next registration check).

- ``rekey`` revokes the node's key (the NATS server then drops and refuses it) and prints a
  single-use join token bound to that name: the only way to give an enrolled node a new key (a
  plain join token is refused for an enrolled name). Audited as ``NodeRekeyed``. The new key's
  first registration records the capacity it may claim.
- ``approve-capacity`` forgets the capacity the node's key admits, so that its next registration
  (more CPUs, memory or GPUs than at its first) is accepted and recorded as the new bound.
  Audited as ``NodeCapacityApproved``.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
import time

from controlplane.commands.common import add_store_arguments, existing_store_url, join_token_ttl

__all__ = ["configure", "run"]

DEFAULT_TTL = "1h"
PROG = "controlplane node"


def configure(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    rekey = verbs.add_parser(
        "rekey", help="revoke a node's key and print a join token bound to it (printed once)"
    )
    rekey.add_argument("name", help="the node's name")
    rekey.add_argument("--ttl", default=DEFAULT_TTL, help=f"the token's lifetime (default {DEFAULT_TTL})")
    approve = verbs.add_parser(
        "approve-capacity", help="let a node's next registration claim more than its first did"
    )
    approve.add_argument("name", help="the node's name")
    add_store_arguments(parser, rekey, approve, federation=False)


def run(args: argparse.Namespace) -> int:
    from edgeplane_contract.messages import valid_token

    if not valid_token(args.name):
        print(f"{PROG}: NAME: must match [A-Za-z0-9_-]{{1,63}}, got {args.name!r}", file=sys.stderr)
        return 2
    url = existing_store_url(args, prog=f"{PROG} {args.verb}")
    if url is None:
        return 2
    if args.verb == "approve-capacity":
        return asyncio.run(_approve(url, args))
    ttl = join_token_ttl(args.ttl, prog=f"{PROG} rekey")
    if ttl is None:
        return 2
    return asyncio.run(_rekey(url, args, ttl))


def _admin() -> str:
    """Who ran the command, for the audit event (the store has no principal for the CLI)."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


async def _rekey(url: str, args: argparse.Namespace, ttl: float) -> int:
    from controlplane.store.identities import IdentityStore, NotEnrolled
    from controlplane.store.store import Store

    store = await Store.open(url)
    try:
        new = await IdentityStore(store).rekey_node(args.name, ttl_s=ttl, by=_admin())
    except NotEnrolled as exc:
        print(
            f"{PROG} rekey: {exc}; use 'controlplane agent-token create --node {args.name}'", file=sys.stderr
        )
        return 1
    finally:
        await store.close()
    expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(new.expires_at or 0))
    print(new.token)
    print(
        f"# node {args.name}'s key is revoked; this token enrols a new one (single use, that name "
        f"only, expires {expiry}); on the node: edge-agent run --join TOKEN --hub HUB_URL --name {args.name}",
        file=sys.stderr,
    )
    return 0


async def _approve(url: str, args: argparse.Namespace) -> int:
    from controlplane.store.identities import IdentityStore, NotEnrolled
    from controlplane.store.store import Store

    store = await Store.open(url)
    try:
        previous = await IdentityStore(store).approve_capacity(args.name, by=_admin())
    except NotEnrolled as exc:
        print(f"{PROG} approve-capacity: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    print(
        f"node {args.name}: capacity {previous or 'not recorded yet'} forgotten; "
        "its next registration records the new one"
    )
    return 0
