"""What the client verbs (``get``, ``describe``, ``apply``, ``delete``, ``invoke``, ``top``)
share: where the hub is (``--config``, ``--url``, ``--token-file``, ``--ca-file``), ``--timeout``,
``-v``, and running a verb so that every failure is one line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from controlplane.client.http import HubClient

__all__ = ["add_client_arguments", "add_output_argument", "limit_argument", "run_verb"]

CONFIG_HELP = (
    "client config file (default: $EDGEPLANE_CONFIG, else ./.edgeplane/client.yaml, which "
    "`controlplane up` writes, else ~/.config/edgeplane/client.yaml)"
)


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    group.add_argument("--url", help="the hub's API URL (overrides the config's)")
    group.add_argument(
        "--token-file", metavar="FILE", help="file holding the API token (overrides the config's)"
    )
    group.add_argument("--ca-file", metavar="FILE", help="CA certificate to verify an HTTPS hub")
    group.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="per-request timeout (default 30; invoke 120)"
    )
    group.add_argument(
        "-v", "--verbose", action="store_true", help="show each request (method, URL, status, time) on stderr"
    )


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="output format (default table)",
    )


def limit_argument(raw: str) -> int:
    """``--limit``: 1-1000, as the API's lists take it."""
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {raw!r}") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError("must be between 1 and 1000")
    return value


def run_verb(args: argparse.Namespace, verb: Callable[[HubClient, argparse.Namespace], int]) -> int:
    """Load the config, call ``verb``; any failure is one line ``controlplane <cmd>: <why>``."""
    from controlplane.client.config import ClientConfigError, Overrides, load_client_config
    from controlplane.client.documents import DocumentError
    from controlplane.client.http import DEFAULT_TIMEOUT_S, ClientError, HubClient

    if args.timeout is not None and not 0 < args.timeout <= 3600:
        print(f"controlplane {args.command}: --timeout must be in (0, 3600] seconds", file=sys.stderr)
        return 2
    try:
        config = load_client_config(Overrides(args.config, args.url, args.token_file, args.ca_file))
        client = HubClient(config, timeout_s=args.timeout or DEFAULT_TIMEOUT_S, verbose=args.verbose)
        if args.verbose:
            print(f"hub {config.url} (config: {config.source})", file=sys.stderr)
        return verb(client, args)
    except (ClientConfigError, ClientError, DocumentError) as exc:
        print(f"controlplane {args.command}: {exc}", file=sys.stderr)
        return 1
