"""``controlplane get nodes|workloads|functions|clusters|events [NAME]``: tables, or -o json|yaml."""

from __future__ import annotations

import argparse

from controlplane.commands.client_options import (
    add_client_arguments,
    add_output_argument,
    limit_argument,
    run_verb,
)

__all__ = ["KIND_ALIASES", "configure", "run"]

KINDS = ("nodes", "workloads", "functions", "clusters", "events")
# kubectl-like spellings: singular, and short names.
KIND_ALIASES = {
    **{k: k for k in KINDS},
    **{k[:-1]: k for k in KINDS},
    "no": "nodes",
    "wl": "workloads",
    "fn": "functions",
    "ev": "events",
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "kind", choices=sorted(KIND_ALIASES), metavar="KIND", help=f"one of {', '.join(KINDS)} (or singular)"
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="one node, workload (its id) or function")
    add_output_argument(parser)
    parser.add_argument(
        "--limit",
        type=limit_argument,
        default=100,
        help="at most this many, 1-1000 (default 100); events: the newest this many",
    )
    parser.add_argument("--kind", dest="event_kind", metavar="EVENT_KIND", help="events of this kind only")
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.client.verbs import get

    args.kind = KIND_ALIASES[args.kind]
    return run_verb(args, get)
