"""``controlplane nats-config [--out FILE]``: the authorization an external NATS server needs.

Renders the hub's and every enrolled node's nkey with their permissions (the block the embedded
server runs with, without its ``listen``), from the store and the federation file. The hub's key
comes from ``--nats-seed FILE``, else ``<data-dir>/hub.nkey`` (made, 0600, when missing): start
the hub with ``controlplane serve --nats URL --nats-seed <that file>``. Include the output in the
server's configuration and reload it after every enrolment or revocation.

Sites behind leaf nodes (docs/operations.md): ``--sites a,b`` renders the hub side's block with
those clusters' leaf connections admitted (their nodes are then on their leaf servers, not in this
block); ``--site a --hub-side HOST:PORT,...`` renders site ``a``'s whole leaf-server file: its
nodes, and its outbound leaf connection to the hub side's leafnode ports. A site's key is
``<data-dir>/site-<cluster>.nkey`` (made, 0600, when missing); the site file holds its seed: copy
it to the site's machine only.
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
    parser.add_argument(
        "--sites",
        default="",
        help="clusters whose agents sit behind a leaf node: admit their leaf connections (comma-separated)",
    )
    parser.add_argument("--site", help="render this cluster's leaf-server file instead (needs --hub-side)")
    parser.add_argument(
        "--hub-side",
        default="",
        help="with --site: the hub side's leafnode HOST:PORT addresses, comma-separated",
    )
    parser.add_argument(
        "--listen",
        default="0.0.0.0:4222",
        help="with --site: where its agents connect (default 0.0.0.0:4222)",
    )


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
        sites = _site_names(args, federation)
        leaf = _leaf_options(args, federation)
    except ConfigError as exc:
        print(f"controlplane nats-config: configuration error: {exc}", file=sys.stderr)
        return 2
    site_seeds = {c: ensure_seed(Path(args.data_dir) / f"site-{c}.nkey") for c in sites}
    try:
        text = asyncio.run(_render(url, federation, public_key_of(seed), site_seeds, leaf))
    except ValueError as exc:  # an address or name the renderer refuses
        print(f"controlplane nats-config: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        from edgeplane_contract.credentials import write_private

        write_private(Path(args.out), text)  # a site's file holds its seed
        what = (
            "copy it to the site's leaf server only (it holds the site's seed)"
            if leaf
            else "include it in the server's configuration, then reload the server"
        )
        print(f"wrote {args.out}: {what}", file=sys.stderr)
        return 0
    sys.stdout.write(text)
    return 0


def _site_names(args: argparse.Namespace, federation: object) -> list[str]:
    """--sites and --site as cluster names of the federation (ConfigError naming the flag)."""
    from controlplane.errors import ConfigError
    from controlplane.federation.config import FederationConfig

    assert isinstance(federation, FederationConfig)
    given = [("--sites", n.strip()) for n in args.sites.split(",") if n.strip()]
    if args.site:
        given.append(("--site", args.site))
    for flag, name in given:
        if federation.cluster(name) is None:
            known = ", ".join(c.name for c in federation.clusters)
            raise ConfigError("<command line>", flag, f"unknown cluster {name!r} (known: {known})")
    names = [name for _, name in given]
    return sorted(set(names))


def _leaf_options(
    args: argparse.Namespace, federation: object
) -> tuple[str, tuple[str, int], list[tuple[str, int]]] | None:
    """(site, listen, hub side) for --site, None without it (ConfigError naming the flag)."""
    from controlplane.errors import ConfigError

    if not args.site:
        if args.hub_side:
            raise ConfigError("<command line>", "--hub-side", "only with --site")
        return None
    hub_side = [_address("--hub-side", a) for a in args.hub_side.split(",") if a.strip()]
    if not hub_side:
        raise ConfigError(
            "<command line>", "--hub-side", "--site needs the hub side's leafnode HOST:PORT addresses"
        )
    return args.site, _address("--listen", args.listen), hub_side


def _address(flag: str, text: str) -> tuple[str, int]:
    from controlplane.errors import ConfigError

    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("<command line>", flag, f"{text.strip()!r} is not HOST:PORT")
    return host, int(port)


async def _render(
    url: str,
    federation: object,
    hub_public_key: str,
    site_seeds: dict[str, str],
    leaf: tuple[str, tuple[str, int], list[tuple[str, int]]] | None,
) -> str:
    from edgeplane_contract.credentials import public_key_of

    from controlplane.bus.authority import NatsAuthority
    from controlplane.bus.nats_auth import SiteIdentity, render_leaf_config, render_server_config
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
    identities = authority.identities(nodes)
    sites = {
        c: SiteIdentity(cluster=c, prefix=authority.subject_prefix(c), public_key=public_key_of(seed))
        for c, seed in site_seeds.items()
    }
    if leaf is not None:
        name, listen, hub_side = leaf
        return render_leaf_config(
            site=sites[name],
            site_seed=site_seeds[name],
            nodes=[n for n in identities if n.cluster == name],
            listen=listen,
            remotes=hub_side,
        )
    if not sites:
        return authority.render(nodes)
    return render_server_config(
        hub_public_key=hub_public_key,
        nodes=[n for n in identities if n.cluster not in sites],
        sites=sites.values(),
    )
