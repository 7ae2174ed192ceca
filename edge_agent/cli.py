"""``edge-agent`` command line: ``edge-agent run --nats URL --cluster C --name N [--config FILE]``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from controlplane.errors import ConfigError, ValidationError
from controlplane.resources import parse_cpu, parse_memory

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
    run = sub.add_parser("run", help="run the agent until interrupted")
    run.add_argument("--nats", dest="nats_url", help="NATS URL (default nats://127.0.0.1:4222)")
    run.add_argument("--cluster", help="cluster name (default: default)")
    run.add_argument("--name", help="node name, unique in the federation")
    run.add_argument("--config", help="YAML config file (flags override it)")
    run.add_argument("--subject-prefix", dest="subject_prefix")
    run.add_argument("--heartbeat-interval", dest="heartbeat_interval_s", type=float)
    run.add_argument("--node-type", dest="node_type", choices=["edge", "cpu", "gpu", "dpu"])
    run.add_argument("--labels", type=_labels, help="k=v,k2=v2")
    run.add_argument("--cpu", help="CPU cores offered (default: all)")
    run.add_argument("--memory", help="memory offered, e.g. 4Gi (default: all)")
    run.add_argument("--power-supply-path", dest="power_supply_path", help="power_supply sysfs folder")
    run.add_argument("--work-dir", dest="work_dir")
    run.add_argument(
        "--run-as",
        dest="run_as",
        help="user that workloads and functions run as when the agent is root "
        "(default edgeplane-run, created if missing; 'agent': as the agent's own user)",
    )
    run.add_argument("--log-level", default="INFO")
    # The local policy's tools; the module keeps numpy/onnxruntime imports inside its functions.
    from edge_agent.policy import cli as policy_cli

    policy_cli.configure(sub.add_parser("policy", help="inspect and benchmark the local policy"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "policy":
        from edge_agent.policy.cli import run as run_policy

        return run_policy(args)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from edge_agent.config import load_agent_config

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
            "run_as",
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
        config = load_agent_config(args.config, overrides)
    except (ConfigError, ValidationError) as exc:
        print(f"edge-agent: configuration error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_run(config))


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
