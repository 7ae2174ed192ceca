"""The extender listener's options (``--extender-listen`` and its TLS), parsed once at start.

kube-scheduler's extender client can present a client certificate (``tlsConfig``) but no bearer
token, so the extender is not on the authenticated API: it has a listener of its own, off unless
asked, on loopback by default; elsewhere only with client-certificate TLS.
"""

from __future__ import annotations

import argparse
import ipaddress
import ssl
from dataclasses import dataclass

from controlplane.errors import ConfigError
from controlplane.extender.translate import NODE_LABEL

__all__ = ["ExtenderSettings", "add_extender_arguments", "extender_settings", "is_loopback"]

_SOURCE = "<command line>"


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    """Where and how the extender listens."""

    host: str
    port: int
    ssl_context: ssl.SSLContext | None = None
    node_label: str = NODE_LABEL


def add_extender_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--extender-listen",
        metavar="HOST:PORT",
        help="serve the Kubernetes scheduler extender (filter, prioritize) on this address "
        "(off by default; a bare :PORT is loopback; a non-loopback host needs the three TLS options)",
    )
    parser.add_argument("--extender-tls-cert", help="the extender's server certificate (PEM)")
    parser.add_argument("--extender-tls-key", help="the private key (PEM) of --extender-tls-cert")
    parser.add_argument(
        "--extender-client-ca",
        help="CA (PEM) that kube-scheduler's client certificate must chain to (required off loopback)",
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost may resolve anywhere
        return False


def extender_settings(args: argparse.Namespace) -> ExtenderSettings | None:
    """The extender's settings, None when not asked for; ConfigError (one line) when wrong."""
    cert, key, client_ca = args.extender_tls_cert, args.extender_tls_key, args.extender_client_ca
    if not args.extender_listen:
        if cert or key or client_ca:
            raise ConfigError(_SOURCE, "--extender-tls-cert", "the TLS options need --extender-listen")
        return None
    host, port = _host_port(args.extender_listen)
    if bool(cert) != bool(key):
        missing = "--extender-tls-key" if cert else "--extender-tls-cert"
        raise ConfigError(_SOURCE, missing, "--extender-tls-cert and --extender-tls-key go together")
    if client_ca and not cert:
        raise ConfigError(_SOURCE, "--extender-client-ca", "needs --extender-tls-cert and --extender-tls-key")
    if not is_loopback(host) and not client_ca:
        raise ConfigError(
            _SOURCE,
            "--extender-listen",
            f"{host} is not a loopback address: serving the extender there needs client-certificate "
            "TLS (--extender-tls-cert, --extender-tls-key, --extender-client-ca)",
        )
    return ExtenderSettings(host, port, _ssl_context(cert, key, client_ca) if cert else None)


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(_SOURCE, "--extender-listen", f"expected HOST:PORT, got {text!r}")
    return host, int(port_text)


def _ssl_context(cert: str, key: str, client_ca: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(cert, "--extender-tls-cert/--extender-tls-key", f"cannot load: {exc}") from None
    if client_ca:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(client_ca, "--extender-client-ca", f"cannot load: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context
