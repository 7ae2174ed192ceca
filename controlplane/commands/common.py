"""Arguments and settings shared by ``serve`` and ``up``."""

from __future__ import annotations

import argparse
import logging
import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from controlplane.errors import ConfigError
from controlplane.federation.config import FederationConfig, load_federation, single_cluster
from controlplane.store.db import sqlite_url

if TYPE_CHECKING:
    from controlplane.api.auth import AuthSettings
    from controlplane.hub.service import HubSettings
    from controlplane.store.store import Store

__all__ = [
    "ADMIN_TOKEN_FILE",
    "add_hub_arguments",
    "api_auth",
    "api_ssl_context",
    "check_function_policy",
    "database_url",
    "ensure_admin_token",
    "federation_from",
    "hub_settings",
    "mask_url",
    "setup_logging",
]


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
    parser.add_argument("--federation", help="federation config file (default: one cluster named 'default')")
    parser.add_argument(
        "--function-policy",
        default="edgeplane",
        help="keep-alive/pre-warm policy for functions: edgeplane (default), hybrid, fixed-10m, no-keepalive",
    )
    parser.add_argument(
        "--scheduler",
        default="edgeplane",
        help="placement profile: edgeplane (default), default (kube-like), binpack (Volcano-like), or fit",
    )
    parser.add_argument(
        "--bid-deadline-ms",
        type=float,
        default=50.0,
        help="how long to wait for agents' local-policy bids before placing (0 disables bids)",
    )
    parser.add_argument("--lease-missed", type=int, default=3, help="heartbeats a node may miss (default 3)")
    parser.add_argument("--tls-cert", help="serve the API over HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="the private key (PEM) of --tls-cert")
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=50.0,
        help="API requests per second per token, with bursts of 4x (default 50; 0 disables)",
    )
    parser.add_argument("--log-level", default="INFO")


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def database_url(args: argparse.Namespace) -> str:
    if args.database_url:
        return str(args.database_url)
    return sqlite_url(Path(args.data_dir) / "edgeplane.sqlite3")


def federation_from(args: argparse.Namespace) -> FederationConfig:
    """The federation file's config, or the one-cluster default; ConfigError says what is wrong."""
    if args.federation:
        return load_federation(args.federation)
    return single_cluster()


def check_function_policy(args: argparse.Namespace) -> None:
    """Fail at start (ConfigError) on an unknown --function-policy, --scheduler or bad deadline."""
    from controlplane.scheduling.profiles import load_profile
    from controlplane.serverless.keepalive import POLICY_NAMES

    if args.scheduler != "fit":
        try:
            load_profile(args.scheduler)
        except Exception as exc:
            raise ConfigError("<command line>", "--scheduler", str(exc)) from None
    if not 0 <= args.bid_deadline_ms <= 10_000:
        raise ConfigError("<command line>", "--bid-deadline-ms", "must be between 0 and 10000")

    if args.function_policy not in POLICY_NAMES:
        raise ConfigError(
            "<command line>", "--function-policy", f"unknown policy; known: {', '.join(POLICY_NAMES)}"
        )


def hub_settings(args: argparse.Namespace, nats_url: str, federation: FederationConfig) -> HubSettings:
    from controlplane.hub.service import HubSettings

    return HubSettings(
        nats_url=nats_url,
        federation=federation,
        lease_missed_heartbeats=args.lease_missed,
        function_policy=args.function_policy,
        scheduler=args.scheduler,
        bid_deadline_ms=args.bid_deadline_ms,
    )


ADMIN_TOKEN_FILE = "admin.token"


def mask_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (for banners and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def api_auth(args: argparse.Namespace) -> AuthSettings:
    from controlplane.api.auth import AuthSettings

    if not 0 <= args.rate_limit <= 1_000_000:
        raise ConfigError("<command line>", "--rate-limit", "must be between 0 and 1000000")
    return AuthSettings(rate_per_s=args.rate_limit, burst=max(1, int(args.rate_limit * 4)))


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
