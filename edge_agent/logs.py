"""The node's logs: what placements wrote (``<work_dir>/logs/<placement>.log``) and function
instances' stderr (``<work_dir>/functions/<name>-v<version>/<instance>.log``), served to the hub
in bounded chunks (``logs`` requests) and kept within limits.

Limits: a log over ``max_bytes`` is trimmed to its newest half (copy-truncate, as logrotate does:
the writers append with O_APPEND, so they go on at the new end; a line written during the copy
may be lost); the bytes dropped are remembered beside the log (``<log>.dropped``) so offsets stay
logical. Logs of work that ended are deleted ``retention_s`` after their last write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from nats.aio.msg import Msg

from edgeplane_contract.codec import MessageError, decode, encode
from edgeplane_contract.logs import LOG_ID, MAX_LOG_CHUNK, MAX_TAIL_LINES, LogChunkV1, LogRequestV1
from edgeplane_contract.transport import PAYLOAD_MARGIN

from edge_agent.hub_link import HubLink

__all__ = ["DEFAULT_LOG_MAX_BYTES", "DEFAULT_LOG_RETENTION_S", "LogFiles", "LogService"]

log = logging.getLogger("edgeplane.agent.logs")

DEFAULT_LOG_MAX_BYTES = 16 * 2**20
DEFAULT_LOG_RETENTION_S = 7 * 86400.0
_DROPPED = ".dropped"


def _whole_characters(raw: bytes) -> bytes:
    """``raw`` without a UTF-8 sequence cut at its end (the rest comes with the next chunk)."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte < 0x80:
            return raw  # ASCII: nothing is cut
        if byte >= 0xC0:  # the lead byte of the last sequence: is it complete?
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return raw if back >= length else raw[:-back]
    return raw  # only continuation bytes: not UTF-8 anyway, sent as it is (U+FFFD)


class LogFiles:
    """Reads, trims and expires the logs under one agent work dir."""

    def __init__(
        self,
        work_dir: Path,
        *,
        max_bytes: int = DEFAULT_LOG_MAX_BYTES,
        retention_s: float = DEFAULT_LOG_RETENTION_S,
    ) -> None:
        self.placements = work_dir / "logs"
        self.functions = work_dir / "functions"
        self.max_bytes = max_bytes
        self.retention_s = retention_s

    def path(self, source: str, log_id: str) -> Path | None:
        """The file of a log, or None (unknown source, an id that is not a plain name, no file)."""
        if not LOG_ID.match(log_id):
            return None
        if source == "placement":
            path = self.placements / f"{log_id}.log"
            return path if path.is_file() else None
        if source == "function":
            return next((p for p in self.functions.glob(f"*/{log_id}.log") if p.is_file()), None)
        return None

    @staticmethod
    def dropped(path: Path) -> int:
        try:
            return int(path.with_name(path.name + _DROPPED).read_text())
        except (OSError, ValueError):
            return 0

    def read(self, request: LogRequestV1, room: int) -> LogChunkV1:
        """The chunk ``request`` asks for, encoded within ``room`` bytes."""
        path = self.path(request.source, request.id)
        if path is None:
            return LogChunkV1(request_id=request.request_id, found=False)
        dropped = self.dropped(path)
        want = max(1, min(request.max_bytes, MAX_LOG_CHUNK, room))
        with path.open("rb") as file:
            physical = file.seek(0, 2)
            if request.tail_lines is not None:
                start = self._tail_start(file, physical, min(request.tail_lines, MAX_TAIL_LINES), want)
            else:
                start = min(max(0, request.offset - dropped), physical)
            file.seek(start)
            raw = _whole_characters(file.read(min(want, physical - start)))
        while True:  # JSON escaping can grow text up to 6x: halve until the reply fits
            chunk = LogChunkV1(
                request_id=request.request_id,
                found=True,
                data=raw.decode("utf-8", errors="replace"),
                offset=dropped + start,
                next_offset=dropped + start + len(raw),
                size=dropped + physical,
                dropped=dropped,
            )
            if len(encode(chunk)) <= room or not raw:
                return chunk
            raw = _whole_characters(raw[: len(raw) // 2])

    @staticmethod
    def _tail_start(file: BinaryIO, physical: int, lines: int, want: int) -> int:
        """Where the last ``lines`` lines begin (within the last ``want`` bytes)."""
        begin = max(0, physical - want)
        file.seek(begin)
        block = file.read(physical - begin)
        end = len(block) - 1 if block.endswith(b"\n") else len(block)
        position = end
        for _ in range(lines):
            position = block.rfind(b"\n", 0, position)
            if position < 0:
                return begin
        return begin + position + 1

    # --- limits ------------------------------------------------------------------------------

    def _files(self) -> Iterator[Path]:
        yield from self.placements.glob("*.log")
        yield from self.functions.glob("*/*.log")

    def enforce(self, live: set[str], now: float | None = None) -> tuple[int, int]:
        """Trim logs over the size limit, delete those of ended work past retention (``live``:
        ids of running placements and instances, never deleted); returns (trimmed, deleted)."""
        now = time.time() if now is None else now
        trimmed = deleted = 0
        for path in list(self._files()):
            try:
                stat = path.stat()
                if path.stem not in live and now - stat.st_mtime > self.retention_s:
                    path.unlink()
                    path.with_name(path.name + _DROPPED).unlink(missing_ok=True)
                    deleted += 1
                elif stat.st_size > self.max_bytes:
                    self._trim(path)
                    trimmed += 1
            except OSError as exc:  # gone meanwhile, or unreadable: the next round tries again
                log.debug("log %s: %s", path, exc)
        return trimmed, deleted

    def _trim(self, path: Path) -> None:
        keep = self.max_bytes // 2
        with path.open("r+b") as file:
            size = file.seek(0, 2)
            file.seek(size - keep)
            tail = file.read(keep)
            newline = tail.find(b"\n", 0, 4096)  # start at a line when one begins near the cut
            if newline >= 0:
                tail = tail[newline + 1 :]
            file.seek(0)
            file.write(tail)
            file.truncate(len(tail))
        removed = size - len(tail)
        path.with_name(path.name + _DROPPED).write_text(str(self.dropped(path) + removed))
        log.info("log %s over %d bytes: dropped its oldest %d", path.name, self.max_bytes, removed)


class LogService:
    """Answers the hub's ``logs`` requests and enforces the limits every ``interval_s``."""

    def __init__(
        self, files: LogFiles, link: HubLink, live: Callable[[], set[str]], interval_s: float = 30.0
    ) -> None:
        self.files = files
        self.link = link
        self.live = live
        self.interval_s = interval_s

    async def on_request(self, msg: Msg) -> None:
        try:
            request = decode(msg.data, LogRequestV1)
        except MessageError as exc:
            self.link.malformed("log_request", exc)
            return
        self.link.heard_hub()
        room = self.link.max_payload() - PAYLOAD_MARGIN
        chunk = await asyncio.to_thread(self.files.read, request, room)
        await self.link.reply(msg, chunk)

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await asyncio.to_thread(self.files.enforce, self.live())
