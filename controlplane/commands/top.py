"""``controlplane top nodes``: what is allocated of each node's CPU, memory and GPUs, with its
power source, battery and energy weight w3."""

from __future__ import annotations

import argparse

from controlplane.commands.client_options import (
    add_client_arguments,
    add_output_argument,
    limit_argument,
    run_verb,
)

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=("nodes", "node"), help="nodes")
    add_output_argument(parser)
    parser.add_argument(
        "--limit", type=limit_argument, default=100, help="at most this many nodes, 1-1000 (default 100)"
    )
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.client.verbs import top

    return run_verb(args, top)
