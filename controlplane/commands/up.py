"""``controlplane up``: the whole system on one machine, on embedded defaults.

Starts a nats-server on a free loopback port (unless ``--nats``), the hub with its SQLite store
in ``--data-dir``, and ``--agents N`` local ``edge-agent`` processes; prints the API URL; Ctrl-C
stops everything (agents first, so their work is stopped cleanly).

The embedded server admits the hub and enrolled nodes only: each local agent enrols with a join
token of its own (``--join-file``: a 0600 file the agent removes once joined, never the command
line), unless its work dir already holds credentials the store still knows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from controlplane.client.config import write_client_config
from controlplane.commands.common import (
    NatsSetup,
    add_hub_arguments,
    advertised_url,
    api_auth,
    api_ssl_context,
    check_free_port,
    check_function_policy,
    database_url,
    ensure_admin_token,
    env_cipher,
    federation_from,
    hub_settings,
    mask_url,
    nats_setup,
    setup_logging,
    start_embedded_nats,
    stop_when,
)
from controlplane.commands.data_dir import private_data_dir, sandboxes_dir
from controlplane.coordination.forwarded import KEY_LABEL as FORWARD_KEY_LABEL

if TYPE_CHECKING:
    from controlplane.api.auth import AuthSettings
    from controlplane.coordination.hub_lease import HubLease
    from controlplane.extender.settings import ExtenderSettings
    from controlplane.federation.config import FederationConfig
    from controlplane.store.identities import IdentityStore
    from controlplane.store.secrets import EnvCipher

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_hub_arguments(parser)
    parser.add_argument("--agents", type=int, default=3, help="local edge agents to start (default 3)")
    parser.add_argument("--heartbeat-interval", type=float, default=1.0, help="agents' heartbeat period (s)")
    parser.add_argument(
        "--agent-cpu",
        help="CPU cores each local agent offers (default: the machine's, shared among the agents)",
    )
    parser.add_argument(
        "--agent-metrics",
        type=int,
        metavar="PORT",
        help="serve each local agent's Prometheus /metrics on 127.0.0.1: the first on PORT, the "
        "next on PORT+1, ... (default: not served)",
    )
    parser.add_argument(
        "--agent-memory",
        help="memory each local agent offers, e.g. 2Gi (default: the machine's, shared among the agents)",
    )
    parser.add_argument(
        "--nats-cluster",
        type=int,
        metavar="N",
        help="start N hub-side nats-servers in one cluster instead of one server (the hub fails over "
        "among them; with --sites, the sites' leaf nodes connect to them)",
    )
    parser.add_argument(
        "--sites",
        type=int,
        metavar="N",
        help="N edge sites, each a cluster (site-1 ... site-N) behind its own leaf-node nats-server; "
        "the agents are spread over them (not with --federation or --nats)",
    )


def run(args: argparse.Namespace) -> int:
    from controlplane.errors import ConfigError
    from controlplane.extender.settings import extender_settings

    setup_logging(args.log_level)
    if not 0 <= args.agents <= 64:
        print("controlplane up: --agents must be between 0 and 64", file=sys.stderr)
        return 2
    try:
        _check_topology_options(args)
        federation = sites_federation(args.sites) if args.sites else federation_from(args)
        check_function_policy(args)
        auth = api_auth(args)
        ssl_context = api_ssl_context(args)
        extender = extender_settings(args)
        # Private before anything is written there: umask 077 (the agents inherit it), old files'
        # modes fixed; the agents' units get their work dirs beside it (_agent_command).
        data_dir = private_data_dir(Path(args.data_dir))
        cipher = env_cipher(args, data_dir)
        # Replicas share the secrets key, so each can sign (and check) whom a standby forwards for.
        auth = replace(auth, forward_key=cipher.derive(FORWARD_KEY_LABEL))
        _check_agent_options(args)
        nats = nats_setup(args, data_dir, federation)
    except ConfigError as exc:
        print(f"controlplane up: configuration error: {exc}", file=sys.stderr)
        return 2
    from edgeplane_contract.transport import NatsUnavailableError

    from controlplane.errors import StartupError

    try:
        return asyncio.run(_up(args, federation, auth, ssl_context, nats, extender, cipher))
    except (NatsUnavailableError, StartupError) as exc:  # NATS, the store or the port: one line
        print(f"controlplane up: {exc}", file=sys.stderr)
        return 1


def _check_topology_options(args: argparse.Namespace) -> None:
    """--nats-cluster and --sites: in range, and not with what they replace (ConfigError)."""
    from controlplane.errors import ConfigError

    if args.nats_cluster is None and args.sites is None:
        return
    for flag, value, top in (("--nats-cluster", args.nats_cluster, 5), ("--sites", args.sites, 8)):
        if value is not None and not 1 <= value <= top:
            raise ConfigError("<command line>", flag, f"must be between 1 and {top}, got {value}")
    for flag, given in (
        ("--nats", args.nats),
        ("--nats-port", args.nats_port),
        ("--nats-ca", args.nats_ca),
        ("--nats-seed", args.nats_seed),
    ):
        if given:
            what = "--nats-cluster" if args.nats_cluster is not None else "--sites"
            raise ConfigError("<command line>", what, f"starts its own nats-servers: not with {flag}")
    if args.sites is not None and args.federation:
        raise ConfigError(
            "<command line>", "--sites", "makes the federation (site-1 ...): not with --federation"
        )


def sites_federation(sites: int) -> FederationConfig:
    """``sites`` clusters, site-1 ... site-N, each its own region."""
    from controlplane.federation.config import ClusterConfig, FederationConfig

    names = [f"site-{i + 1}" for i in range(sites)]
    return FederationConfig(
        clusters=[ClusterConfig(name=n, region=n) for n in names], default_cluster=names[0]
    )


def _check_agent_options(args: argparse.Namespace) -> None:
    """--agent-cpu, --agent-memory and --agent-metrics, checked before anything starts (ConfigError)."""
    from edgeplane_contract.resources import parse_cpu, parse_memory

    from controlplane.errors import ConfigError, ValidationError

    if args.agent_metrics is not None:
        for index in range(args.agents):
            check_free_port("--agent-metrics", args.agent_metrics + index)
    try:
        if args.agent_cpu:
            parse_cpu(args.agent_cpu, field_name="--agent-cpu")
        if args.agent_memory:
            parse_memory(args.agent_memory, field_name="--agent-memory")
    except ValidationError as exc:
        raise ConfigError("<command line>", exc.field or "--agent-cpu", str(exc)) from None


async def _enrolment(
    args: argparse.Namespace, identities: IdentityStore, cluster: str, name: str, work_dir: Path, api: str
) -> list[str]:
    """The agent's identity arguments: none when its work dir holds credentials the store still
    knows (it reuses them), else a fresh join token bound to its name (stale credentials are
    removed first, from the work dir and the store)."""
    from edgeplane_contract.enrolment import CREDENTIALS_FILE, load_credentials

    from controlplane.errors import ConfigError

    stored = work_dir / CREDENTIALS_FILE
    if stored.exists():
        try:
            credentials = load_credentials(stored)
            active = await identities.node_credential(name)
            same = active is not None and (active.public_key, active.cluster) == (
                credentials.public_key,
                cluster,
            )
            if same:
                return []
        except ConfigError:
            pass
        stored.unlink()  # revoked, from another store, or unreadable: enrol again
    if await identities.node_credential(name) is not None:
        # The store's key for this name is not the one in its work dir (lost, or from another
        # run): up, the admin of its own agents, revokes it, as a join may not replace a live key.
        await identities.revoke_node(name)
    # Bound to this agent's name: the token enrols nothing else, wherever it is read.
    token = await identities.create_join_token(cluster, 600.0, node=name)
    command = ["--join-file", str(_write_join_file(work_dir, token.token)), "--hub", api]
    if args.tls_cert:
        command += ["--hub-ca", args.tls_cert]
    return command


def _write_join_file(work_dir: Path, token: str) -> Path:
    """The agent's join token in a 0600 file of its work dir, which the agent removes once it has
    joined: on its command line the token would be readable by every process in ``/proc``."""
    work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = work_dir / "join.token"
    path.unlink(missing_ok=True)  # O_EXCL below: never write through a link left there
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return path


def agent_share(agents: int) -> tuple[str, str]:
    """(cpu, memory) each of ``agents`` local agents offers by default: the machine split among
    them, so that they do not offer the same cores and bytes each (over-committing it N times)."""
    import psutil

    share = max(1, agents)
    cpu = max(0.1, round((os.cpu_count() or 1) / share, 3))
    memory = psutil.virtual_memory().total // share
    return f"{cpu:g}", str(memory)


def _client_url(api_url: str) -> str:
    """The URL the client config names: a wildcard bind address is reached on loopback."""
    for wildcard in ("0.0.0.0", "[::]", "::"):
        if f"://{wildcard}:" in api_url:
            return api_url.replace(f"://{wildcard}:", "://127.0.0.1:")
    return api_url


def _agent_metrics_port(args: argparse.Namespace, index: int) -> int | None:
    """The port of the ``index``-th local agent's /metrics (``--agent-metrics``), or None."""
    return None if args.agent_metrics is None else args.agent_metrics + index


