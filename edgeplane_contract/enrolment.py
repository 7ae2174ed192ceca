"""An agent's credentials file: who the agent is on NATS, as the hub hands it out.

``controlplane agent-credentials create`` writes one; an agent that joined with a token keeps the
hub's answer in ``<work_dir>/credentials.json`` (0600) in the same format, and ``controlplane up``
reads that file back to decide whether a local agent may reuse it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edgeplane_contract.credentials import public_key_of, write_private
from edgeplane_contract.errors import ConfigError

__all__ = ["CREDENTIALS_FILE", "AgentCredentials", "load_credentials"]

CREDENTIALS_FILE = "credentials.json"
_FIELDS = ("node", "cluster", "seed", "nats_url", "subject_prefix", "inbox_prefix")


@dataclass(frozen=True, slots=True)
class AgentCredentials:
    """Who this agent is on NATS. ``nats_url`` may be empty (then ``--nats`` or the config)."""

    node: str
    cluster: str
    seed: str = field(repr=False)
    nats_url: str
    subject_prefix: str
    inbox_prefix: str
    # The hub's nkey public key: what the agent verifies policy versions with (""; unknown, as
    # in files written before it was kept: the agent then refuses policy versions).
    hub_public_key: str = ""

    @property
    def public_key(self) -> str:
        return public_key_of(self.seed)

    def save(self, path: Path) -> None:
        write_private(path, json.dumps({"v": 1, **asdict(self)}, indent=2) + "\n")


def load_credentials(path: Path) -> AgentCredentials:
    """Read a credentials file; ConfigError (file, key, reason) when it is unusable."""
    source = str(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(source, "<file>", f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(source, "<file>", f"not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("v") != 1:
        raise ConfigError(source, "v", "not an edgeplane credentials file (version 1)")
    values: dict[str, str] = {}
    for key in _FIELDS:
        value = raw.get(key, "")
        if not isinstance(value, str) or (not value and key != "nats_url"):
            raise ConfigError(source, key, "is required and must be a string")
        values[key] = value
    try:
        public_key_of(values["seed"])
    except ValueError as exc:
        raise ConfigError(source, "seed", str(exc)) from None
    hub_key = raw.get("hub_public_key", "")
    if not isinstance(hub_key, str):
        raise ConfigError(source, "hub_public_key", "must be a string")
    if path.stat().st_mode & 0o077:
        raise ConfigError(source, "<file>", "holds a secret but others may read it: chmod 600 it")
    return AgentCredentials(**values, hub_public_key=hub_key)
