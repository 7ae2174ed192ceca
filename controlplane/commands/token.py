"""``controlplane token create|list|revoke``: API bearer tokens, on the store directly.

Works beside a running hub (same database): a created token is valid at once, a revoked one is
refused from the next request on. The token is printed once; the store keeps only its hash.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from controlplane.commands.common import add_store_arguments, existing_store_url

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    create = verbs.add_parser("create", help="create a token and print it once")
    create.add_argument("--name", required=True, help="who or what uses it (shown in the audit log)")
    create.add_argument(
        "--scope",
        required=True,
        help="comma-separated scopes: read, workloads, functions, nodes, admin (admin implies all)",
    )
    create.add_argument("--ttl", help="lifetime, e.g. 30m, 12h, 7d (default: no expiry)")
    verbs.add_parser("list", help="list tokens (never the tokens themselves)").add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="table (default) or json"
    )
    revoke = verbs.add_parser("revoke", help="revoke a token by id, or every token of a name")
    revoke.add_argument("token", metavar="ID_OR_NAME")
    listing = verbs.choices["list"]
    add_store_arguments(parser, create, listing, revoke, federation=False)


def run(args: argparse.Namespace) -> int:
    from controlplane.auth.tokens import parse_scopes, parse_ttl

    url = existing_store_url(args, prog="controlplane token")
    if url is None:
        return 2
    if args.verb == "create":
        try:
            scopes = parse_scopes(args.scope)
            ttl = parse_ttl(args.ttl)
        except ValueError as exc:
            print(f"controlplane token: {exc}", file=sys.stderr)
            return 2
        if not 0 < len(args.name) <= 63:
            print("controlplane token: --name must be 1-63 characters", file=sys.stderr)
            return 2
        return asyncio.run(_create(url, args, scopes, ttl))
    if args.verb == "list":
        return asyncio.run(_list(url, args))
    return asyncio.run(_revoke(url, args))


async def _identities(url: str):  # type: ignore[no-untyped-def]
    from controlplane.store.identities import IdentityStore
    from controlplane.store.store import Store

    return IdentityStore(await Store.open(url))


async def _create(url: str, args: argparse.Namespace, scopes: list[str], ttl: float | None) -> int:
    identities = await _identities(url)
    try:
        new = await identities.create_api_token(args.name, scopes, ttl)
    finally:
        await identities.store.close()
    expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(new.expires_at)) if new.expires_at else "never"
    print(new.token)
    print(f"# id {new.id}, scopes {','.join(new.scopes)}, expires {expiry}; shown once", file=sys.stderr)
    return 0


def _iso(ts: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else "-"


async def _list(url: str, args: argparse.Namespace) -> int:
    identities = await _identities(url)
    try:
        rows = await identities.list_api_tokens()
    finally:
        await identities.store.close()
    now = time.time()
    items = [
        {
            "id": r.id,
            "name": r.name,
            "scopes": list(r.scopes),
            "created_at": _iso(r.created_at),
            "expires_at": _iso(r.expires_at),
            "last_used_at": _iso(r.last_used_at),
            "state": "revoked"
            if r.revoked_at
            else ("expired" if r.expires_at is not None and r.expires_at <= now else "active"),
        }
        for r in rows
    ]
    if args.output == "json":
        print(json.dumps(items, indent=2))
        return 0
    header = ("ID", "NAME", "SCOPES", "STATE", "EXPIRES", "LAST USED")
    table = [header] + [
        (i["id"], i["name"], ",".join(i["scopes"]), i["state"], i["expires_at"], i["last_used_at"])
        for i in items
    ]
    widths = [max(len(str(row[c])) for row in table) for c in range(len(header))]
    for row in table:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return 0


async def _revoke(url: str, args: argparse.Namespace) -> int:
    identities = await _identities(url)
    try:
        count = await identities.revoke_api_token(args.token)
    finally:
        await identities.store.close()
    if count == 0:
        print(f"controlplane token: no active token with id or name {args.token!r}", file=sys.stderr)
        return 1
    print(f"revoked {count} token(s)")
    return 0
