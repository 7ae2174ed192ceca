"""``controlplane`` command line: one subcommand per module.

Each subcommand module exposes ``configure(parser)`` (adds its arguments) and ``run(args) -> int``.
Modules import their heavy dependencies inside ``run`` so ``controlplane --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["SUBCOMMANDS", "main"]

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "up": ("controlplane.commands.up", "run hub + embedded NATS + local edge agents (the quick start)"),
    "serve": ("controlplane.commands.serve", "run the hub (HTTP API + NATS bus + scheduler)"),
    "migrate": ("controlplane.commands.migrate", "migrate the store's schema to the latest revision"),
    "token": ("controlplane.commands.token", "create, list and revoke API tokens"),
    "agent-token": ("controlplane.commands.agent_token", "create a single-use join token for an edge agent"),
    "agent-credentials": ("controlplane.commands.agent_credentials", "enrol a node offline, to a file"),
    "node": ("controlplane.commands.node", "re-key a node or approve more capacity than it first claimed"),
    "nats-config": ("controlplane.commands.nats_config", "the NATS authorization an external server needs"),
    "get": ("controlplane.commands.get", "list nodes, workloads, functions, clusters or events"),
    "describe": (
        "controlplane.commands.describe",
        "show a workload (with its placement explanation) or a node",
    ),
    "apply": ("controlplane.commands.apply", "create workloads and register functions from YAML/JSON files"),
    "delete": ("controlplane.commands.delete", "delete a workload, a function or a node"),
    "invoke": ("controlplane.commands.invoke", "invoke a function and print its result"),
    "logs": ("controlplane.commands.logs", "print (or follow) a workload replica's output"),
    "top": ("controlplane.commands.top", "nodes' allocated CPU, memory and GPUs, power and battery"),
    "simulate-functions": ("controlplane.serverless.sim_cli", "compare function keep-alive policies"),
    "simulate": ("controlplane.sim.cli", "compare schedulers side by side in the discrete-event simulator"),
    "policy": ("controlplane.policy.cli", "train, export, evaluate and benchmark the agent's local policy"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="controlplane", description="edgeplane control plane")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(cmd)
        cmd.set_defaults(_run=module.run)
    _describe_verbs(parser)
    return parser


def _describe_verbs(parser: argparse.ArgumentParser) -> None:
    """A verb's ``--help`` opens with its one-line help when it has no description of its own."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, verb in action.choices.items():
                verb.description = verb.description or helps.get(name)
                _describe_verbs(verb)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
