"""``edge-agent`` command line: ``edge-agent run --nats URL --cluster C --name N [--config FILE]``.

NATS identity, first match wins: ``--credentials FILE``; ``<work_dir>/credentials.json`` (from an
earlier enrolment); ``--join-file FILE``, ``--join -`` (stdin) or ``--join TOKEN``, with
``--hub URL`` (enrol now, then keep the credentials there);
none: connect anonymously (a server that takes anyone). Flags override what the credentials
say about the NATS URL and subject prefix; the node and cluster names are bound to them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
from pathlib import Path
from typing import Any

from edgeplane_contract.errors import ConfigError, ValidationError
from edgeplane_contract.logfmt import configure_logging
from edgeplane_contract.resources import parse_cpu, parse_memory

__all__ = ["main"]


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"label {item!r} is not key=value")
        labels[key] = value
    return labels


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edge-agent", description="edgeplane edge agent")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    run = sub.add_parser(
        "run",
        help="run the agent until interrupted",
        description="Run an edge agent: register with the hub over NATS, report telemetry (CPU, "
        "memory, power source and battery, GPUs), run the workloads and functions placed here as "
        "confined local processes, and keep serving them when the hub or NATS is away. Flags "
        "override the --config file; SIGTERM or Ctrl-C stops the work cleanly.",
    )
    run.add_argument("--nats", dest="nats_url", help="NATS URL (default nats://127.0.0.1:4222)")
    run.add_argument("--cluster", help="cluster name (default: default)")
    run.add_argument("--name", help="node name, unique in the federation")
    run.add_argument("--config", help="YAML config file (flags override it)")
    run.add_argument(
        "--subject-prefix",
        dest="subject_prefix",
        help="NATS subject prefix, as the hub's (default edgeplane.v1)",
    )
    run.add_argument(
        "--heartbeat-interval",
        dest="heartbeat_interval_s",
        type=float,
        help="seconds between heartbeats (default 2; the hub's lease is a few of them)",
    )
    run.add_argument(
        "--node-type",
        dest="node_type",
        choices=["edge", "cpu", "gpu", "dpu"],
        help="what kind of node this is, for placement (default edge)",
    )
    run.add_argument("--labels", type=_labels, help="k=v,k2=v2")
    run.add_argument("--cpu", help="CPU cores offered (default: all)")
    run.add_argument("--memory", help="memory offered, e.g. 4Gi (default: all)")
    run.add_argument(
        "--power-supply-path",
        dest="power_supply_path",
        help="power_supply sysfs folder to read mains/battery from (default /sys/class/power_supply)",
    )
    run.add_argument(
        "--work-dir",
        dest="work_dir",
        help="where the agent keeps its state, outbox and workload logs (default ~/.edgeplane/agent/NAME)",
    )
    run.add_argument(
        "--sandbox-root",
        dest="sandbox_root",
        help="where workloads' and functions' work dirs go (default: beside the work dir where "
        "the run user can reach it, else /var/lib/edgeplane/sandboxes/NAME)",
    )
    run.add_argument(
        "--run-as",
        dest="run_as",
        help="user that workloads and functions run as when the agent is root "
        "(default edgeplane-run, created if missing; 'agent': as the agent's own user)",
    )
    run.add_argument(
        "--join",
        help="enrol with this single-use join token; '-': read it from stdin (env EDGEPLANE_JOIN_TOKEN); "
        "needs --hub. A token given here is visible in the process list: prefer --join-file or '-'",
    )
    run.add_argument(
        "--join-file",
        dest="join_file",
        metavar="FILE",
        help="enrol with the join token in FILE (removed after a successful join); needs --hub",
    )
    run.add_argument("--hub", help="the hub's API URL, for --join (e.g. https://hub:8080)")
    run.add_argument("--hub-ca", dest="hub_ca", help="CA file to verify the hub's HTTPS certificate")
    run.add_argument("--credentials", help="a credentials file from `controlplane agent-credentials create`")
    run.add_argument("--nats-ca", dest="nats_ca", help="CA file to verify a tls:// NATS server")
    run.add_argument("--nats-cert", dest="nats_cert", help="client certificate (PEM) for NATS")
    run.add_argument("--nats-key", dest="nats_key", help="the private key (PEM) of --nats-cert")
    run.add_argument(
        "--metrics-listen",
        dest="metrics_listen",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here (PORT alone: on loopback; default: not served)",
    )
    run.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    # The local policy's tools; the module keeps numpy/onnxruntime imports inside its functions.
    from edge_agent.policy import cli as policy_cli

    policy_cli.configure(sub.add_parser("policy", help="inspect the local policy model"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "policy":
        from edge_agent.policy.cli import run as run_policy

        return run_policy(args)
    # One line per record, no token or seed in it (edgeplane_contract/logfmt.py).
    configure_logging(str(args.log_level))
    overrides = {
        key: getattr(args, key)
        for key in (
            "nats_url",
            "cluster",
            "name",
            "subject_prefix",
            "heartbeat_interval_s",
            "node_type",
            "labels",
            "power_supply_path",
            "work_dir",
            "sandbox_root",
            "run_as",
            "metrics_listen",
        )
    }
    try:
        capacity: dict[str, object] = {}
        if args.cpu is not None:
            capacity["cpu"] = parse_cpu(args.cpu, field_name="--cpu")
        if args.memory is not None:
            capacity["memory"] = parse_memory(args.memory, field_name="--memory")
        if capacity:
            overrides["capacity"] = capacity
        config = _configure(args, overrides)
    except (ConfigError, ValidationError) as exc:
        print(f"edge-agent: configuration error: {exc}", file=sys.stderr)
        return 2
    except _JoinFailed as exc:
        print(f"edge-agent: join failed: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(_run(config))


class _JoinFailed(Exception):
    pass


def _configure(args: argparse.Namespace, overrides: dict[str, Any]) -> object:
    """The agent's settings with its NATS identity (see the module docstring for the order)."""
    from edgeplane_contract.credentials import NatsTls
    from edgeplane_contract.enrolment import CREDENTIALS_FILE, AgentCredentials, load_credentials

    from edge_agent.config import load_agent_config
    from edge_agent.enrol import JoinError, join, read_join_token, remove_join_file

    credentials: AgentCredentials | None = None
    if args.credentials:
        credentials = load_credentials(Path(args.credentials))
    config = load_agent_config(args.config, _with_credentials(overrides, credentials, args.credentials))
    stored = Path(config.work_dir) / CREDENTIALS_FILE
    wants_join = args.join is not None or args.join_file is not None
    if credentials is None and stored.exists():
        credentials = load_credentials(stored)
        if wants_join:
            logging.getLogger("edgeplane.agent").info(
                "already enrolled as %s/%s (%s): --join/--join-file ignored",
                credentials.cluster,
                credentials.node,
                stored,
            )
    elif credentials is None and (
        token := read_join_token(
            args.join, args.join_file, env=os.environ.get("EDGEPLANE_JOIN_TOKEN"), stdin=sys.stdin
        )
    ):
        if not args.hub:
            raise ConfigError("<command line>", "--hub", "--join needs the hub's API URL")
        try:
            hub_ssl = ssl.create_default_context(cafile=args.hub_ca) if args.hub_ca else None
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(args.hub_ca, "--hub-ca", f"cannot load: {exc}") from None
        cluster = args.cluster  # asked for only when given: the token knows its cluster
        try:
            credentials = asyncio.run(
                join(args.hub, token, node=config.name, cluster=cluster, ssl_context=hub_ssl)
            )
        except JoinError as exc:
            raise _JoinFailed(str(exc)) from None
        credentials.save(stored)
        if args.join_file is not None:
            remove_join_file(args.join_file)
    if credentials is not None:
        config = load_agent_config(args.config, _with_credentials(overrides, credentials, str(stored)))
        config.nats_seed = credentials.seed
        config.inbox_prefix = credentials.inbox_prefix
        config.hub_public_key = credentials.hub_public_key or config.hub_public_key
    config.nats_tls = NatsTls.from_options(args.nats_ca, args.nats_cert, args.nats_key)
    return config


def _with_credentials(overrides: dict[str, Any], credentials: Any, source: str | None) -> dict[str, Any]:
    """Flags, with the credentials' values where no flag was given; a conflicting name or
    cluster is a ConfigError (a node's identity is bound to both)."""
    if credentials is None:
        return overrides
    merged = dict(overrides)
    for key, value in (
        ("name", credentials.node),
        ("cluster", credentials.cluster),
        ("nats_url", credentials.nats_url),
        ("subject_prefix", credentials.subject_prefix),
    ):
        given = merged.get(key)
        if given is None:
            if value:
                merged[key] = value
        elif key in ("name", "cluster") and given != value:
            raise ConfigError(
                source or "<credentials>", key, f"these credentials are for {value!r}, not {given!r}"
            )
    return merged


async def _run(config: object) -> int:
    from edge_agent.agent import Agent
    from edge_agent.config import AgentConfig

    assert isinstance(config, AgentConfig)
    agent = Agent(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, agent.request_stop)
    await agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
