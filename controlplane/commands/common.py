"""Arguments and settings shared by ``serve`` and ``up``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgeplane_contract.logfmt import configure_logging
from edgeplane_contract.urls import mask_url

from controlplane.errors import ConfigError
from controlplane.federation.config import ClusterConfig, FederationConfig, load_federation, single_cluster
from controlplane.scheduling.shield import DEFAULT_BID_SHIELD_MARGIN
from controlplane.store.db import sqlite_url

if TYPE_CHECKING:
    from edgeplane_contract.credentials import NatsTls

    from controlplane.api.auth import AuthSettings
    from controlplane.bus.authority import NatsAuthority
    from controlplane.bus.topology import LocalTopology
    from controlplane.hub.service import HubSettings
    from controlplane.natsd import NatsServer
    from controlplane.store.secrets import EnvCipher
    from controlplane.store.store import Store

__all__ = [
    "ADMIN_TOKEN_FILE",
    "HUB_SEED_FILE",
    "NatsSetup",
    "add_hub_arguments",
    "add_store_arguments",
    "api_auth",
    "api_ssl_context",
    "check_free_port",
    "check_function_policy",
    "chosen_cluster",
    "database_url",
    "ensure_admin_token",
    "env_cipher",
    "existing_store_url",
    "federation_from",
    "hub_settings",
    "join_token_ttl",
    "mask_url",
    "nats_setup",
    "setup_logging",
    "start_embedded_nats",
]

HUB_SEED_FILE = "hub.nkey"


def add_store_arguments(
    parser: argparse.ArgumentParser, *verbs: argparse.ArgumentParser, federation: bool = True
) -> None:
    """--database-url, --data-dir (and --federation), for the commands that work on the store.

    Given ``verbs`` (subcommand parsers), the options are accepted after the verb too
    (``token create --data-dir X``) as well as before it; a value after the verb wins.
    """
    defaults: dict[str, object] = {
        "--database-url": os.environ.get("EDGEPLANE_DATABASE_URL"),
        "--data-dir": ".edgeplane",
        "--federation": None,
    }
    helps = {
        "--database-url": "SQLAlchemy URL (env EDGEPLANE_DATABASE_URL; default SQLite in --data-dir)",
        "--data-dir": "where the SQLite store lives",
        "--federation": "federation config file (default: one cluster named 'default')",
    }
    for target in (parser, *verbs):
        for option, value in defaults.items():
            if option == "--federation" and not federation:
                continue
            # On a verb the default is SUPPRESS: an option not given there keeps the parent's value.
            default = value if target is parser else argparse.SUPPRESS
            target.add_argument(option, default=default, help=helps[option])


def add_hub_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="API bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="API port (default 8080; 0 picks a free one)")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("EDGEPLANE_DATABASE_URL"),
        help="SQLAlchemy URL (env EDGEPLANE_DATABASE_URL; default SQLite in --data-dir)",
    )
    parser.add_argument(
        "--data-dir", default=".edgeplane", help="where the SQLite store lives (default .edgeplane)"
    )
    parser.add_argument(
        "--nats",
        default=os.environ.get("EDGEPLANE_NATS_URL"),
        help="NATS URL (env EDGEPLANE_NATS_URL); without it a nats-server is started on a free loopback port",
    )
    parser.add_argument(
        "--nats-port",
        type=int,
        help="the embedded nats-server's port on 127.0.0.1 (default: a free one; not with --nats)",
    )
    parser.add_argument("--federation", help="federation config file (default: one cluster named 'default')")
    parser.add_argument(
        "--function-policy",
        default="edgeplane",
        help="keep-alive/pre-warm policy for functions: edgeplane (default), hybrid, fixed-10m, no-keepalive",
    )
    parser.add_argument(
        "--scheduler",
        default="edgeplane",
        help="placement profile: edgeplane (default), default (kube-like), binpack (Volcano-like), "
        "or a profile YAML file",
    )
    parser.add_argument(
        "--placement-model",
        metavar="FILE",
        help="an exported PPO placement policy (ONNX, `controlplane policy export --algo ppo`) that "
        "picks each replica's node among the scheduler's candidates (default: the profile's pick)",
    )
    parser.add_argument(
        "--bid-deadline-ms",
        type=float,
        default=50.0,
        help="how long to wait for agents' local-policy bids before placing (0 disables bids)",
    )
    parser.add_argument(
        "--bid-shield-margin",
        default=str(DEFAULT_BID_SHIELD_MARGIN),
        metavar="MARGIN|off",
        help="the bids' SLA shield: a node whose QoS term in the hub's estimate is more than MARGIN "
        f"below the best candidate's is not placed on, whatever its agent bids (default "
        f"{DEFAULT_BID_SHIELD_MARGIN:g}; 'off' trusts the bids)",
    )
    parser.add_argument(
        "--deschedule-budget",
        metavar="MOVES/SECONDS",
        default="2/300",
        help="the descheduler's disruption budget: at most MOVES replicas moved off anomalous nodes "
        "(battery below 15%% on battery power) in any SECONDS (default 2/300; 0/300 turns it off)",
    )
    parser.add_argument("--lease-missed", type=int, default=3, help="heartbeats a node may miss (default 3)")
    parser.add_argument(
        "--hub-lease-s",
        type=float,
        default=15.0,
        help="PostgreSQL: how long the active hub's lease session may be silent before a standby "
        "ends it and takes over (default 15; docs/operations.md)",
    )
    parser.add_argument(
        "--advertise-url",
        metavar="URL",
        help="PostgreSQL: where the other hub replicas reach this hub's API while it leads (they "
        "forward requests there; default http(s)://HOST:PORT, 127.0.0.1 for a wildcard HOST)",
    )
    parser.add_argument(
        "--nats-connect-timeout",
        type=float,
        default=10.0,
        help="seconds to wait for the first NATS connection before giving up at start (default 10)",
    )
    parser.add_argument(
        "--nats-seed",
        default=os.environ.get("EDGEPLANE_NATS_SEED_FILE"),
        help="the hub's nkey seed file for NATS (env EDGEPLANE_NATS_SEED_FILE; "
        "default with the embedded server: <data-dir>/hub.nkey, made on first start)",
    )
    parser.add_argument(
        "--secrets-key",
        default=os.environ.get("EDGEPLANE_SECRETS_KEY_FILE"),
        help="key file that workloads' and functions' env values are encrypted with at rest "
        "(env EDGEPLANE_SECRETS_KEY_FILE; default <data-dir>/secrets.key, made on first start)",
    )
    parser.add_argument("--nats-ca", help="CA file to verify a tls:// NATS server")
    parser.add_argument("--nats-cert", help="client certificate (PEM) for NATS")
    parser.add_argument("--nats-key", help="the private key (PEM) of --nats-cert")
    parser.add_argument(
        "--require-enrolment",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="accept registrations only from enrolled nodes (default: with the embedded server, "
        "or with --nats-seed)",
    )
    parser.add_argument(
        "--allow-memory-above-telemetry",
        action="store_true",
        help="let enrolled nodes offer more memory than their telemetry reports",
    )
    parser.add_argument("--tls-cert", help="serve the API over HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="the private key (PEM) of --tls-cert")
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=50.0,
        help="API requests per second per token, with bursts of 4x (default 50; 0 disables)",
    )
    parser.add_argument(
        "--public-metrics",
        action="store_true",
        help="serve /metrics without a token (default: a token with scope read)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    from controlplane.extender.settings import add_extender_arguments

    add_extender_arguments(parser)


def setup_logging(level: str) -> None:
    """The hub's log: one line per record, no secret in it (edgeplane_contract/logfmt.py)."""
    configure_logging(level)
    # Alembic says every plugin and migration step at INFO; the store logs one line instead.
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("alembic").setLevel(logging.WARNING)


