"""Evidence per model version: predictions, shadows and delayed labels, per window.

:class:`RolloutEvidence` reads a serving streamlet's outputs (``predictions``), a labels
topic (``labels``: the record key, the true value, and when it became known) and,
optionally, the candidate's shadow outputs (``shadow``). Per window of each partition, and
per model seen (or only ``model``), it writes a ``RolloutEvidence`` record, keyed by the
model's name, with each version's
records, failures (records its candidate role failed, served by the stable version
instead), latency buckets, predicted classes, and the labels that met its predictions:
how many, how many right (or their squared error); also how often a shadowed candidate
agreed with the stable version on the same record, and the distance between the two
versions' class distributions. The rollout controller sums these over a step.

The join, in durable state. A prediction is kept under its key in its partition's store
until its *horizon* has passed: a label whose time is within ``horizon`` of the
prediction's meets it, whichever comes first, in any order. A label that finds no
prediction waits in its own partition's store for as long; one whose horizon passes
unmet is counted as unmatched, and a prediction whose horizon passes with no label as
unlabelled. A second label for a prediction already labelled is counted as a duplicate,
never twice. So what the windows add up to is what a batch join over the same records
gives, as long as each record is read no later than ``grace`` (of its partition's event
time) after the records it must meet have expired.

Time is event time: a prediction's record timestamp; a label's ``time_field``, or its
record timestamp. A label cannot be known after it was written: one whose time is past its
record's timestamp (and ``grace``) is refused, alone, saying so; one known longer before
it was written than ``horizon + grace`` can meet no prediction kept, and is counted
unmatched at once. So no label moves a clock further than its own record's time, and
what is kept is bounded by the horizon, whatever times a labels producer writes.
A partition's clock is the latest time it has seen; a window closes,
and its evidence is written, when the clock passes its end. Everything the streamlet
keeps is in the changelog-backed state, so a restarted replica goes on where the last
stopped (under exactly-once, without counting a record twice).

The stores of all partitions are read by each record (a label looks for its prediction in
every ``predictions`` partition), so producers need not share a partitioner; it runs as
one replica (``streamflow verify`` says so of more).

Bind the ports' schemas by subclassing::

    class WineEvidence(RolloutEvidence):
        predictions = Inlet("predictions", "examples.wine.WinePrediction")
        labels = Inlet("labels", "examples.wine.WineLabel")
        shadow = Inlet("shadow", "examples.wine.WinePrediction")  # optional
"""

from __future__ import annotations

import datetime as dt
import math
import time
from typing import Any

from streamflow.api import params
from streamflow.api.ports import Emit, Inlet, Outlet
from streamflow.api.state import Store
from streamflow.api.streamlet import Record, Streamlet
from streamflow.streamlets.rollout import tally
from streamflow.streamlets.served_by import FALLBACK, model_of, tag_of

__all__ = ["RolloutEvidence"]

EVIDENCE = "streamflow.ml.RolloutEvidence"
PREDICTIONS, LABELS, SHADOW = "predictions", "labels", "shadow"
_CLOCK = "clock"  # the partition's event time
_BUCKETS = "buckets"  # the windows (of their own times) that entries are indexed under
_SHARED = "_"  # the window's counters that belong to no version


