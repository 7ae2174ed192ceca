"""``controlplane describe workload ID | node NAME``: a readable page, with a workload's
placements and why each went where it did."""

from __future__ import annotations

import argparse

from controlplane.commands.client_options import add_client_arguments, run_verb

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=("workload", "node"), help="workload (by id) or node (by name)")
    parser.add_argument("name", metavar="ID_OR_NAME")
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.client.verbs import describe

    return run_verb(args, describe)
