"""``controlplane get nodes|workloads|functions|clusters|events [NAME]``: tables (-o wide), or
-o name|json|yaml; workloads newest first, with the API's filters and paging (--limit with
--continue TOKEN, or --offset)."""

from __future__ import annotations

import argparse

from controlplane.commands.client_options import add_client_arguments, limit_argument, run_verb

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
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "name", "json", "yaml"),
        default="table",
        help="table (default), wide (more columns), name (kind/name per line), json or yaml",
    )
    parser.add_argument(
        "--limit",
        type=limit_argument,
        default=100,
        help="at most this many, 1-1000 (default 100); workloads and events: the newest this many",
    )
    parser.add_argument(
        "--offset",
        type=_offset_argument,
        default=0,
        help="nodes and workloads: skip this many first (the next page: --offset LIMIT)",
    )
    parser.add_argument(
        "--continue",
        dest="continue_token",
        metavar="TOKEN",
        help="workloads: the next page after the one that printed this token (stable while new work "
        "arrives, as kubectl's continue)",
    )
    filters = parser.add_argument_group("filters (workloads; nodes take --status and --cluster)")
    filters.add_argument(
        "--status", dest="filter_status", metavar="STATUS", help="only this status, e.g. Running, Succeeded"
    )
    filters.add_argument("--name", dest="filter_name", metavar="NAME", help="only workloads of this name")
    filters.add_argument(
        "--node", dest="filter_node", metavar="NODE", help="only workloads placed on this node"
    )
    filters.add_argument(
        "--cluster", dest="filter_cluster", metavar="CLUSTER", help="only those in this cluster"
    )
    parser.add_argument("--kind", dest="event_kind", metavar="EVENT_KIND", help="events of this kind only")
    add_client_arguments(parser)


def _offset_argument(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {raw!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def run(args: argparse.Namespace) -> int:
    from controlplane.client.verbs import get

    args.kind = KIND_ALIASES[args.kind]
    return run_verb(args, get)
