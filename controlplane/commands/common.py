"""Arguments and settings shared by ``serve`` and ``up``."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from controlplane.errors import ConfigError
from controlplane.federation.config import FederationConfig, load_federation, single_cluster
from controlplane.store.db import sqlite_url

if TYPE_CHECKING:
    from controlplane.hub.service import HubSettings

__all__ = [
    "add_hub_arguments",
    "check_function_policy",
    "database_url",
    "federation_from",
    "hub_settings",
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