def _agent_command(
    args: argparse.Namespace, nats_url: str, cluster: str, name: str, data_dir: Path, index: int
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "edge_agent.cli",
        "run",
        "--nats",
        nats_url,
        "--cluster",
        cluster,
        "--name",
        name,
        "--heartbeat-interval",
        str(args.heartbeat_interval),
        "--work-dir",
        str(data_dir / "agents" / name),
        # Units' work dirs outside the private data dir: the run user needs no path through it.
        "--sandbox-root",
        str(sandboxes_dir(data_dir) / name),
        "--log-level",
        args.log_level,
    ]
    cpu, memory = agent_share(args.agents)
    command += ["--cpu", args.agent_cpu or cpu, "--memory", args.agent_memory or memory]
    metrics_port = _agent_metrics_port(args, index)
    if metrics_port is not None:
        command += ["--metrics-listen", f"127.0.0.1:{metrics_port}"]
    for flag, value in (
        ("--nats-ca", args.nats_ca),
        ("--nats-cert", args.nats_cert),
        ("--nats-key", args.nats_key),
    ):
        if value:
            command += [flag, value]
    return command


async def _up(
    args: argparse.Namespace,
    federation: object,
    auth: AuthSettings,
    ssl_context: ssl.SSLContext | None,
    nats: NatsSetup,
    extender: ExtenderSettings | None,
    cipher: EnvCipher,
) -> int:
    from controlplane.coordination.hub_lease import held_hub_lease
    from controlplane.federation.config import FederationConfig

    assert isinstance(federation, FederationConfig)
    # One active hub per store: refused at once on SQLite, a standby on PostgreSQL.
    async with held_hub_lease(database_url(args), stale_s=args.hub_lease_s) as lease:
        return await _up_with_lease(args, federation, auth, ssl_context, nats, extender, cipher, lease)


