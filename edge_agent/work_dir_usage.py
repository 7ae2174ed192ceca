"""How much a unit's work dir holds, and the watch that ends a unit over its ephemeral-storage limit.

Kubernetes' kubelet measures each pod's emptyDir and writable layer by walking it (``du``) and
evicts a pod over its ``ephemeral-storage`` limit; the agent does the same for each placement's and
function instance's work dir. The walk counts allocated blocks (``st_blocks * 512``: a sparse file
counts what it really takes), follows no symlink, counts a hard-linked inode once, and is bounded:
it stops as soon as the total is over the limit, and after ``max_entries`` entries (a tree larger
than that is measured by its first part, and its directories' own blocks count too).
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

__all__ = [
    "EXCEEDED",
    "MAX_ENTRIES",
    "exceeded_message",
    "free_bytes",
    "usage_bytes",
    "watch_work_dir",
]

# The reason a unit over its limit is ended with (first word of its message, as the issue asks).
EXCEEDED = "ephemeral_storage_exceeded"
# Entries one measurement looks at, at most: bounds its cost (a few ms per 10,000 entries).
MAX_ENTRIES = 100_000


def usage_bytes(path: Path, *, stop_above: int | None = None, max_entries: int = MAX_ENTRIES) -> int:
    """Bytes allocated under ``path`` (itself included), without following symlinks.

    Stops early once the sum exceeds ``stop_above`` or ``max_entries`` entries were seen; entries
    that vanish or cannot be read while it walks count nothing (a unit keeps writing meanwhile)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    entries = 0
    stack = [str(path)]
    try:
        total += os.lstat(path).st_blocks * 512
    except OSError:
        return 0
    while stack:
        folder = stack.pop()
        try:
            scan = os.scandir(folder)
        except OSError:
            continue
        with scan:
            for entry in scan:
                entries += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
                elif info.st_nlink > 1:
                    key = (info.st_dev, info.st_ino)
                    if key in seen:
                        continue
                    seen.add(key)
                total += info.st_blocks * 512
                if (stop_above is not None and total > stop_above) or entries >= max_entries:
                    return total
    return total


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged user may still write on the file system holding ``path`` (0 if it
    cannot be read): what the node offers its units as ephemeral storage."""
    try:
        found = os.statvfs(path)
    except OSError:
        return 0
    return found.f_bavail * found.f_frsize


def exceeded_message(usage: int, limit: int) -> str:
    """The message of a unit ended for its work dir: the reason first, then usage and limit."""
    return (
        f"{EXCEEDED}: the work dir holds {usage / 2**20:.1f} MiB ({usage} bytes), "
        f"over its ephemeral_storage limit of {limit / 2**20:.1f} MiB ({limit} bytes)"
    )


async def watch_work_dir(path: Path, limit: int, *, interval_s: float = 1.0) -> int:
    """Measure ``path`` every ``interval_s`` (in a thread: a large tree never blocks the loop);
    returns the usage once it is over ``limit``. Runs until then or until cancelled. The first
    measurement comes after one interval: a unit that ends sooner (most) costs no walk."""
    while True:
        await asyncio.sleep(interval_s)
        usage = await asyncio.to_thread(usage_bytes, path, stop_above=limit)
        if usage > limit:
            return usage
