"""Durable streamlet state: a key-value store per input partition, that survives restarts.

A streamlet that sets ``stateful = True`` gets ``self.state``. What it keeps
there outlives the process: the runtime backs each store with a local SQLite
file and a compacted changelog topic, and restores a partition's store when
the partition is assigned, before any of its records reaches the logic. So a
restarted, rescheduled or rebalanced replica carries on where the last owner
of the partition stopped, as Kafka Streams and Quix Streams do.

State is scoped like the records it is built from: one store per partition of
each data inlet (``self.state.of(record)``). That is what lets a partition
move to another replica with its state, and it makes what the state holds
independent of how partitions happen to be spread over replicas.

Writes belong to the batch that makes them. They reach the changelog with the
batch's outputs and count only if the batch does: a batch retried after a
``Backpressure`` or an aborted transaction starts from the state it started
from. Under exactly-once the changelog is written inside the batch's
transaction, so state, outputs and offsets move together; under
at-least-once, as for outputs, a record replayed after a crash may be applied
to the state a second time.

Values are typed data, not pickles (a changelog is read back into the process,
and a pickle would run whatever it was made to): ``None``, ``bool``, ``int``,
``float``, ``str``, ``bytes``, lists, tuples, dicts with string keys, and
numpy arrays, nested up to 32 levels deep (an array takes two), with up to
1,000,000 items in all and 16 MiB of bytes. Anything else is refused by ``set``,
when the logic can still say what it meant; a value in the changelog that is
not of these (written by another program) is refused when read: the record
whose logic read it is dead-lettered, saying so. A value read is the store's
own copy: change it, then ``set`` it again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["Located", "State", "StateError", "Store"]


class StateError(Exception):
    """State asked for where there is none: a streamlet not stateful, a partition not held."""


class Store(Protocol):
    """The key-value state of one input partition."""

    def get(self, key: str, default: Any = None) -> Any:
        """The value under ``key``, or ``default``."""

    def set(self, key: str, value: Any) -> None:
        """Keep ``value`` under ``key``; a ``TypeError`` now if it is not storable."""

    def delete(self, key: str) -> None:
        """Forget ``key`` (nothing happens if it is not there)."""

    def keys(self, prefix: str = "") -> list[str]:
        """The keys that start with ``prefix``, in order."""

    def __contains__(self, key: object) -> bool: ...


class Located(Protocol):
    """Where a record came from: what ``State.of`` needs of a ``Record``."""

    @property
    def inlet(self) -> str: ...

    @property
    def partition(self) -> int: ...


class State(Protocol):
    """What ``self.state`` is: the stores of the partitions this replica holds."""

    def of(self, record: Located) -> Store:
        """The store of the partition ``record`` came from."""

    def partition(self, inlet: str, partition: int) -> Store:
        """The store of partition ``partition`` of inlet ``inlet``; StateError if not held."""

    def held(self) -> list[tuple[str, int]]:
        """(inlet, partition) of every store this replica holds now."""

    def __iter__(self) -> Iterator[tuple[str, int]]: ...
