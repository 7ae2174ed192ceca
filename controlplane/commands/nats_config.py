"""``controlplane nats-config [--out FILE]``: the authorization an external NATS server needs.

Renders the hub's and every enrolled node's nkey with their permissions (the block the embedded
server runs with, without its ``listen``), from the store and the federation file. The hub's key
comes from ``--nats-seed FILE``, else ``<data-dir>/hub.nkey`` (made, 0600, when missing): start
the hub with ``controlplane serve --nats URL --nats-seed <that file>``. Include the output in the
server's configuration and reload it after every enrolment or revocation.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from controlplane.commands.common import (
    HUB_SEED_FILE,
    add_store_arguments,
    existing_store_url,
    federation_from,
)

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_store_arguments(parser)
    parser.add_argument(
        "--nats-seed",
        default=os.environ.get("EDGEPLANE_NATS_SEED_FILE"),
        help="the hub's seed file (env EDGEPLANE_NATS_SEED_FILE; default <data-dir>/hub.nkey)",
    )
    parser.add_argument("--out", help="write here instead of standard output")


def run(args: argparse.Namespace) -> int:
    from edgeplane_contract.credentials import ensure_seed, public_key_of, read_seed

    from controlplane.errors import ConfigError

    # Before the seed: ensure_seed would make the data dir of a store that is not there.
    url = existing_store_url(args, prog="controlplane nats-config")
    if url is None:
        return 2
    try:
        federation = federation_from(args)
        seed = (
            read_seed(Path(args.nats_seed))
            if args.nats_seed
            else ensure_seed(Path(args.data_dir) / HUB_SEED_FILE)
        )
    except ConfigError as exc:
        print(f"controlplane nats-config: configuration error: {exc}", file=sys.stderr)
        return 2
    text = asyncio.run(_render(url, federation, public_key_of(seed)))
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(
            f"wrote {args.out}: include it in the server's configuration, then reload the server",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(text)
    return 0


async def _render(url: str, federation: object, hub_public_key: str) -> str:
    from controlplane.bus.authority import NatsAuthority
    from controlplane.federation.config import FederationConfig
    from controlplane.store.identities import IdentityStore
    from controlplane.store.store import Store

    assert isinstance(federation, FederationConfig)
    store = await Store.open(url)
    try:
        nodes = await IdentityStore(store).node_credentials()
    finally:
        await store.close()
    authority = NatsAuthority(
        config_path=Path(os.devnull), hub_public_key=hub_public_key, federation=federation, nats_url=""
    )
    return authority.render(nodes)
