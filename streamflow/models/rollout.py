"""A rollout: a candidate version beside the stable one, and which records meet which.

A ``ModelDescriptor`` with a ``rollout`` is a candidate. Its mode says what it gets:

* ``SHADOW``: every record; only the stable result goes on, the candidate's goes to the
  serving streamlet's ``shadow`` outlet (same key, same lineage);
* ``CANARY``: the records of ``share`` percent of the keys;
* ``AB``: the same split between two named arms, kept until it is ended;
* ``END``: the candidate of that version leaves (rolled back; or promoted, once the same
  version has come as the stable descriptor).

Which keys the candidate serves is a hash of the key salted with the candidate's version
(:func:`candidate_rows`; :func:`key_hashes`, 64 bits, computed for a batch at once): one
key meets one version for the whole rollout, every replica agrees without talking, a
bigger share keeps the keys a smaller one had, and a batch read again after an abort
splits the same way. A record without a key is placed by where it
was read (topic, partition, offset), which is as stable.

On the control topic the stable descriptor is keyed by the model's name and the
candidate by :func:`candidate_key`, so compaction keeps the latest of each role and a
replica that starts later replays the same state.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

__all__ = [
    "BUCKETS",
    "Rollout",
    "RolloutMode",
    "candidate_key",
    "candidate_rows",
    "key_hashes",
]

#: The hash's resolution: a share is a whole number of these buckets (0.01% each).
BUCKETS = 10_000

Places = Sequence[tuple[str, int, int]]  # each record's topic, partition and offset


class RolloutMode(enum.StrEnum):
    """``streamflow.ml.RolloutMode``: what a candidate gets."""

    SHADOW = "SHADOW"
    CANARY = "CANARY"
    AB = "AB"
    END = "END"


def candidate_key(model: str) -> str:
    """The control topic's key of a model's candidate (the stable one's is its name)."""
    return f"{model}#candidate"


@dataclasses.dataclass(frozen=True)
class Rollout:
    """What a candidate descriptor asks for (see the module docstring)."""

    mode: RolloutMode
    share: float = 0.0  # percent of the keys (CANARY, AB)
    arms: tuple[str, ...] = ()  # AB: the stable arm's name, then the candidate's

    @classmethod
    def from_record(cls, value: Mapping[str, Any]) -> Rollout:
        return cls(
            mode=RolloutMode(value["mode"]),
            share=float(value.get("share", 0.0)),
            arms=tuple(value.get("arms") or ()),
        )

    def to_record(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "share": self.share, "arms": list(self.arms)}

    def refusal(self) -> str | None:
        """Why a replica must not follow this rollout, or None."""
        in_range = math.isfinite(self.share) and 0.0 <= self.share <= 100.0
        if self.splits and not in_range:
            return f"share {self.share} is out of range: give a percent from 0 to 100"
        if self.mode is RolloutMode.AB:
            if len(self.arms) != 2 or not all(a.strip() for a in self.arms):
                return "an AB rollout names two arms: the stable one's, then the candidate's"
            if self.arms[0] == self.arms[1]:
                return f"the two arms are both called {self.arms[0]!r}"
            if any(len(a) > 64 for a in self.arms):
                return "an arm's name is at most 64 characters"
        elif self.arms:
            return f"arms are for AB rollouts, not {self.mode.value}"
        return None

    @property
    def splits(self) -> bool:
        """Whether the candidate serves a share of the keys (rather than a shadow of all)."""
        return self.mode in (RolloutMode.CANARY, RolloutMode.AB)

    def describe(self) -> str:
        """How a status line says it: ``canary 5% of the keys``."""
        if self.mode is RolloutMode.SHADOW:
            return "shadow of every record"
        if self.mode is RolloutMode.END:
            return "ended"
        share = f"{self.share:g}% of the keys"
        if self.mode is RolloutMode.AB:
            return f"ab: {self.arms[1]} {share}, {self.arms[0]} the rest"
        return f"canary {share}"

    def arm(self, candidate: bool) -> str:
        """The arm's name an output of an AB rollout carries ("" otherwise)."""
        if self.mode is not RolloutMode.AB:
            return ""
        return self.arms[1] if candidate else self.arms[0]


def candidate_rows(
    share: float,
    salt: int,
    keys: Sequence[bytes | None],
    places: Places | Callable[[], Places] | None = None,
) -> np.ndarray:
    """Which of these records the candidate serves (a bool per record), at ``share``
    percent of the keys; ``salt`` is the candidate's version. ``places`` (topic,
    partition, offset per record, or what makes them when a record has no key) place a
    record that has no key."""
    threshold = round(share * BUCKETS / 100)
    if threshold <= 0:
        return np.zeros(len(keys), dtype=bool)
    if threshold >= BUCKETS:
        return np.ones(len(keys), dtype=bool)
    try:
        hashed = key_hashes(cast("Sequence[bytes]", keys), salt)
    except TypeError:  # len(None): a record without a key, placed by where it was read
        if None not in keys:
            raise
        if places is None:
            raise ValueError("a record without a key needs its place to be split") from None
        where = places() if callable(places) else places
        placed = [
            key if key is not None else "\0{}/{}/{}".format(*where[index]).encode()
            for index, key in enumerate(keys)
        ]
        hashed = key_hashes(placed, salt)
    return hashed % BUCKETS < threshold


#: Keys longer than this are hashed by their 128-bit digest (see :func:`key_hashes`).
LONG_KEY = 256
_PRIME = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime
_OFFSET = 0xCBF29CE484222325  # and its offset basis


def key_hashes(keys: Sequence[bytes], salt: int) -> np.ndarray:
    """A 64-bit hash of each key, salted, computed for the whole batch at once (numpy,
    8 bytes of every key a step): FNV-1a over the key's 64-bit words, its length mixed
    in, then splitmix64's finalizer, so that neighbouring keys land far apart. The same
    on every replica and every machine (little-endian words, whatever the host)."""
    n = len(keys)
    if not n:
        return np.zeros(0, dtype=np.uint64)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    if int(lengths.max()) > LONG_KEY:
        # a key past LONG_KEY bytes is hashed by its digest: a batch costs at most
        # n * LONG_KEY bytes and LONG_KEY / 8 steps, whatever key a producer sends
        keys = [
            key
            if len(key) <= LONG_KEY
            else b"\1"
            + hashlib.blake2b(key, digest_size=16).digest()
            + len(key).to_bytes(8, "little")
            for key in keys
        ]
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    words = max(1, -(-int(lengths.max()) // 8))
    # numpy's fixed-width bytes pad each key with zeros to the row's width: the words
    # the hash reads (a key's own trailing zero bytes are told apart by its length)
    values = np.array(keys, dtype=f"S{words * 8}").view("<u8").reshape(n, words)
    seed = (_OFFSET ^ _mix(salt & 0xFFFFFFFFFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF
    hashed = np.full(n, seed, dtype=np.uint64)
    shortest = int(lengths.min())
    with np.errstate(over="ignore"):
        for word in range(words):
            mixed = (hashed ^ values[:, word]) * _PRIME
            # a word past a key's end leaves its hash as it was
            hashed = mixed if word * 8 < shortest else np.where(word * 8 < lengths, mixed, hashed)
        hashed ^= lengths.astype(np.uint64)
        hashed ^= hashed >> np.uint64(30)
        hashed *= np.uint64(0xBF58476D1CE4E5B9)
        hashed ^= hashed >> np.uint64(27)
        hashed *= np.uint64(0x94D049BB133111EB)
        hashed ^= hashed >> np.uint64(31)
    return hashed


def _mix(value: int) -> int:
    """splitmix64's finalizer on one integer (the salt)."""
    mask = 0xFFFFFFFFFFFFFFFF
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & mask
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & mask
    return value ^ (value >> 31)
