"""Exit records: a placement process's end, written by the unit spawner as it reaps the process.

Why: between a unit's exit and the durable record of its final state in the agent's outbox lie
the spawner's message, the agent's loop, the cleanup of the unit's cgroups and the outbox write.
An agent killed in that window used to lose the exit: its next run did not know the placement had
ended, the hub saw the placement missing from the registration, ended it ``Lost`` and ran the
replica again (a workload that had finished ran twice; ``bench/chaos.py`` saw it). The spawner is
a separate process that reaps the unit directly, so it writes the record first
(``<placement>.json`` in a tmpfs directory of the agent's, or under the work dir:
:meth:`ExitRecords.for_work_dir`; :func:`edge_agent.spawner_process.write_exit_record`)
and only then tells the agent; the agent removes the record once the final state is in its outbox.
An agent that starts and finds records turns them into final states (:meth:`ExitRecords.read`)
before it registers, so the hub gets ``Succeeded`` or ``Failed`` instead of a missing placement.

What remains at least once: a unit killed because its agent died (the spawner dies with the
agent, the unit with the spawner: no record, the hub runs it again) and a unit whose side effect
happened just before the agent's death while it had not yet exited. Only an idempotent workload
closes those. Units forked by the agent itself (no spawner) have no record.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ExitRecord", "ExitRecords"]

log = logging.getLogger("edgeplane.agent.exits")

EXITS_DIR = "exits"
SHARED_MEMORY = Path("/dev/shm")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}")


@dataclass(frozen=True)
class ExitRecord:
    """One recorded exit: the run's placement, its restart count, and how its process ended."""

    placement_id: str
    workload_id: str
    restarts: int
    started_at: float | None
    code: int  # as Popen.returncode: negative for a signal
    finished_at: float

    @property
    def exit_code(self) -> int:
        """The shell's form (128 + signal for a killed process), as placement states carry it."""
        return 128 - self.code if self.code < 0 else self.code


class ExitRecords:
    """The directory of an agent's exit records (``directory``; :meth:`for_work_dir` picks it)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    @classmethod
    def for_work_dir(cls, work_dir: Path, *, memory_root: Path = SHARED_MEMORY) -> ExitRecords:
        """The records of the agent on ``work_dir``: in memory (tmpfs, ``/dev/shm``) where it can
        be had safely, else in ``<work_dir>/exits``.

        Why memory: a record must outlive the agent's process, not the machine (a reboot ends the
        units too), and creating, renaming and removing a file per unit on this development
        machine's ext4 (mounted with ``discard``) cost 0.2-0.7 ms of CPU, against 0.03 on tmpfs.
        The directory is named after the uid and the work dir, made 0700 by this process; one
        that exists and is not a directory of ours with mode 0700 (another user's trap in a
        world-writable place) is not used."""
        resolved = str(work_dir.resolve())
        name = f"edgeplane-exits-{os.getuid()}-{hashlib.sha256(resolved.encode()).hexdigest()[:20]}"
        if memory_root.is_dir():
            candidate = memory_root / name
            with contextlib.suppress(FileExistsError, OSError):
                candidate.mkdir(mode=0o700)
            try:
                info = candidate.lstat()
            except OSError:
                info = None
            if (
                info is not None
                and stat.S_ISDIR(info.st_mode)
                and info.st_uid == os.getuid()
                and stat.S_IMODE(info.st_mode) == 0o700
            ):
                return cls(candidate)
        return cls(work_dir / EXITS_DIR)

    def path_for(self, placement_id: str) -> Path:
        name = (
            placement_id
            if _SAFE_NAME.fullmatch(placement_id)
            else hashlib.sha256(placement_id.encode()).hexdigest()
        )
        return self.directory / f"{name}.json"

    def request(
        self, placement_id: str, workload_id: str, restarts: int, started_at: float | None
    ) -> dict[str, Any]:
        """What a start asks the spawner to write when the process ends (``exit_record``)."""
        fields = {"placement_id": placement_id, "workload_id": workload_id, "restarts": restarts}
        if started_at is not None:
            fields["started_at"] = started_at
        return {"path": str(self.path_for(placement_id)), "fields": fields}

    def clear(self, placement_id: str) -> None:
        """The exit is in the agent's hands now (its final state in the outbox, or restarted)."""
        with contextlib.suppress(FileNotFoundError):
            self.path_for(placement_id).unlink()

    def close(self) -> None:
        """At the agent's clean stop: the directory goes if no record is left in it."""
        with contextlib.suppress(OSError):
            self.directory.rmdir()

    def read(self) -> list[ExitRecord]:
        """Every complete record (a leftover temporary file or an unreadable record is removed:
        that exit is then handled as if never recorded, at least once)."""
        found: list[ExitRecord] = []
        for path in sorted(self.directory.iterdir()):
            if not path.name.endswith(".json"):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                started = raw.get("started_at")
                found.append(
                    ExitRecord(
                        placement_id=str(raw["placement_id"]),
                        workload_id=str(raw["workload_id"]),
                        restarts=int(raw.get("restarts", 0)),
                        started_at=float(started) if isinstance(started, (int, float)) else None,
                        code=int(raw["code"]),
                        finished_at=float(raw["finished_at"]),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("dropping an unreadable exit record %s: %s", path.name, exc)
                with contextlib.suppress(OSError):
                    path.unlink()
        return found
