"""Private gids: each unit (or function version) in a group of its own, so that units running as
the same user still cannot enter one another's work dirs."""

from __future__ import annotations

import grp
import hashlib
from collections.abc import Callable

__all__ = ["PRIVATE_GIDS", "GroupPool", "gids_mapped"]

# Private gids: above every login and systemd range (dynamic users, nspawn containers end at
# 0x6FFFFFFF), below 2^31. A gid named in the group database is skipped.
PRIVATE_GIDS = range(0x7000_0000, 0x7000_0000 + 2**20)


def gids_mapped(gid_map: str, gids: range) -> bool:
    """Whether ``/proc/self/gid_map`` (``inside outside count`` lines) maps all of ``gids``."""
    for line in gid_map.splitlines():
        parts = line.split()
        if len(parts) == 3:
            inside, _, count = (int(p) for p in parts)
            if inside <= gids.start and gids.stop <= inside + count:
                return True
    return False


class GroupPool:
    """Private gids keyed by unit (or function version): ``hash(key)`` into :data:`PRIVATE_GIDS`,
    probing past gids in use here or named in the group database. Reference counted."""

    def __init__(self, gids: range = PRIVATE_GIDS, *, named: Callable[[int], bool] | None = None) -> None:
        self.gids = gids
        self.named = named or _gid_named
        self._held: dict[str, tuple[int, int]] = {}  # key -> (gid, references)

    def acquire(self, key: str) -> int:
        if key in self._held:
            gid, refs = self._held[key]
            self._held[key] = (gid, refs + 1)
            return gid
        used = {gid for gid, _ in self._held.values()}
        start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % len(self.gids)
        for step in range(len(self.gids)):
            gid = self.gids[(start + step) % len(self.gids)]
            if gid not in used and not self.named(gid):
                self._held[key] = (gid, 1)
                return gid
        raise OSError("no free private gid")

    def release(self, key: str) -> None:
        if key not in self._held:
            return
        gid, refs = self._held[key]
        if refs <= 1:
            del self._held[key]
        else:
            self._held[key] = (gid, refs - 1)


def _gid_named(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True
