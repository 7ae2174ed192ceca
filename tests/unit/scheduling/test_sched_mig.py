"""MIG geometry: NVIDIA's A100-40GB placement rules, fragmentation value, fragment merge."""

from __future__ import annotations

import pytest

from edgeplane_contract.mig import (
    MIG_SPECS,
    VALUE_TABLE,
    fits,
    legal_starts,
    make_room,
    occupancy,
    repack,
)


@pytest.mark.parametrize(
    ("profile", "starts", "memory_slices", "compute"),
    [
        ("1g.5gb", (0, 1, 2, 3, 4, 5, 6), 1, 1),
        ("2g.10gb", (0, 2, 4), 2, 2),
        ("3g.20gb", (0, 4), 4, 3),
        ("4g.20gb", (0,), 4, 4),
        ("7g.40gb", (0,), 8, 7),
    ],
)
def test_profiles_match_the_nvidia_placement_table(profile, starts, memory_slices, compute):
    spec = MIG_SPECS[profile]
    assert spec.starts == starts
    assert spec.memory_slices == memory_slices
    assert spec.compute == compute


def test_an_empty_gpu_accepts_every_profile_only_at_its_legal_starts():
    for name, spec in MIG_SPECS.items():
        assert legal_starts(0, 0, name) == list(spec.starts)
    assert not fits(0, 0, "2g.10gb", 1)  # 2g must start on an even slice
    assert not fits(0, 0, "3g.20gb", 2)
    assert not fits(0, 0, "7g.40gb", 1)


def test_overlapping_memory_slices_are_refused():
    occ, comp = occupancy([("3g.20gb", 4)])
    assert occ == 0b11110000
    assert not fits(occ, comp, "2g.10gb", 4)
    assert not fits(occ, comp, "1g.5gb", 6)
    assert fits(occ, comp, "4g.20gb", 0)


def test_compute_slices_are_limited_to_seven():
    # 3g at 0 leaves memory slices 4-7 free, but 3g+4g would need 7 compute... that is legal:
    occ, comp = occupancy([("3g.20gb", 0)])
    assert fits(occ, comp, "3g.20gb", 4)
    # Seven 1g instances use all compute: slice 7 (memory only) cannot host anything.
    occ, comp = occupancy([("1g.5gb", s) for s in range(7)])
    assert comp == 7
    assert legal_starts(occ, comp, "1g.5gb") == []
    # 4g + 2g + 1g = 7 compute, memory 0-6: nothing else fits.
    occ, comp = occupancy([("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)])
    assert all(legal_starts(occ, comp, p) == [] for p in MIG_SPECS)


def test_a_lone_small_instance_is_best_at_the_high_slice():
    empty = VALUE_TABLE[0, 0]
    loss = {s: empty - VALUE_TABLE[1 << s, 1] for s in range(7)}
    assert min(loss, key=lambda s: (loss[s], s)) == 6
    assert loss[6] < loss[0]


def test_make_room_moves_the_fewest_instances_to_free_a_7g_gpu():
    # GPU 0 holds one movable 1g at slice 0; GPU 1 has room for it.
    gpus = [[("a", "1g.5gb", 0)], [("b", "3g.20gb", 0)]]
    result = make_room(gpus, {"a", "b"}, "7g.40gb")
    assert result is not None
    (target, start), moves = result
    assert (target, start) == (0, 0)
    assert list(moves) == ["a"]
    assert moves["a"][0] == 1


def test_make_room_never_moves_pinned_instances():
    gpus = [[("a", "1g.5gb", 0)], [("b", "1g.5gb", 0)]]
    assert make_room(gpus, set(), "7g.40gb") is None


def test_repack_places_everything_or_nothing():
    layout = repack([(0, 0), (0, 0)], [("a", "4g.20gb"), ("b", "3g.20gb")], ["7g.40gb"])
    assert layout is not None
    moves, incoming = layout
    assert {moves["a"][0], moves["b"][0]} == {1 - incoming[0][0]}
    assert repack([(0, 0)], [("a", "4g.20gb")], ["7g.40gb"]) is None
