"""Ephemeral storage (issue 20, item 7): the work dir's measure, the spec field, the wire defaults
and the scheduler's fit. The kill itself runs against a real agent in
tests/functional/test_ephemeral_storage.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgeplane_contract.messages import CommandV1, FunctionCode, NodeResources, RunSpec, decode, encode
from edgeplane_contract.resources import DEFAULT_EPHEMERAL_STORAGE, ResourceRequest

from controlplane.errors import ValidationError
from controlplane.scheduling.model import NodeState, WorkloadRequest
from controlplane.scheduling.scheduler import Scheduler
from controlplane.serverless.spec import FunctionSpec
from controlplane.specs.workload import WorkloadSpec
from edge_agent.work_dir_usage import EXCEEDED, exceeded_message, free_bytes, usage_bytes

MiB, GiB = 2**20, 2**30


def _write(path: Path, size: int) -> None:
    path.write_bytes(os.urandom(size))  # real blocks, not a sparse file


# --- the measure -------------------------------------------------------------------------------


def test_usage_counts_the_files_in_nested_folders_by_their_blocks(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    _write(tmp_path / "one", 3 * MiB)
    _write(tmp_path / "a" / "b" / "two", 2 * MiB)
    usage = usage_bytes(tmp_path)
    assert 5 * MiB <= usage < 5 * MiB + 256 * 1024  # the files plus the folders' own blocks


def test_usage_follows_no_symlink_and_counts_a_hard_linked_file_once(tmp_path):
    outside, inside = tmp_path / "outside", tmp_path / "inside"
    outside.mkdir()
    inside.mkdir()
    _write(outside / "big", 4 * MiB)
    (inside / "to-file").symlink_to(outside / "big")
    (inside / "to-dir").symlink_to(outside, target_is_directory=True)
    assert usage_bytes(inside) < 64 * 1024
    _write(inside / "data", 1 * MiB)
    os.link(inside / "data", inside / "data-again")
    assert MiB <= usage_bytes(inside) < 2 * MiB


def test_a_sparse_file_counts_what_it_takes_not_its_length(tmp_path):
    with (tmp_path / "sparse").open("wb") as handle:
        handle.truncate(512 * MiB)
    assert usage_bytes(tmp_path) < MiB


def test_the_walk_stops_once_over_the_limit_and_after_max_entries(tmp_path):
    for k in range(20):
        _write(tmp_path / f"f{k}", MiB)
    assert usage_bytes(tmp_path) >= 20 * MiB
    early = usage_bytes(tmp_path, stop_above=3 * MiB)
    assert 3 * MiB < early < 6 * MiB
    assert usage_bytes(tmp_path, max_entries=2) < 4 * MiB


def test_a_missing_dir_measures_zero_and_the_node_reports_free_space(tmp_path):
    assert usage_bytes(tmp_path / "gone") == 0
    assert free_bytes(tmp_path) > 0
    assert free_bytes(tmp_path / "gone") == 0


def test_the_message_starts_with_the_reason_and_says_usage_and_limit():
    text = exceeded_message(9 * MiB, 8 * MiB)
    assert text.startswith(EXCEEDED + ":")
    assert str(9 * MiB) in text and str(8 * MiB) in text


# --- the spec and the wire ---------------------------------------------------------------------


def test_a_workload_without_the_field_gets_the_default_limit_and_the_run_command_carries_it():
    spec = WorkloadSpec.parse({"name": "w", "command": ["true"]})
    assert spec.resources.ephemeral_storage == DEFAULT_EPHEMERAL_STORAGE == GiB
    small = WorkloadSpec.parse({"name": "w", "command": ["true"], "resources": {"ephemeral_storage": "8Mi"}})
    assert small.run_spec([]).ephemeral_storage == 8 * MiB
    assert WorkloadSpec.from_stored(small.to_dict()).resources.ephemeral_storage == 8 * MiB
    # Stored before the field existed: the default.
    old = {"name": "w", "command": ["true"], "resources": {"cpu": 0.1, "memory": 64 * MiB}}
    assert WorkloadSpec.from_stored(old).resources.ephemeral_storage == GiB


@pytest.mark.parametrize("bad", ["lots", 0, -1, True, "1Xi", [1]])
def test_a_bad_amount_is_refused_naming_the_field(bad):
    with pytest.raises(ValidationError) as caught:
        WorkloadSpec.parse({"name": "w", "command": ["true"], "resources": {"ephemeral_storage": bad}})
    assert caught.value.field == "resources.ephemeral_storage"


def test_functions_get_the_same_field_with_the_same_default():
    body = {"name": "f", "source": "def h(e, c):\n    return e\n", "handler": "h"}
    spec = FunctionSpec.parse(body)
    spec.version = 1
    assert spec.code().ephemeral_storage == GiB
    assert spec.instance_request().resources.ephemeral_storage == GiB
    spec = FunctionSpec.parse({**body, "ephemeral_storage": "16Mi"})
    spec.version = 1
    assert spec.code().ephemeral_storage == 16 * MiB
    with pytest.raises(ValidationError) as caught:
        FunctionSpec.parse({**body, "ephemeral_storage": "much"})
    assert caught.value.field == "ephemeral_storage"


def test_messages_from_older_peers_decode_with_defaults():
    run = CommandV1(command_id="c", kind="run", placement_id="p", workload_id="w", spec=RunSpec(["true"]))
    raw = encode(run).replace(b',"ephemeral_storage":1073741824', b"")
    assert b"ephemeral_storage" not in raw
    decoded = decode(raw, CommandV1)
    assert decoded.spec is not None and decoded.spec.ephemeral_storage == GiB  # an older hub's command
    assert NodeResources(cpu=1.0, memory=GiB).ephemeral_storage == 0  # an older agent: not reported
    assert FunctionCode(name="f", version=1, runtime="python").ephemeral_storage == GiB


# --- placement ----------------------------------------------------------------------------------


def _request(wid: str, storage: int) -> WorkloadRequest:
    return WorkloadRequest(id=wid, resources=ResourceRequest(cpu=0.1, memory=MiB, ephemeral_storage=storage))


def test_placement_counts_ephemeral_storage_against_what_the_node_reports():
    sched = Scheduler("default", seed=0, clock=lambda: 0.0)
    sched.upsert_node(NodeState(name="n", cpu=64, memory=64 * GiB, ephemeral_storage=10 * GiB))
    assert sched.schedule(_request("a", 4 * GiB), enqueue=False).scheduled
    assert sched.schedule(_request("b", 4 * GiB), enqueue=False).scheduled
    assert sched.node("n").ephemeral_storage_allocated == 8 * GiB
    third = sched.schedule(_request("c", 4 * GiB), enqueue=False)
    assert not third.scheduled
    assert "Insufficient ephemeral-storage" in third.status.message()
    sched.release("a")
    assert sched.node("n").ephemeral_storage_allocated == 4 * GiB
    assert sched.schedule(_request("c", 4 * GiB), enqueue=False).scheduled
    never = sched.schedule(_request("d", 100 * GiB), enqueue=False)
    assert not never.scheduled and "too little ephemeral storage" in never.status.message()


def test_a_node_that_does_not_report_storage_is_not_limited_by_it():
    sched = Scheduler("default", seed=0, clock=lambda: 0.0)
    sched.upsert_node(NodeState(name="old", cpu=64, memory=64 * GiB))
    for k in range(5):
        assert sched.schedule(_request(f"w{k}", 2**50), enqueue=False).scheduled
