"""The client config file: where the hub is and which token to send (like a kubeconfig).

``controlplane up`` writes ``<data-dir>/client.yaml`` (mode 0600) beside ``admin.token``::

    url: http://127.0.0.1:8080
    token_file: admin.token      # relative paths are relative to this file's directory
    ca_file: /path/to/cert.pem   # only when the API is served over HTTPS

``token: <secret>`` may stand instead of ``token_file``. The file used is the first of:
``--config FILE``, ``$EDGEPLANE_CONFIG``, ``./.edgeplane/client.yaml``, then
``$XDG_CONFIG_HOME/edgeplane/client.yaml`` (default ``~/.config/edgeplane/client.yaml``);
``--url``, ``--token-file`` and ``--ca-file`` override what it says, and with ``--url`` and
``--token-file`` both given no file is needed.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CLIENT_CONFIG_FILE",
    "CONFIG_ENV",
    "ClientConfig",
    "ClientConfigError",
    "Overrides",
    "candidate_paths",
    "load_client_config",
    "write_client_config",
]

CLIENT_CONFIG_FILE = "client.yaml"
CONFIG_ENV = "EDGEPLANE_CONFIG"
_KEYS = ("url", "token_file", "token", "ca_file")


class ClientConfigError(Exception):
    """The config is missing or wrong; the message names the file (never a token)."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Where the hub is and how to authenticate; ``source`` says where that came from."""

    url: str
    token: str = field(repr=False)  # a traceback or a debug print must not show it
    ca_file: str | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the command line says (None: not given)."""

    config: str | None = None
    url: str | None = None
    token_file: str | None = None
    ca_file: str | None = None


def candidate_paths(
    explicit: str | None, environ: Mapping[str, str], cwd: Path, home: Path
) -> tuple[list[Path], str]:
    """The files to look for, in order, and what chose them (for the error message)."""
    if explicit:
        return [Path(explicit)], "--config"
    if environ.get(CONFIG_ENV):
        return [Path(environ[CONFIG_ENV])], f"${CONFIG_ENV}"
    config_home = Path(environ["XDG_CONFIG_HOME"]) if environ.get("XDG_CONFIG_HOME") else home / ".config"
    return [
        cwd / ".edgeplane" / CLIENT_CONFIG_FILE,
        config_home / "edgeplane" / CLIENT_CONFIG_FILE,
    ], "default"


def load_client_config(
    overrides: Overrides,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> ClientConfig:
    """The config from the first file found, with the command line's overrides applied."""
    environ = os.environ if environ is None else environ
    if overrides.url and overrides.token_file and not overrides.config:
        token = _read_token(Path(overrides.token_file), "--token-file")
        return ClientConfig(overrides.url.rstrip("/"), token, overrides.ca_file, "command line")
    paths, chosen_by = candidate_paths(overrides.config, environ, cwd or Path.cwd(), home or Path.home())
    path = next((p for p in paths if p.is_file()), None)
    if path is None:
        looked = ", ".join(str(p) for p in paths)
        hint = (
            ""
            if chosen_by != "default"
            else "; run `controlplane up`, or pass --config FILE or --url and --token-file"
        )
        raise ClientConfigError(f"no client config at {looked} (from {chosen_by}){hint}")
    values = _parse(path)
    url = overrides.url or values.get("url")
    if not url:
        raise ClientConfigError(f"{path}: 'url' is missing")
    if overrides.token_file:
        token = _read_token(Path(overrides.token_file), "--token-file")
    elif values.get("token_file"):
        token = _read_token(path.parent / values["token_file"], f"{path}: token_file")
    elif values.get("token"):
        _warn_if_readable_by_others(path)
        token = values["token"]
    else:
        raise ClientConfigError(f"{path}: 'token_file' (or 'token') is missing")
    ca_file = overrides.ca_file or (str(path.parent / values["ca_file"]) if values.get("ca_file") else None)
    return ClientConfig(url.rstrip("/"), token, ca_file, str(path))


def _parse(path: Path) -> dict[str, str]:
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ClientConfigError(f"{path}: cannot read: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise ClientConfigError(f"{path}: must be a mapping with keys {', '.join(_KEYS)}")
    for key, value in data.items():
        if key not in _KEYS:
            raise ClientConfigError(f"{path}: unknown key {key!r} (allowed: {', '.join(_KEYS)})")
        if not isinstance(value, str) or not value:
            # The value is not shown: it may be the token.
            raise ClientConfigError(f"{path}: {key!r} must be a non-empty string")
    return {str(k): str(v) for k, v in data.items()}


def _read_token(path: Path, what: str) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientConfigError(f"{what}: cannot read the token file {path}: {type(exc).__name__}") from None
    if not token:
        raise ClientConfigError(f"{what}: the token file {path} is empty")
    return token


def _warn_if_readable_by_others(path: Path) -> None:
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(f"warning: {path} holds a token and others may read it (chmod 600)", file=sys.stderr)


def write_client_config(data_dir: Path, url: str, token_file: Path, ca_file: str | None = None) -> Path:
    """``<data_dir>/client.yaml`` (mode 0600) for ``url`` with ``token_file``; rewritten at every
    ``up``, since the port may change. The token file is named relative to the config when it
    lives beside it, so the directory can move."""
    path = data_dir / CLIENT_CONFIG_FILE
    token_ref = (
        token_file.name if token_file.parent.resolve() == data_dir.resolve() else str(token_file.resolve())
    )
    values = {"url": url, "token_file": token_ref}
    if ca_file:
        values["ca_file"] = str(Path(ca_file).resolve())
    text = "# written by `controlplane up`; read by `controlplane get|describe|apply|delete|invoke|top`\n"
    text += yaml.safe_dump(values, sort_keys=False)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path
