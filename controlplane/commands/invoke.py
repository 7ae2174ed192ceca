"""``controlplane invoke NAME --data JSON``: run a function once and print its result."""

from __future__ import annotations

import argparse

from controlplane.commands.client_options import add_client_arguments, run_verb

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the function")
    parser.add_argument("--data", metavar="JSON", help="the event, as JSON (default: null)")
    parser.epilog = (
        "Prints the result as JSON; a failed invocation exits 1 with its error (and, with -v, "
        "the handler's traceback and the invocation's timings)."
    )
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.client.verbs import invoke

    return run_verb(args, invoke)
