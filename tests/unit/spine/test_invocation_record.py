"""The agent's record of finished invocations: it outlives the agent, within its bounds."""

from __future__ import annotations

import asyncio
import sqlite3

from edgeplane_contract.messages import InvokeResultV1, encode

from edge_agent.invocation_record import DELETE_BATCH, FinishedInvocations


def _result(invocation_id: str, value: object = None) -> tuple[InvokeResultV1, bytes]:
    result = InvokeResultV1(invocation_id=invocation_id, ok=True, result=value)
    return result, encode(result)


def test_finished_invocations_survive_a_reopen_with_their_results(tmp_path):
    path = tmp_path / "invocations.sqlite3"
    record = FinishedInvocations(path, max_count=10, max_bytes=2**20)
    for i in range(3):
        record.add(*_result(f"i{i}", {"n": i}))
    record.close()
    assert path.stat().st_mode & 0o777 == 0o600
    again = FinishedInvocations(path, max_count=10, max_bytes=2**20)
    assert len(again) == 3
    found = again.get("i1")
    assert found is not None and found[0].result == {"n": 1} and found[0].ok
    assert again.get("nope") is None


def test_the_oldest_go_first_beyond_the_count_and_the_bytes_also_on_disk(tmp_path):
    path = tmp_path / "invocations.sqlite3"
    record = FinishedInvocations(path, max_count=3, max_bytes=2**20)
    for i in range(5):
        record.add(*_result(f"i{i}"))
    assert [i for i in ("i0", "i1", "i2", "i3", "i4") if i in record] == ["i2", "i3", "i4"]
    record.close()
    big, payload = _result("big", "x" * 5000)
    small = FinishedInvocations(path, max_count=100, max_bytes=len(payload) + 10)
    assert len(small) == 3  # reopened: the three small ones fit
    small.add(big, payload)
    assert "big" in small and len(small) == 1  # the big one alone fills the byte bound
    small.close()
    assert "big" in FinishedInvocations(path, max_count=100, max_bytes=2**20)


def test_an_unreadable_file_leaves_the_record_in_memory(tmp_path):
    path = tmp_path / "invocations.sqlite3"
    path.write_bytes(b"not a database at all" * 100)
    record = FinishedInvocations(path, max_count=10, max_bytes=2**20)
    record.add(*_result("i1"))
    assert "i1" in record


async def test_results_recorded_in_one_loop_turn_are_on_disk_in_one_commit_before_any_returns(tmp_path):
    path = tmp_path / "invocations.sqlite3"
    record = FinishedInvocations(path, max_count=100, max_bytes=2**20)
    assert record._db is not None
    statements: list[str] = []
    record._db.set_trace_callback(statements.append)
    await asyncio.gather(*(record.record(*_result(f"i{i}", i)) for i in range(5)))
    # Another connection sees all five as soon as the calls returned: written before the answers.
    other = sqlite3.connect(path)
    assert other.execute("SELECT count(*) FROM finished").fetchone() == (5,)
    other.close()
    assert sum(s.startswith("COMMIT") for s in statements) == 1, statements
    assert all(f"i{i}" in record for i in range(5))
    record.close()


async def test_rows_of_results_past_the_bounds_go_in_batches_and_all_at_close(tmp_path):
    path = tmp_path / "invocations.sqlite3"
    record = FinishedInvocations(path, max_count=3, max_bytes=2**20)
    for i in range(DELETE_BATCH + 10):
        await record.record(*_result(f"i{i}"))
    assert len(record) == 3
    on_disk = sqlite3.connect(path)
    # The first full batch went with a write; the rest wait for the next one (or close).
    count = on_disk.execute("SELECT count(*) FROM finished").fetchone()[0]
    assert 3 < count < DELETE_BATCH + 3
    record.close()
    assert on_disk.execute("SELECT count(*) FROM finished").fetchone() == (3,)
    on_disk.close()
    reopened = FinishedInvocations(path, max_count=3, max_bytes=2**20)
    assert [f"i{i}" in reopened for i in range(DELETE_BATCH + 6, DELETE_BATCH + 10)] == [
        False,
        True,
        True,
        True,
    ]


async def test_a_result_recorded_again_after_it_went_is_not_deleted_with_its_old_row(tmp_path):
    path = tmp_path / "invocations.sqlite3"
    record = FinishedInvocations(path, max_count=2, max_bytes=2**20)
    for name in ("a", "b", "c"):  # "a" goes past the count bound
        await record.record(*_result(name))
    await record.record(*_result("a", "again"))  # ... and comes back ("b" goes)
    record.close()
    again = FinishedInvocations(path, max_count=2, max_bytes=2**20)
    found = again.get("a")
    assert found is not None and found[0].result == "again" and "c" in again and "b" not in again
