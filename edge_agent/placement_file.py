"""The state file of restartable placements (``placements.json``): what a restarted agent resumes.

Written atomically, 0600 (the specs hold the workloads' env values); an unreadable file is set
aside as ``.corrupt`` and nothing is resumed from it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

from edgeplane_contract.messages import MessageError, RunSpec, parse

__all__ = ["PlacementFile", "SavedPlacement"]

log = logging.getLogger("edgeplane.agent.executor")


class SavedPlacement(NamedTuple):
    """One entry of the file, parsed; ``item`` is the raw entry (written back while undecided)."""

    placement_id: str
    workload_id: str
    spec: RunSpec
    restarts: int
    item: dict[str, Any]


class PlacementFile:
    """Reads and writes the state file at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # What this object last wrote: the same entries again are not rewritten (most starts and
        # ends change nothing here, a placement that is not restartable is not in the file).
        self._written: str | None = None

    def write(self, items: list[dict[str, Any]]) -> None:
        """Replace the file's entries (atomically); a write error is logged, not raised."""
        text = json.dumps({"version": 1, "placements": items})
        if text == self._written:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            # 0600: the specs hold the workloads' env values.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)  # a leftover .tmp keeps its old mode through O_CREAT
            with open(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, self.path)
            self._written = text
        except OSError as exc:  # a full disk must not stop the work; resuming is best effort
            log.warning("could not write %s: %s", self.path, exc)

    def read(self) -> list[SavedPlacement]:
        """The entries that parse (the others are logged and skipped)."""
        found = []
        for item in self._load():
            try:
                spec = parse(item["spec"], RunSpec)
                placement_id, workload_id = str(item["placement_id"]), str(item["workload_id"])
                restarts = int(item.get("restarts", 0))
            except (MessageError, KeyError, TypeError, ValueError) as exc:
                log.warning("skipping an unreadable entry of %s: %s", self.path, exc)
                continue
            found.append(SavedPlacement(placement_id, workload_id, spec, restarts, item))
        return found

    def _load(self) -> list[dict[str, Any]]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            items = raw["placements"]
            if not isinstance(items, list):
                raise ValueError("placements is not a list")
            return items
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._written = None
            kept = self.path.with_name(self.path.name + ".corrupt")
            with contextlib.suppress(OSError):
                os.replace(self.path, kept)
            log.warning("unreadable %s (%s): kept as %s, nothing resumed", self.path, exc, kept.name)
            return []
