"""``controlplane logs [-f] [--tail N] [--replica R] WORKLOAD``: a replica's output, from its node."""

from __future__ import annotations

import argparse

from controlplane.commands.client_options import add_client_arguments, run_verb

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", metavar="WORKLOAD", help="the workload's id")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing until the replica ends")
    parser.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    parser.add_argument("--replica", type=int, default=0, help="which replica (default 0)")
    parser.epilog = (
        "The hub fetches the log from the node that keeps it; a node that is down answers 503. "
        "Nodes keep logs up to their log_max_bytes (the oldest half goes first) and delete those "
        "of ended work after log_retention_s."
    )
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.client.verbs import logs

    return run_verb(args, logs)