def env_cipher(args: argparse.Namespace, data_dir: Path) -> EnvCipher:
    """The key ``env`` values are sealed with at rest: ``--secrets-key`` (which must exist), else
    ``<data-dir>/secrets.key`` (made on first start); ConfigError when unusable."""
    from controlplane.commands.data_dir import SECRETS_KEY_FILE
    from controlplane.store.secrets import load_env_cipher

    if args.secrets_key:
        return load_env_cipher(Path(args.secrets_key), create=False)
    return load_env_cipher(data_dir / SECRETS_KEY_FILE)


def join_token_ttl(text: str, *, prog: str) -> float | None:
    """A join token's ``--ttl`` in seconds, or None after saying on stderr why it is refused
    (join tokens always expire)."""
    from controlplane.auth.tokens import parse_ttl

    try:
        ttl = parse_ttl(text)
    except ValueError as exc:
        print(f"{prog}: --ttl: {exc}", file=sys.stderr)
        return None
    if ttl is None:
        print(f"{prog}: --ttl: join tokens always expire", file=sys.stderr)
    return ttl


def advertised_url(args: argparse.Namespace, ssl_context: ssl.SSLContext | None) -> str:
    """Where the other replicas reach this hub's API (``--advertise-url``, else HOST:PORT)."""
    if args.advertise_url:
        return str(args.advertise_url).rstrip("/")
    host = "127.0.0.1" if args.host in ("", "0.0.0.0") else "::1" if args.host == "::" else args.host
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if ssl_context is not None else 'http'}://{host}:{args.port}"


