"""The agent's record of finished invocations: it outlives the agent, within its bounds."""

from __future__ import annotations

from edgeplane_contract.messages import InvokeResultV1, encode

from edge_agent.invocation_record import FinishedInvocations


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
