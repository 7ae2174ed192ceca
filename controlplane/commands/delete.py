"""``controlplane delete workload ID | function NAME``."""

from __future__ import annotations

import argparse

from controlplane.commands.client_options import add_client_arguments, run_verb

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "kind",
        choices=("workload", "function"),
        help="workload (by id: stops it if running) or function (by name: every version)",
    )
    parser.add_argument("name", metavar="ID_OR_NAME")
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.client.verbs import delete

    return run_verb(args, delete)