async def stop_when(event: asyncio.Event, stop: asyncio.Event) -> None:
    """Set ``stop`` once ``event`` is set (e.g. the hub was fenced: another hub leads the store)."""
    await event.wait()
    stop.set()


def database_url(args: argparse.Namespace) -> str:
    if args.database_url:
        return str(args.database_url)
    return sqlite_url(Path(args.data_dir) / "edgeplane.sqlite3")


def existing_store_url(args: argparse.Namespace, *, prog: str) -> str | None:
    """``database_url(args)`` for the admin commands that must not make a store: None, after one
    line on stderr naming the store looked for and how to point at the hub's, when the URL is a
    SQLite file that does not exist.

    A token written into a stray store made in the wrong directory is one the running hub
    rejects; only ``up``, ``serve`` and ``migrate`` create a store.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    url = database_url(args)
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url  # Store.open says what is wrong with it
    database = parsed.database
    if not parsed.drivername.startswith("sqlite") or not database or database == ":memory:":
        return url
    if database.startswith("file:") or Path(database).is_file():
        return url
    print(
        f"{prog}: no store at {Path(database).resolve()}; point at the hub's with --data-dir DIR "
        "or --database-url URL (env EDGEPLANE_DATABASE_URL); 'controlplane migrate' makes a new one",
        file=sys.stderr,
    )
    return None


def federation_from(args: argparse.Namespace) -> FederationConfig:
    """The federation file's config, or the one-cluster default; ConfigError says what is wrong."""
    if args.federation:
        return load_federation(args.federation)
    return single_cluster()


def chosen_cluster(args: argparse.Namespace) -> ClusterConfig:
    """The cluster ``--cluster`` names (default: the federation's default); ConfigError when the
    federation file is wrong or has no such cluster."""
    federation = federation_from(args)
    name = args.cluster or federation.default_cluster
    config = federation.cluster(name)
    if config is None:
        known = ", ".join(c.name for c in federation.clusters)
        source = args.federation or "<default federation>"
        raise ConfigError(source, "--cluster", f"unknown cluster {name!r} (known: {known})")
    return config


def check_function_policy(args: argparse.Namespace) -> None:
    """Fail at start (ConfigError) on an unknown --function-policy, --scheduler or bad deadline;
    the parsed profile and policy go into ``args.profile`` and ``args.keepalive_policy``, for
    ``hub_settings`` (parsed once, here)."""
    from controlplane.scheduling.profiles import load_profile
    from controlplane.serverless.keepalive import POLICY_NAMES, make_policy

    try:
        args.profile = load_profile(args.scheduler)
    except Exception as exc:
        raise ConfigError("<command line>", "--scheduler", str(exc)) from None
    if args.placement_model:
        from controlplane.learn.chooser import PlacementModelError, load_session

        try:
            load_session(Path(args.placement_model))
        except PlacementModelError as exc:
            raise ConfigError("<command line>", "--placement-model", str(exc)) from None
    if not 0 <= args.bid_deadline_ms <= 10_000:
        raise ConfigError("<command line>", "--bid-deadline-ms", "must be between 0 and 10000")
    args.bid_shield_margin = _shield_margin(args.bid_shield_margin)
    args.deschedule = _deschedule_budget(args.deschedule_budget)
    if not 0 < args.nats_connect_timeout <= 3600:
        raise ConfigError("<command line>", "--nats-connect-timeout", "must be in (0, 3600] seconds")
    if not 5 <= args.hub_lease_s <= 600:
        raise ConfigError("<command line>", "--hub-lease-s", "must be between 5 and 600 seconds")
    advertised = getattr(args, "advertise_url", None)
    if advertised is not None:
        parsed = urllib.parse.urlsplit(advertised)
        if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path.strip("/"):
            raise ConfigError("<command line>", "--advertise-url", "must be http(s)://HOST:PORT (no path)")
    if args.lease_missed < 1:
        raise ConfigError("<command line>", "--lease-missed", "must be at least 1")

    if args.function_policy not in POLICY_NAMES:
        raise ConfigError(
            "<command line>", "--function-policy", f"unknown policy; known: {', '.join(POLICY_NAMES)}"
        )
    try:
        policy = make_policy(args.function_policy)
    except ImportError as exc:  # a learned forecast policy without scikit-learn: one line, no traceback
        raise ConfigError("<command line>", "--function-policy", str(exc)) from None
    args.keepalive_policy = policy