class RolloutEvidence(Streamlet):
    """Evidence per model version and window, with delayed labels joined by key."""

    stateful = True
    max_replicas = 1  # a label looks for its prediction in the store of every partition

    predictions = Inlet(PREDICTIONS, description="the serving streamlet's outputs")
    labels = Inlet(LABELS, description="the true values, keyed as the predictions are")
    evidence = Outlet("evidence", EVIDENCE, description="per window, partition and version")

    model = params.Str(default="", description="the model watched (default: every model seen)")
    window = params.Duration(default="60s", min="1ms", description="the evidence windows")
    horizon = params.Duration(
        default="10m", min="0s", description="how long after a prediction its label may come"
    )
    grace = params.Duration(
        default="60s", min="0s", description="how late, past its horizon, a record is still met"
    )
    prediction_field = params.Str(default="predicted", description="the prediction's value")
    label_field = params.Str(default="label", description="the label's true value")
    time_field = params.Str(
        default="", description="the label's event time (ms), if not its record timestamp"
    )
    latency_field = params.Str(default="latency_ms", description="the model's latency, if any")
    task = params.Choice(
        ("classification", "regression"), default="classification", description="how labels score"
    )

    # -- the streamlet's logic -----------------------------------------------------------

    def process_batch(self, records: list[Record]) -> list[list[Emit]]:
        """Each record's closed windows; the windows' counters are kept in memory for the
        batch and written to the state once at its end (not once per record)."""
        self._open: dict[tuple[int, str], tuple[Store, dict[str, Any]]] = {}
        self._stores: dict[tuple[str, int], Store] = {}  # one object per store in a batch
        try:
            out = [self._one(record) for record in records]
            for (_, window), (store, counts) in self._open.items():
                store.set(window, counts)
        finally:
            self._open, self._stores = {}, {}
        return out

    def _store(self, inlet: str, partition: int) -> Store:
        found = self._stores.get((inlet, partition))
        if found is None:
            found = self._stores[(inlet, partition)] = self.state.partition(inlet, partition)
        return found

    def _counts(self, store: Store, window: str) -> dict[str, Any]:
        """The counters of ``window`` in ``store``, as this batch has them (a store is one
        object for the whole batch: :meth:`_store`)."""
        found = self._open.get((id(store), window))
        if found is None:
            found = self._open[(id(store), window)] = (store, store.get(window) or {})
        return found[1]

    def _written(self, store: Store) -> None:
        """Write this batch's counters of ``store`` now (its windows are about to close)."""
        for (owner, window), (mine, counts) in list(self._open.items()):
            if owner == id(store):
                mine.set(window, counts)
                del self._open[(owner, window)]

    def _one(self, record: Record) -> list[Emit]:
        store = self._store(record.inlet, record.partition)
        time_ms = self._time_of(record)
        if record.inlet == LABELS and time_ms < record.timestamp_ms - self._keep_ms:
            # known long before it was written: no prediction it could meet is kept
            closed = self._advance(store, record, record.timestamp_ms)
            self._shared(store, self.model, "unmatched")
            return closed
        closed = self._advance(store, record, time_ms)
        if record.inlet == LABELS:
            self._label(store, record, time_ms)
        else:
            self._prediction(store, record, time_ms)
        return closed

    def _time_of(self, record: Record) -> int:
        if record.inlet == LABELS and self.time_field:
            value = record.value.get(self.time_field)
            if isinstance(value, dt.datetime):  # a timestamp-millis field
                value = int(value.timestamp() * 1000)
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValueError(f"the label's {self.time_field} is not a time in ms: {value!r}")
            grace_ms = int(self.grace.total_seconds() * 1000)
            if value > record.timestamp_ms + grace_ms:
                raise ValueError(
                    f"the label's {self.time_field} {int(value)} is later than the record "
                    f"itself ({record.timestamp_ms}, grace {grace_ms} ms): a label is known "
                    "before it is written"
                )
            return int(value)
        return record.timestamp_ms

    def _prediction(self, store: Store, record: Record, time_ms: int) -> None:
        name, version = model_of(record)
        if self.model and name != self.model:
            return
        key = _key_of(record)
        shadow = record.inlet == SHADOW
        predicted = _scalar(record.value.get(self.prediction_field))
        window = _window_key(self._index(store.get(_CLOCK, time_ms)))
        counts = self._counts(store, window)
        ours = counts.setdefault(name, {})
        mine = ours.setdefault(_role(version, shadow), tally.empty())
        mine["records"] += 1
        if self.task == "classification" and predicted is not None:
            mine["classes"][str(predicted)] = mine["classes"].get(str(predicted), 0) + 1
        latency = record.value.get(self.latency_field)
        if isinstance(latency, int | float) and not isinstance(latency, bool):
            tally.tally_latency(mine, float(latency))
        failed = tag_of(record.headers.get(FALLBACK))
        if failed is not None and (not self.model or failed[0] == self.model):
            theirs = counts.setdefault(failed[0], {})
            theirs.setdefault(_role(failed[1], False), tally.empty())["failures"] += 1
        if key is None:  # no key, nothing to join
            return
        old = store.get(_entry_key(key))
        entry = {"n": name, "v": version, "s": shadow, "p": predicted, "t": time_ms, "m": False}
        if old is not None and old["m"] and old["v"] == version:
            entry["m"] = True  # read again (at-least-once): its label counted already
        other = self._find(PREDICTIONS if shadow else SHADOW, key)
        if other is not None:  # the same record, served by the other version
            shared = ours.setdefault(_SHARED, {})
            shared["compared"] = shared.get("compared", 0) + 1
            shared["agreed"] = shared.get("agreed", 0) + int(other[1]["p"] == predicted)
        seen = self._find(LABELS, key)
        if not entry["m"] and seen is not None and self._meets(seen[1]["t"], time_ms):
            self._score(mine, predicted, seen[1]["l"])
            entry["m"] = True
            if not seen[1]["m"]:
                seen[0].set(_entry_key(key), {**seen[1], "m": True})
        if old is not None and self._index(old["t"]) != self._index(time_ms):
            store.delete(_index_key(self._index(old["t"]), key))
        store.set(_entry_key(key), entry)
        self._indexed(store, time_ms, key)

    def _label(self, store: Store, record: Record, time_ms: int) -> None:
        """Score the predictions the label meets; keep it for those still to come."""
        key = _key_of(record)
        seen = store.get(_entry_key(key)) if key is not None else None
        if key is None or (seen is not None and self._meets(seen["t"], time_ms)):
            # a key's first label counts
            self._shared(store, self.model, "unmatched" if key is None else "duplicates")
            return
        label = _scalar(record.value.get(self.label_field))
        met = False
        for inlet in (PREDICTIONS, SHADOW):
            found = self._find(inlet, key)
            if found is None or found[1]["m"] or not self._meets(time_ms, found[1]["t"]):
                continue
            where, entry = found
            met = True
            clock = _window_key(self._index(where.get(_CLOCK, entry["t"])))
            counts = self._counts(where, clock)
            theirs = counts.setdefault(entry["n"], {})
            self._score(
                theirs.setdefault(_role(entry["v"], entry["s"]), tally.empty()), entry["p"], label
            )
            where.set(_entry_key(key), {**entry, "m": True})
        if seen is not None:
            store.delete(_index_key(self._index(seen["t"]), key))
        store.set(_entry_key(key), {"l": label, "t": time_ms, "m": met})
        self._indexed(store, time_ms, key)

    def _shared(self, store: Store, model: str, name: str) -> None:
        """Count one of the window's own (no version's): unmatched or duplicate labels."""
        window = _window_key(self._index(store.get(_CLOCK, 0)))
        shared = self._counts(store, window).setdefault(model, {}).setdefault(_SHARED, {})
        shared[name] = shared.get(name, 0) + 1

    @property
    def _keep_ms(self) -> int:
        """How long past its time an entry is kept: the horizon and the grace."""
        return self._horizon_ms + int(self.grace.total_seconds() * 1000)

    def _meets(self, first_ms: int, second_ms: int) -> bool:
        return abs(first_ms - second_ms) <= self._horizon_ms

    def _score(self, counters: dict[str, Any], predicted: Any, label: Any) -> None:
        if predicted is None or label is None:
            return
        counters["labelled"] += 1
        counters["correct"] += int(predicted == label)
        numbers = all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in (predicted, label)
        )
        if self.task == "regression" and numbers:
            counters["squared_error"] += (float(predicted) - float(label)) ** 2

    def _find(self, inlet: str, key: str) -> tuple[Store, dict[str, Any]] | None:
        """The entry kept under ``key`` in any partition of ``inlet``, and its store."""
        name = _entry_key(key)
        for held_inlet, partition in self.state.held():
            if held_inlet != inlet:
                continue
            store = self._store(held_inlet, partition)
            entry = store.get(name)
            if entry is not None:
                return store, entry
        return None

    # -- time: windows close, entries expire ------------------------------------------------

    @property
    def _window_ms(self) -> int:
        return max(1, int(self.window.total_seconds() * 1000))

    @property
    def _horizon_ms(self) -> int:
        return int(self.horizon.total_seconds() * 1000)

    def _index(self, time_ms: int) -> int:
        return time_ms // self._window_ms

    def _advance(self, store: Store, record: Record, time_ms: int) -> list[Emit]:
        """Move the partition's clock to ``time_ms``; the windows it closes, as evidence."""
        clock = store.get(_CLOCK)
        if clock is None:
            store.set(_CLOCK, time_ms)
            return []
        if time_ms <= clock:
            return []
        store.set(_CLOCK, time_ms)
        current = self._index(time_ms)
        if current == self._index(clock):
            return []
        self._expire(store, record.inlet, time_ms, into=_window_key(self._index(clock)))
        self._written(store)  # the windows below are read from the state
        closed = []
        for name in store.keys("w/"):
            index = int(name[2:])
            if index >= current:
                break
            counts = store.get(name)
            store.delete(name)
            closed += [
                self._evidence(record, index, model, mine) for model, mine in sorted(counts.items())
            ]
        return closed

    def _expire(self, store: Store, inlet: str, time_ms: int, *, into: str) -> None:
        """Forget what is past its horizon and grace; count the unmet, in window ``into``.
        Only the windows entries are kept under are visited, whatever times records
        claim, so a time far in the past or the future costs nothing more."""
        last = (time_ms - self._keep_ms) // self._window_ms  # windows before it are whole past
        buckets: list[int] = store.get(_BUCKETS) or []
        past = [index for index in buckets if index < last]
        if not past:
            return
        counts = self._counts(store, into)
        for index in past:
            for name in store.keys(_index_key(index, "")):
                key = name[16:]
                store.delete(name)
                entry = store.get(_entry_key(key))
                if entry is None or self._index(entry["t"]) != index:
                    continue  # replaced by a later one, indexed on its own
                store.delete(_entry_key(key))
                if entry["m"]:
                    continue
                if inlet == LABELS:
                    shared = counts.setdefault(self.model, {}).setdefault(_SHARED, {})
                    shared["unmatched"] = shared.get("unmatched", 0) + 1
                else:
                    theirs = counts.setdefault(entry["n"], {})
                    theirs.setdefault(_role(entry["v"], entry["s"]), tally.empty())[
                        "unlabelled"
                    ] += 1
        store.set(_BUCKETS, [index for index in buckets if index >= last])

    def _indexed(self, store: Store, time_ms: int, key: str) -> None:
        """Index ``key``'s entry under the window of ``time_ms``, for its expiry."""
        index = self._index(time_ms)
        store.set(_index_key(index, key), 1)
        buckets: list[int] = store.get(_BUCKETS) or []
        if index not in buckets:
            store.set(_BUCKETS, sorted([*buckets, index]))

    def _evidence(self, record: Record, index: int, model: str, counts: dict[str, Any]) -> Emit:
        """A window's evidence of one model (its versions, and the window's own counts)."""
        shared = counts.pop(_SHARED, {})
        versions = []
        for role, mine in sorted(counts.items()):
            version, _, shadow = role.partition("/")
            versions.append(
                {
                    "version": int(version),
                    "shadow": shadow == "shadow",
                    **{k: mine[k] for k in ("records", "failures", "labelled", "correct")},
                    "squared_error": float(mine["squared_error"]),
                    "unlabelled": mine["unlabelled"],
                    "classes": mine["classes"],
                    "latency": mine["latency"],
                    "latency_p50_ms": tally.percentile(mine["latency"], 0.5),
                    "latency_p99_ms": tally.percentile(mine["latency"], 0.99),
                }
            )
        by_class = [v["classes"] for v in versions if v["records"]]
        start = index * self._window_ms
        value = {
            "model": model,
            "inlet": record.inlet,
            "partition": record.partition,
            "window": index,
            "start_time": start,
            "end_time": start + self._window_ms,
            "versions": versions,
            "compared": shared.get("compared", 0),
            "agreed": shared.get("agreed", 0),
            "distance": tally.js_distance(by_class[0], by_class[1]) if len(by_class) == 2 else None,
            "unmatched_labels": shared.get("unmatched", 0),
            "duplicate_labels": shared.get("duplicates", 0),
            "time": int(time.time() * 1000),
        }
        return self.evidence(value, key=model)


def _key_of(record: Record) -> str | None:
    return record.key


def _scalar(value: Any) -> Any:
    """A prediction or label as the join compares it (a float that is whole, as an int)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _role(version: int, shadow: bool) -> str:
    return f"{version:012d}/shadow" if shadow else f"{version:012d}/"


def _window_key(index: int) -> str:
    return f"w/{index:013d}"


def _entry_key(key: str) -> str:
    return f"k/{key}"


def _index_key(index: int, key: str) -> str:
    return f"x/{index:013d}/{key}"
