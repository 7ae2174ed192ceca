"""The hub's parsed-spec cache (``hub.spec_cache``) and the run command's size check without a
throw-away encode (``WorkloadSpec.check_fits``)."""

from __future__ import annotations

import pytest

from edgeplane_contract.messages import CommandV1, encode

from controlplane.errors import PayloadTooLargeError
from controlplane.hub.spec_cache import SpecCache
from controlplane.specs.workload import FIXED_COMMAND_BYTES, WorkloadSpec, json_size


def _spec(name: str = "w", **extra: object) -> WorkloadSpec:
    return WorkloadSpec.parse({"name": name, "command": ["true"], **extra})


def test_a_stored_spec_is_parsed_once_and_equals_the_posted_one() -> None:
    cache = SpecCache()
    posted = _spec(env={"A": "1"}, resources={"cpu": 0.5, "memory": "64Mi"})
    first = cache.of_row("w1", posted.to_dict())
    again = cache.of_row("w1", {"name": "ignored", "command": ["false"]})
    assert first is again  # the second row is not parsed
    assert first == posted


def test_the_least_recently_used_spec_goes_first() -> None:
    cache = SpecCache(kept=2)
    cache.put("a", _spec("a"))
    cache.put("b", _spec("b"))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", _spec("c"))
    assert cache.get("b") is None
    assert cache.get("a") is not None and cache.get("c") is not None
    assert len(cache) == 2


def _encoded(spec: WorkloadSpec) -> int:
    zero = "0" * 32
    command = CommandV1(
        command_id=zero, kind="run", placement_id=zero, workload_id=zero, spec=spec.run_spec([])
    )
    return len(encode(command))


def test_the_fixed_part_of_a_run_command_is_well_under_its_bound() -> None:
    # Every bounded field at its largest: what the fast path of check_fits assumes.
    spec = _spec(
        "x" * 63,
        resources={"cpu": 100000, "memory": "1000Ti", "mig": ["1g.5gb"] * 3},
        kind="inference",
        timeout_s=1e7,
        sla_latency_s=1e6,
        priority=-1000,
        restart_policy="on-failure",
        max_restarts=10000,
    )
    unbounded = json_size(spec.command) + json_size(spec.env) + 2 * json_size(spec.resources.mig)
    assert _encoded(spec) - unbounded < FIXED_COMMAND_BYTES / 4


@pytest.mark.parametrize("room_over", [-1, 0])
def test_check_fits_still_refuses_a_command_just_over_the_room(room_over: int) -> None:
    spec = _spec(env={"BIG": "v" * 50_000})
    size = _encoded(spec)
    if room_over < 0:
        with pytest.raises(PayloadTooLargeError) as caught:
            spec.check_fits(size - 1)
        assert caught.value.field == "env.BIG"
    else:
        spec.check_fits(size)  # exactly the room: fits