def _deschedule_budget(raw: str) -> tuple[int, float]:
    moves, _, window = raw.partition("/")
    try:
        budget = int(moves), float(window)
    except ValueError:
        budget = (-1, 0.0)
    if not (0 <= budget[0] <= 10_000 and 1 <= budget[1] <= 86_400):
        raise ConfigError(
            "<command line>", "--deschedule-budget", f"must be MOVES/SECONDS, e.g. 2/300 (got {raw!r})"
        )
    return budget


def _shield_margin(raw: str) -> float | None:
    if raw.strip().lower() == "off":
        return None
    try:
        margin = float(raw)
    except ValueError:
        margin = -1.0
    if not 0.0 <= margin <= 2.0:  # R_qos spans [-2, 0]: a wider margin shields nothing
        raise ConfigError(
            "<command line>", "--bid-shield-margin", f"must be a number in [0, 2] or 'off' (got {raw!r})"
        )
    return margin


def hub_settings(
    args: argparse.Namespace, nats_url: str, federation: FederationConfig, nats: NatsSetup | None = None
) -> HubSettings:
    from controlplane.hub.descheduler import DeschedulerSettings
    from controlplane.hub.registration import RegistrationLimits
    from controlplane.hub.service import HubSettings

    return HubSettings(
        nats_url=nats_url,
        federation=federation,
        lease_missed_heartbeats=args.lease_missed,
        nats_connect_within_s=args.nats_connect_timeout,
        function_policy=args.keepalive_policy,
        scheduler=args.profile,
        placement_model=Path(args.placement_model) if args.placement_model else None,
        bid_deadline_ms=args.bid_deadline_ms,
        bid_shield_margin=args.bid_shield_margin,
        nats_seed=nats.seed if nats else None,
        nats_tls=nats.tls if nats else None,
        require_enrolment=nats.require_enrolment if nats else False,
        registration=RegistrationLimits(memory_within_telemetry=not args.allow_memory_above_telemetry),
        descheduler=DeschedulerSettings(
            enabled=args.deschedule[0] > 0, max_moves=args.deschedule[0], window_s=args.deschedule[1]
        ),
    )


@dataclass(slots=True)
class NatsSetup:
    """The hub's side of NATS, worked out at start: its URL and identity, the embedded server
    (not started yet) and the authority that keeps the server's users in step with the store."""

    url: str
    seed: str | None
    tls: NatsTls | None
    require_enrolment: bool
    server: NatsServer | None = None
    authority: NatsAuthority | None = None
    topology: LocalTopology | None = None


def nats_setup(args: argparse.Namespace, data_dir: Path, federation: FederationConfig) -> NatsSetup:
    """From --nats, --nats-seed, --nats-ca/cert/key, --require-enrolment; ConfigError when wrong.

    Without --nats: an embedded server that admits the hub's key (``<data-dir>/hub.nkey``) and
    enrolled nodes only. With --nats and a seed: the hub authenticates, and the authorization
    block an operator applies is kept in ``<data-dir>/nats-authorization.conf``.
    """
    from edgeplane_contract.credentials import NatsTls, ensure_seed, public_key_of, read_seed

    from controlplane.bus.authority import EMBEDDED_CONFIG_FILE, EXTERNAL_CONFIG_FILE, NatsAuthority
    from controlplane.natsd import NatsServer

    tls = NatsTls.from_options(args.nats_ca, args.nats_cert, args.nats_key)
    seed = read_seed(Path(args.nats_seed)) if args.nats_seed else None
    servers, sites = getattr(args, "nats_cluster", None), getattr(args, "sites", None)
    if servers is not None or sites is not None:
        from controlplane.bus.topology import LocalTopology

        seed = ensure_seed(data_dir / HUB_SEED_FILE)
        topology = LocalTopology(
            data_dir / "nats",
            hub_public_key=public_key_of(seed),
            federation=federation,
            sites=[c.name for c in federation.clusters] if sites else [],
            servers=servers or 1,
        )
        topology.authority.write([])
        return NatsSetup(
            url=topology.hub_url,
            seed=seed,
            tls=None,
            require_enrolment=True,
            authority=topology.authority,
            topology=topology,
        )
    port = getattr(args, "nats_port", None)
    if port is not None:
        if args.nats:
            raise ConfigError(
                "<command line>", "--nats-port", "sets the embedded server's port; not with --nats"
            )
        check_free_port("--nats-port", port)
    if args.nats:
        require = args.require_enrolment if args.require_enrolment is not None else seed is not None
        if require and seed is None:
            raise ConfigError("<command line>", "--require-enrolment", "with --nats it needs --nats-seed")
        setup = NatsSetup(url=args.nats, seed=seed, tls=tls, require_enrolment=require)
        if seed is not None:
            setup.authority = NatsAuthority(
                config_path=data_dir / EXTERNAL_CONFIG_FILE,
                hub_public_key=public_key_of(seed),
                federation=federation,
                nats_url=args.nats,
            )
        return setup
    seed = seed or ensure_seed(data_dir / HUB_SEED_FILE)
    server = NatsServer(
        port=port, log_file=data_dir / "nats-server.log", config_file=data_dir / EMBEDDED_CONFIG_FILE
    )
    authority = NatsAuthority(
        config_path=data_dir / EMBEDDED_CONFIG_FILE,
        hub_public_key=public_key_of(seed),
        federation=federation,
        nats_url=server.url,
        listen=(server.host, server.port),
        server=server,
    )
    authority.write([])  # the hub alone; enrolled nodes follow once the store is open
    require = args.require_enrolment if args.require_enrolment is not None else True
    return NatsSetup(
        url=server.url, seed=seed, tls=tls, require_enrolment=require, server=server, authority=authority
    )


