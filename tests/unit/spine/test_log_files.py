"""The agent's logs: bounded chunks with logical offsets, tails, trims and retention."""

from __future__ import annotations

import os
import time
from pathlib import Path

from edgeplane_contract.codec import encode
from edgeplane_contract.logs import LogRequestV1

from edge_agent.logs import LogFiles, _whole_characters

ID = "0123456789abcdef0123456789abcdef"


def _files(tmp_path: Path, **kwargs: object) -> LogFiles:
    (tmp_path / "logs").mkdir()
    return LogFiles(tmp_path, **kwargs)  # type: ignore[arg-type]


def _ask(files: LogFiles, room: int = 1 << 20, **kwargs: object) -> object:
    return files.read(LogRequestV1(request_id="r", source="placement", id=ID, **kwargs), room)  # type: ignore[arg-type]


def test_chunks_follow_offsets_to_the_end(tmp_path: Path) -> None:
    files = _files(tmp_path)
    (tmp_path / "logs" / f"{ID}.log").write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    offset, text = 0, ""
    for _ in range(100):
        chunk = _ask(files, offset=offset, max_bytes=1000)
        assert chunk.found and chunk.offset == offset
        text += chunk.data
        if chunk.next_offset == chunk.size:
            break
        offset = chunk.next_offset
    assert text.splitlines() == [f"line {i}" for i in range(1000)]


def test_tail_returns_the_last_lines(tmp_path: Path) -> None:
    files = _files(tmp_path)
    (tmp_path / "logs" / f"{ID}.log").write_bytes(b"a\nb\nc\nd\n")
    assert _ask(files, tail_lines=2).data == "c\nd\n"
    assert _ask(files, tail_lines=10).data == "a\nb\nc\nd\n"
    (tmp_path / "logs" / f"{ID}.log").write_bytes(b"a\nb\nno newline yet")
    assert _ask(files, tail_lines=1).data == "no newline yet"


def test_a_chunk_never_splits_a_character_and_fits_its_message(tmp_path: Path) -> None:
    assert _whole_characters("aé".encode()[:-1]) == b"a"
    assert _whole_characters("a€".encode()) == "a€".encode()
    files = _files(tmp_path)
    (tmp_path / "logs" / f"{ID}.log").write_text("€" * 10_000, encoding="utf-8")
    chunk = _ask(files, max_bytes=1001)  # 1001 bytes would cut the 334th euro sign
    assert chunk.data == "€" * 333 and chunk.next_offset == 999
    small = _ask(files, room=2000, max_bytes=60_000)  # escaped \u20ac is 6 bytes a character
    assert len(encode(small)) <= 2000 and small.data and set(small.data) == {"€"}


def test_unknown_ids_and_paths_are_not_found(tmp_path: Path) -> None:
    files = _files(tmp_path)
    (tmp_path / "secret.log").write_text("no")
    for bad in ("../secret", "..", "", "a/b", ID + "x" * 40):
        assert files.path("placement", bad) is None
    assert not _ask(files).found
    assert files.path("elsewhere", ID) is None


def test_a_trim_keeps_the_newest_half_and_offsets_logical(tmp_path: Path) -> None:
    files = _files(tmp_path, max_bytes=64 * 1024)
    path = tmp_path / "logs" / f"{ID}.log"
    path.write_bytes(b"".join(b"%06d\n" % i for i in range(20_000)))  # 140,000 bytes
    assert files.enforce(live={ID}) == (1, 0)
    assert path.stat().st_size <= 32 * 1024
    chunk = _ask(files, tail_lines=1)
    assert chunk.data == "019999\n" and chunk.size == 140_000 and chunk.next_offset == 140_000
    early = _ask(files, offset=0, max_bytes=7)  # what was dropped: the oldest kept bytes instead
    assert early.offset == early.dropped and early.data.endswith("\n") and len(early.data) == 7
    with path.open("ab") as writer:  # the writer appends at the new end
        writer.write(b"020000\n")
    assert _ask(files, offset=140_000).data == "020000\n"


def test_retention_deletes_logs_of_ended_work_only(tmp_path: Path) -> None:
    files = _files(tmp_path, retention_s=3600)
    old, running = tmp_path / "logs" / "old.log", tmp_path / "logs" / "running.log"
    (tmp_path / "functions" / "echo-v1").mkdir(parents=True)
    instance = tmp_path / "functions" / "echo-v1" / "abc123.log"
    for path in (old, running, instance):
        path.write_text("x\n")
        stale = time.time() - 7200
        os.utime(path, (stale, stale))
    assert files.enforce(live={"running"}) == (0, 2)
    assert running.exists() and not old.exists() and not instance.exists()
