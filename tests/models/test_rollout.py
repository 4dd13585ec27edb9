"""Which records a rollout's candidate meets: a sticky, agreed split by the record's key."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.kinds import ModelKind
from streamflow.models.rollout import (
    Rollout,
    RolloutMode,
    candidate_key,
    candidate_rows,
    key_hashes,
)

pytestmark = pytest.mark.unit

KEYS = [f"customer-{i}".encode() for i in range(100_000)]


@pytest.mark.parametrize("share", [1.0, 5.0, 25.0, 50.0, 90.0])
def test_the_share_of_100000_keys_is_within_one_point_of_the_target(share: float) -> None:
    chosen = candidate_rows(share, 7, KEYS)
    assert abs(chosen.mean() * 100 - share) < 1.0


def test_a_key_meets_one_version_however_often_and_wherever_it_comes() -> None:
    keys = KEYS[:5000]
    first = candidate_rows(25.0, 7, keys)
    # another replica, another batch: the same keys in another order and with repeats
    order = np.random.default_rng(0).permutation(len(keys))
    again = candidate_rows(25.0, 7, [keys[i] for i in order] * 2)
    assert (again[: len(keys)] == first[order]).all() and (again[len(keys) :] == first[order]).all()


def test_a_bigger_share_keeps_every_key_a_smaller_one_had() -> None:
    small, bigger = candidate_rows(5.0, 3, KEYS), candidate_rows(25.0, 3, KEYS)
    assert small.sum() > 0 and (bigger[small]).all()


def test_another_candidate_version_picks_other_keys() -> None:
    one, other = candidate_rows(10.0, 3, KEYS), candidate_rows(10.0, 4, KEYS)
    overlap = (one & other).sum() / one.sum()
    assert 0.05 < overlap < 0.2  # independent choices overlap about as much as the share


def test_the_hash_of_a_key_is_the_same_everywhere_and_in_every_release() -> None:
    # replicas of different releases and machines must agree on every key's version
    assert key_hashes([b"customer-1", b"", b"a", b"a\0"], 2).tolist() == [
        16993995400574716115,
        4060990635338107402,
        17908029066020374877,
        4201271036536120489,
    ]
    long = b"k" * 1000  # a key of many words: each counts
    assert key_hashes([long], 2)[0] != key_hashes([long[:-1] + b"j"], 2)[0]


def test_a_huge_key_costs_a_batch_no_more_than_a_long_one() -> None:
    # a producer can send a key of a megabyte: a key past LONG_KEY is hashed by its digest,
    # so the batch's buffer stays within LONG_KEY bytes a row (5000 rows, not 5 GB)
    keys = [f"k{i}".encode() for i in range(5000)] + [b"x" * 2**20]
    hashed = key_hashes(keys, 7)
    assert hashed[:5000].tolist() == key_hashes(keys[:5000], 7).tolist()  # the others unchanged
    assert hashed[-1] != key_hashes([b"x" * (2**20 - 1)], 7)[0]


def test_no_share_meets_nothing_and_all_of_it_meets_everything() -> None:
    assert not candidate_rows(0.0, 1, KEYS[:100]).any()
    assert candidate_rows(100.0, 1, KEYS[:100]).all()


def test_a_record_without_a_key_is_placed_by_where_it_was_read() -> None:
    places = [("in", i % 3, i) for i in range(20_000)]
    chosen = candidate_rows(30.0, 1, [None] * len(places), places)
    assert abs(chosen.mean() * 100 - 30.0) < 1.5
    assert (candidate_rows(30.0, 1, [None] * len(places), places) == chosen).all()
    with pytest.raises(ValueError, match="without a key needs its place"):
        candidate_rows(30.0, 1, [None])


def test_places_can_be_made_only_when_a_record_has_no_key() -> None:
    places = [("in", 0, i) for i in range(1000)]
    keys = [None if i % 4 == 0 else b"k%d" % i for i in range(1000)]
    made: list[int] = []

    def make() -> list[tuple[str, int, int]]:
        made.append(1)
        return places

    assert (candidate_rows(40.0, 3, keys, make) == candidate_rows(40.0, 3, keys, places)).all()
    assert len(made) == 1
    assert (candidate_rows(40.0, 3, KEYS, make) == candidate_rows(40.0, 3, KEYS)).all()
    assert len(made) == 1  # every record had a key: no places made


@pytest.mark.parametrize(
    ("rollout", "refusal"),
    [
        (Rollout(RolloutMode.CANARY, share=101.0), "share 101.0 is out of range"),
        (Rollout(RolloutMode.CANARY, share=-1.0), "share -1.0 is out of range"),
        (Rollout(RolloutMode.CANARY, share=math.nan), "out of range"),
        (Rollout(RolloutMode.AB, share=50.0, arms=("a",)), "names two arms"),
        (Rollout(RolloutMode.AB, share=50.0, arms=("a", "a")), "both called 'a'"),
        (Rollout(RolloutMode.AB, share=50.0, arms=("a", " ")), "names two arms"),
        (Rollout(RolloutMode.AB, share=50.0, arms=("a", "b" * 65)), "at most 64"),
        (Rollout(RolloutMode.CANARY, share=5.0, arms=("a", "b")), "arms are for AB"),
    ],
)
def test_a_rollout_out_of_its_bounds_is_refused_saying_why(rollout: Rollout, refusal: str) -> None:
    found = rollout.refusal()
    assert found is not None and refusal in found


def test_valid_rollouts_are_not_refused_and_say_what_they_do() -> None:
    assert Rollout(RolloutMode.SHADOW).refusal() is None
    assert Rollout(RolloutMode.CANARY, share=5.0).describe() == "canary 5% of the keys"
    ab = Rollout(RolloutMode.AB, share=30.0, arms=("control", "treatment"))
    assert ab.refusal() is None and ab.arm(True) == "treatment" and ab.arm(False) == "control"
    assert ab.describe() == "ab: treatment 30% of the keys, control the rest"


def test_a_candidate_descriptor_round_trips_as_a_record_and_has_its_own_key() -> None:
    descriptor = ModelDescriptor(
        "wine", 3, ModelKind.ONNX, data=b"x", rollout=Rollout(RolloutMode.CANARY, share=5.0)
    )
    again = ModelDescriptor.from_record(descriptor.to_record())
    assert again.rollout == descriptor.rollout and again.artifact == descriptor.artifact
    assert ModelDescriptor.from_record({**descriptor.to_record(), "rollout": None}).rollout is None
    assert candidate_key("wine") == "wine#candidate"
