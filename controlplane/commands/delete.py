"""``controlplane delete workload ID | function NAME | node NAME [--force]``."""

from __future__ import annotations

import argparse

from controlplane.commands.client_options import add_client_arguments, run_verb

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "kind",
        choices=("workload", "function", "node"),
        help="workload (by id: stops it if running), function (by name: every version) or node "
        "(by name: revokes its key, places its work again, forgets it; a Ready one needs --force)",
    )
    parser.add_argument("name", metavar="ID_OR_NAME")
    parser.add_argument(
        "--force", action="store_true", help="node: delete it even while Ready (its agent still runs)"
    )
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.client.verbs import delete

    return run_verb(args, delete)
