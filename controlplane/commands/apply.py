"""``controlplane apply -f FILE``: create workloads and register functions from YAML or JSON."""

from __future__ import annotations

import argparse

from controlplane.commands.client_options import add_client_arguments, run_verb

__all__ = ["configure", "run"]

EPILOG = """\
A file holds one document or many (YAML '---' separated, or a list). Each is a body of
POST /v1/workloads or POST /v1/functions. Which one:
  - 'kind: Function' or 'kind: Workload' says so (and is not sent);
  - otherwise a document with 'source', 'handler', 'runtime' or 'path' is a function, any other a
    workload (a workload's own kind, batch|service|analytics|inference, is sent as it is).
Every apply of a workload starts a new one (workloads are runs); a function gets a new version
when its document changed ('unchanged' when not).

example:
  kind: Function
  name: echo
  source: |
    def handle(event, context):
        return event
  handler: handle
  ---
  name: hello
  command: [sh, -c, echo hi]
  resources: {cpu: 0.5, memory: 64Mi}
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML or JSON file ('-' reads standard input); may be given more than once",
    )
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from controlplane.client.verbs import apply

    return run_verb(args, apply)
