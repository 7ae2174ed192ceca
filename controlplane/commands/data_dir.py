"""The hub's data dir, private to the hub: directories 0700, files 0600.

It holds the SQLite store (and its ``-wal``/``-shm``), the NATS server's log and configuration,
the hub's nkey seed, the admin token, the client config, the secrets key and, with ``up``, the
local agents' own work dirs. ``serve`` and ``up`` set the process umask to 077 (files the hub,
SQLite, nats-server and the local agents create later are private from birth) and chmod what an
older version left readable. User code never needs a path through this directory: ``up`` puts the
agents' unit sandboxes beside it (``<data-dir>.sandboxes/<node>``, see ``sandbox_root`` in
``edge_agent/config.py``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from controlplane.errors import ConfigError

__all__ = [
    "HUB_UMASK",
    "PRIVATE_NAMES",
    "SECRETS_KEY_FILE",
    "make_private",
    "private_data_dir",
    "sandboxes_dir",
]

HUB_UMASK = 0o077
SECRETS_KEY_FILE = "secrets.key"
# What the hub (and older versions) wrote here; a data dir may be shared with other files (even
# be ".") whose modes are not the hub's business, so only these are chmodded at start.
PRIVATE_NAMES = (
    "edgeplane.sqlite3",
    "edgeplane.sqlite3-wal",
    "edgeplane.sqlite3-shm",
    "edgeplane.sqlite3-journal",
    "nats-server.log",
    "nats-server.conf",
    "nats-authorization.conf",
    "hub.nkey",
    "admin.token",
    "client.yaml",
    SECRETS_KEY_FILE,
    "agents",  # up's agents' work dirs, and the sandboxes older versions kept beside them
)


def private_data_dir(data_dir: Path) -> Path:
    """Set the umask to 077 for this process (and its children), make ``data_dir`` (0700) and
    chmod what an older version left readable there; ConfigError when it cannot be made."""
    os.umask(HUB_UMASK)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(data_dir, 0o700)
    except OSError as exc:
        raise ConfigError(
            str(data_dir), "--data-dir", f"cannot make it private: {exc.strerror or exc}"
        ) from None
    for name in PRIVATE_NAMES:
        make_private(data_dir / name)
    return data_dir


def make_private(path: Path) -> None:
    """Take group and other bits off ``path`` and, for a directory, everything under it
    (symlinks are skipped, never followed); missing paths are fine."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return
    if stat.S_ISLNK(mode):
        return
    _strip(path, mode)
    if stat.S_ISDIR(mode):
        for root, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                child = Path(root) / name
                with contextlib.suppress(OSError):
                    child_mode = child.lstat().st_mode
                    if not stat.S_ISLNK(child_mode):
                        _strip(child, child_mode)


def _strip(path: Path, mode: int) -> None:
    bits = stat.S_IMODE(mode)
    if bits & 0o077:
        with contextlib.suppress(OSError):
            os.chmod(path, bits & 0o700)


def sandboxes_dir(data_dir: Path) -> Path:
    """Where ``up``'s agents keep their units' work dirs: beside the data dir, never in it."""
    absolute = data_dir.absolute()
    return absolute.with_name(absolute.name + ".sandboxes")