def start_embedded_nats(nats: NatsSetup) -> NatsServer | LocalTopology | None:
    """The embedded nats-server (or servers: ``up --nats-cluster/--sites``) started, or None with
    --nats; StartupError (one line) when one exits or does not listen (its port taken since it
    was checked, a bad config)."""
    from controlplane.errors import StartupError

    if nats.topology is not None:
        try:
            return nats.topology.start()
        except (RuntimeError, TimeoutError, FileNotFoundError) as exc:
            raise StartupError(f"cannot start the embedded nats-servers: {exc}") from exc
    if nats.server is None:
        return None
    try:
        return nats.server.start()
    except (RuntimeError, TimeoutError, FileNotFoundError) as exc:
        raise StartupError(f"cannot start the embedded nats-server: {exc}") from exc


def check_free_port(flag: str, port: int, host: str = "127.0.0.1") -> None:
    """A port given on the command line, in range and free now (ConfigError naming ``flag``): a
    taken port is one line at start, not a child's exit later. Bound as servers bind
    (SO_REUSEADDR): a port in TIME_WAIT is no conflict."""
    import socket

    if not 1 <= port <= 65535:
        raise ConfigError("<command line>", flag, f"must be between 1 and 65535, got {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                "<command line>", flag, f"{host}:{port} is not free ({exc.strerror or exc})"
            ) from None


ADMIN_TOKEN_FILE = "admin.token"


def api_auth(args: argparse.Namespace) -> AuthSettings:
    from controlplane.api.auth import AuthSettings

    if not 0 <= args.rate_limit <= 1_000_000:
        raise ConfigError("<command line>", "--rate-limit", "must be between 0 and 1000000")
    return AuthSettings(
        rate_per_s=args.rate_limit,
        burst=max(1, int(args.rate_limit * 4)),
        public_metrics=args.public_metrics,
    )


def api_ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The API's TLS context from --tls-cert/--tls-key; ConfigError names what is wrong."""
    if not args.tls_cert and not args.tls_key:
        return None
    if not args.tls_cert or not args.tls_key:
        missing = "--tls-cert" if not args.tls_cert else "--tls-key"
        raise ConfigError("<command line>", missing, "--tls-cert and --tls-key go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(args.tls_cert, "--tls-cert/--tls-key", f"cannot load: {exc}") from None
    return context


async def ensure_admin_token(store: Store, data_dir: Path) -> tuple[Path, bool]:
    """``<data-dir>/admin.token`` holding a valid admin token (mode 0600); True when made now.

    Kept across restarts while it still authenticates; replaced when revoked or lost.
    """
    from controlplane.store.identities import IdentityStore

    identities = IdentityStore(store)
    path = data_dir / ADMIN_TOKEN_FILE
    if path.exists():
        principal = await identities.authenticate(path.read_text().strip())
        if principal is not None and principal.allows("admin"):
            return path, False
    new = await identities.create_api_token("admin", ["admin"])
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(new.token + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path, True