async def _up_with_lease(
    args: argparse.Namespace,
    federation: FederationConfig,
    auth: AuthSettings,
    ssl_context: ssl.SSLContext | None,
    nats: NatsSetup,
    extender: ExtenderSettings | None,
    cipher: EnvCipher,
    lease: HubLease,
) -> int:
    from controlplane.commands.supervise import LocalAgent, supervise
    from controlplane.runtime.runner import start_hub, stop_on_signal

    data_dir = Path(args.data_dir)
    nats_server = start_embedded_nats(nats)
    nats_url = nats.url
    agents: list[LocalAgent] = []
    running = None
    status = 0
    try:
        settings = hub_settings(args, nats_url, federation, nats)
        running = await start_hub(
            settings,
            database_url=database_url(args),
            host=args.host,
            port=args.port,
            auth=auth,
            ssl_context=ssl_context,
            nats_authority=nats.authority,
            extender=extender,
            env_cipher=cipher,
            lead_as=advertised_url(args, ssl_context) if lease.kind == "postgresql" else None,
        )
        running.hub.fence = lease.confirm
        if nats.authority is not None:  # nodes enrolled at an earlier start connect again
            await nats.authority.apply(running.hub.identities.node_credentials)
        token_file, token_created = await ensure_admin_token(running.hub.store, data_dir)
        client_config = write_client_config(data_dir, _client_url(running.url), token_file, args.tls_cert)
        clusters = federation.clusters
        for index in range(args.agents):
            cluster = clusters[index % len(clusters)]
            # A site's agents connect to its leaf server; otherwise the cluster's NATS or the hub's.
            agent_url = (
                nats.authority.agent_url(cluster.name) if nats.authority else cluster.nats_url or nats_url
            )
            name = f"edge-{index + 1}"
            command = _agent_command(args, agent_url, cluster.name, name, data_dir, index)
            if nats.authority is not None:
                command += await _enrolment(
                    args, running.hub.identities, cluster.name, name, data_dir / "agents" / name, running.url
                )
            agents.append(LocalAgent(name, command))
            agents[-1].start()
        made = "new admin token in" if token_created else "admin token in"
        print(
            f"edgeplane is up: API {running.url}  NATS {mask_url(nats_url)}  "
            f"store {mask_url(database_url(args))}  agents {args.agents}\n"
            f"  {made} {token_file} (keep it secret; `controlplane token create` makes narrower ones)\n"
            f'  try: curl -H "Authorization: Bearer $(cat {token_file})" {running.url}/v1/nodes\n'
            f"  client config in {client_config}: try `controlplane get nodes`\n"
            f"  console: {running.url}/console (paste the token)\n"
            f"  Ctrl-C stops everything.",
            flush=True,
        )
        if nats.topology is not None:
            leaves = nats.topology.authority.leaves
            sites = "  ".join(f"{c} {leaf.server.url}" for c, leaf in sorted(leaves.items()))
            print(
                f"  NATS: {len(nats.topology.core)} hub-side servers in one cluster"
                + (f"; sites' leaf nodes: {sites}" if sites else ""),
                flush=True,
            )
        if args.agent_metrics is not None and args.agents:
            last = _agent_metrics_port(args, args.agents - 1)
            ports = f"{args.agent_metrics}" + (f"-{last}" if args.agents > 1 else "")
            print(f"  agents' Prometheus /metrics on 127.0.0.1:{ports} (edge-1 first)", flush=True)
        if running.extender is not None:
            print(f"  Kubernetes scheduler extender {running.extender.url} (filter, prioritize)", flush=True)
        stop = asyncio.Event()
        stop_on_signal(stop)
        lease.stop_when_lost(stop)
        if running.fence is not None:  # another hub took the store over (fenced): everything stops
            watch = asyncio.create_task(stop_when(running.fence.fenced, stop))
        # Crashed agents are restarted with backoff; one that cannot start stops everything.
        status = await supervise(agents, stop)
        if running.fence is not None:
            watch.cancel()
            status = 1 if running.fence.fenced.is_set() else status
        print("stopping...", flush=True)
    finally:
        for agent in agents:  # all at once: each stops its work within its grace period
            if agent.process is not None and agent.process.poll() is None:
                agent.process.send_signal(signal.SIGTERM)
        for agent in agents:
            agent.stop()
        if running is not None:
            await running.stop()
        if nats_server is not None:
            nats_server.stop()
    return status
