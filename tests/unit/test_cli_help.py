"""Every command line option says what it does (``--help`` is the first manual people read)."""

from __future__ import annotations

import argparse

import pytest

from edge_agent.cli import build_parser as agent_parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@pytest.mark.parametrize("command", ["run"])
def test_edge_agent_commands_have_a_description_and_every_option_a_help_text(command: str) -> None:
    parser = _subcommands(agent_parser())[command]
    assert parser.description, f"edge-agent {command} has no description"
    silent = [
        action.option_strings[0]
        for action in parser._actions
        if action.option_strings and not action.help and action.help != argparse.SUPPRESS
    ]
    assert silent == [], f"edge-agent {command}: options without help: {silent}"


def _leaves(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    verbs = _subcommands(parser)
    if not verbs:
        return [(path, parser)]
    return [leaf for name, verb in verbs.items() for leaf in _leaves(verb, f"{path} {name}")]


def test_every_controlplane_command_has_a_description_and_every_option_a_help_text() -> None:
    from controlplane.cli import build_parser

    problems = []
    for path, parser in _leaves(build_parser(), "controlplane"):
        if not parser.description:
            problems.append(f"{path}: no description")
        silent = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
        if silent:
            problems.append(f"{path}: options without help: {silent}")
    assert problems == []
